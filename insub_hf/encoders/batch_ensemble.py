"""BatchEnsemble (Wen et al. 2020): rank-1 fast weights that turn one encoder into M members sharing its weights.

Every `nn.Linear` of the wrapped encoder becomes a `BatchEnsembleLinear`: member m computes
`((x * r_m) W^T) * s_m + b_m` with the shared W and its own vectors r_m (in), s_m (out) and bias b_m.
Row i of a batch goes through member `i % M`. In training each sample therefore sees one member (no extra
compute; with a per-view batch divisible by M both views of a sample use the same member); at evaluation
every input is repeated M times so that each member sees it, giving member representations `(B, M, d)`.
"""

from __future__ import annotations

import torch
from torch import nn

from .base import Encoder


class BatchEnsembleLinear(nn.Module):
    """A Linear layer shared by M members with per-member rank-1 factors and biases.

    Shapes: x `(N, ..., in)` -> `(N, ..., out)`; row i uses member `i % M`.

    Args:
        linear: the layer whose weight becomes the shared weight (its bias initialises every member's bias).
        ensemble_size: M.
    """

    def __init__(self, linear: nn.Linear, ensemble_size: int):
        super().__init__()
        self.ensemble_size = ensemble_size
        self.weight = nn.Parameter(linear.weight.detach().clone())  # (out, in), shared
        bias = linear.bias.detach() if linear.bias is not None else torch.zeros(linear.out_features)
        self.bias = nn.Parameter(bias.clone().repeat(ensemble_size, 1))  # (M, out)
        # Random-sign initialisation of the fast weights (Wen et al. 2020) makes the members differ from step 0.
        signs = lambda n: torch.randint(0, 2, (ensemble_size, n)).float() * 2 - 1  # noqa: E731
        self.fast_in = nn.Parameter(signs(linear.in_features))  # r: (M, in)
        self.fast_out = nn.Parameter(signs(linear.out_features))  # s: (M, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        member = torch.arange(x.shape[0], device=x.device) % self.ensemble_size  # (N,)
        expand = (x.shape[0],) + (1,) * (x.dim() - 2) + (-1,)  # (N, 1, ..., 1, features)
        r = self.fast_in[member].view(expand)
        s = self.fast_out[member].view(expand)
        b = self.bias[member].view(expand)
        return nn.functional.linear(x * r, self.weight) * s + b


def convert_to_batch_ensemble(module: nn.Module, ensemble_size: int) -> int:
    """Replaces every `nn.Linear` inside `module` by a `BatchEnsembleLinear` in place; returns how many."""
    count = 0
    for name, child in module.named_children():
        if isinstance(child, nn.Linear):
            setattr(module, name, BatchEnsembleLinear(child, ensemble_size))
            count += 1
        else:
            count += convert_to_batch_ensemble(child, ensemble_size)
    return count


class BatchEnsembleEncoder(Encoder):
    """An `Encoder` whose linear layers are BatchEnsemble layers with M members.

    `forward` follows the base interface `(B, d)`: in training, row i through member `i % M`; in evaluation,
    the mean of the M member representations. `forward_members` gives all of them, `(B, M, d)`.
    """

    def __init__(self, encoder: Encoder, ensemble_size: int):
        super().__init__()
        self.encoder = encoder
        self.ensemble_size = ensemble_size
        self.output_dim = encoder.output_dim
        self.main_input_name = encoder.main_input_name
        self.input_names = encoder.input_names
        if convert_to_batch_ensemble(encoder, ensemble_size) == 0:
            raise ValueError(
                f"InSubConfig.batch_ensemble_size={ensemble_size} needs an encoder with nn.Linear layers "
                f"(e.g. a ViT); {type(encoder).__name__} has none."
            )

    def forward_members(self, **inputs: torch.Tensor) -> torch.Tensor:
        """Every member's representation of every input: `(B, ...)` inputs -> `(B, M, d)`."""
        m = self.ensemble_size
        tiled = {k: v.repeat_interleave(m, dim=0) for k, v in inputs.items()}  # row b*M + j -> member j
        out = self.encoder(**tiled)  # (B*M, d)
        return out.view(-1, m, out.shape[-1])

    def forward(self, **inputs: torch.Tensor) -> torch.Tensor:
        if self.training:
            return self.encoder(**inputs)
        return self.forward_members(**inputs).mean(dim=1)

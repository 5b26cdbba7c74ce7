"""BatchEnsemble (Wen et al. 2020): rank-1 fast weights that turn one encoder into M members sharing its weights.

Every `nn.Linear` of the wrapped encoder becomes a `BatchEnsembleLinear`: member m computes
`((x * r_m) W^T) * s_m + b_m` with the shared W and its own vectors r_m (in), s_m (out) and bias b_m; every
`nn.Conv2d` likewise becomes a `BatchEnsembleConv2d` (r_m, s_m per channel), so CNN encoders are covered too.
Row i of a batch goes through member `i % M`. In training each sample therefore sees one member (no extra
compute; with a per-view batch divisible by M both views of a sample use the same member); at evaluation
every input is repeated M times so that each member sees it, giving member representations `(B, M, d)`.
"""

from __future__ import annotations

import torch
from torch import nn

from .base import Encoder


class _RankOneMembers(nn.Module):
    """The shared weight of `layer` plus M members' rank-1 factors r_m (in), s_m (out) and biases b_m."""

    def __init__(self, layer: nn.Linear | nn.Conv2d, ensemble_size: int, num_in: int, num_out: int):
        super().__init__()
        self.ensemble_size = ensemble_size
        self.weight = nn.Parameter(layer.weight.detach().clone())  # shared
        bias = layer.bias.detach() if layer.bias is not None else torch.zeros(num_out)
        self.bias = nn.Parameter(bias.clone().repeat(ensemble_size, 1))  # (M, out)
        # Random-sign initialisation of the fast weights (Wen et al. 2020) makes the members differ from step 0.
        signs = lambda n: torch.randint(0, 2, (ensemble_size, n)).float() * 2 - 1  # noqa: E731
        self.fast_in = nn.Parameter(signs(num_in))  # r: (M, in)
        self.fast_out = nn.Parameter(signs(num_out))  # s: (M, out)

    def factors(self, x: torch.Tensor, expand: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
        """(r, s, b) of each row's member (row i: member `i % M`), viewed as `expand`."""
        member = torch.arange(x.shape[0], device=x.device) % self.ensemble_size  # (N,)
        return tuple(p[member].view(expand) for p in (self.fast_in, self.fast_out, self.bias))


class BatchEnsembleLinear(_RankOneMembers):
    """A Linear layer shared by M members with per-member rank-1 factors and biases.

    Shapes: x `(N, ..., in)` -> `(N, ..., out)`; row i uses member `i % M`.

    Args:
        linear: the layer whose weight becomes the shared weight (its bias initialises every member's bias).
        ensemble_size: M.
    """

    def __init__(self, linear: nn.Linear, ensemble_size: int):
        super().__init__(linear, ensemble_size, linear.in_features, linear.out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r, s, b = self.factors(x, (x.shape[0],) + (1,) * (x.dim() - 2) + (-1,))  # (N, 1, ..., 1, features)
        return nn.functional.linear(x * r, self.weight) * s + b


class BatchEnsembleConv2d(_RankOneMembers):
    """A Conv2d shared by M members: member m computes `conv(x * r_m, W) * s_m + b_m`, r_m and s_m per channel.

    Shapes: x `(N, C_in, H, W)` -> `(N, C_out, H', W')`; row i uses member `i % M`.
    """

    def __init__(self, conv: nn.Conv2d, ensemble_size: int):
        super().__init__(conv, ensemble_size, conv.in_channels, conv.out_channels)
        self.conv = dict(stride=conv.stride, padding=conv.padding, dilation=conv.dilation, groups=conv.groups)
        if conv.padding_mode != "zeros":
            raise ValueError(f"BatchEnsembleConv2d supports zero padding only, got padding_mode={conv.padding_mode!r}.")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r, s, b = self.factors(x, (x.shape[0], -1, 1, 1))
        return nn.functional.conv2d(x * r, self.weight, **self.conv) * s + b


def convert_to_batch_ensemble(module: nn.Module, ensemble_size: int) -> int:
    """Replaces every `nn.Linear` and `nn.Conv2d` inside `module` by its BatchEnsemble layer in place; returns
    how many."""
    count = 0
    for name, child in module.named_children():
        if isinstance(child, nn.Linear):
            setattr(module, name, BatchEnsembleLinear(child, ensemble_size))
            count += 1
        elif isinstance(child, nn.Conv2d):
            setattr(module, name, BatchEnsembleConv2d(child, ensemble_size))
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
                f"InSubConfig.batch_ensemble_size={ensemble_size} needs an encoder with nn.Linear or nn.Conv2d "
                f"layers (a ViT, a ResNet); {type(encoder).__name__} has none."
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

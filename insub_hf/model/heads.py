"""M independent projection heads computed as one batched operation."""

from __future__ import annotations

import math

import torch
from torch import nn

# A size check before allocating: beyond this, a typo (num_heads=10**7) meets the allocator instead of a message.
MAX_HEAD_PARAMETERS = 2**31


class BatchedHeads(nn.Module):
    """M independent MLP heads `Linear -> [BN] -> ReLU -> ... -> Linear`, evaluated together.

    Every head has its own weights and its own BatchNorm statistics; nothing is shared. All heads read the same
    input, so the first layer of all M heads is one wide GEMM `(B, d) @ (d, M*h)`; a BatchNorm1d over the M*h
    features is exactly a per-head BatchNorm; later layers are a batched matmul over the head axis. Measured with
    `benchmarks/head_overhead.py` on 2 CPU cores (M=10, 192-2048-128, forward+backward): ahead of a Python loop of
    M modules at batch 32, behind it at batch 256, where each loop head's activations stay in cache; a naive 3-D
    einsum, head-grouped chunks, per-head matmuls on split tensors and a contiguous-gradient variant were no
    faster there. Weights are stored in the layout each kernel reads:
    `weights[0]` is `(d, M, h_1)` (head m: `weights[0][:, m]`), every later `weights[i]` is `(M, h_i, h_{i+1})`.

    Args:
        in_dim: d, the encoder representation size.
        hidden_sizes: hidden widths of each head; empty for one Linear layer per head.
        out_dim: q, the output size of each head.
        num_heads: M.
        norm: `"batchnorm"` or `"none"`.

    Shapes:
        input `(B, d)` -> output `(B, M, q)`.
    """

    def __init__(self, in_dim: int, hidden_sizes: list[int], out_dim: int, num_heads: int, norm: str = "batchnorm"):
        super().__init__()
        self.num_heads = num_heads
        sizes = [in_dim, *hidden_sizes, out_dim]
        self.sizes = tuple(sizes)
        parameters = num_heads * sum((fan_in + 1) * fan_out for fan_in, fan_out in zip(sizes[:-1], sizes[1:]))
        if parameters > MAX_HEAD_PARAMETERS:
            raise ValueError(
                f"InSubConfig.num_heads={num_heads} heads of sizes {sizes} would hold {parameters:,} parameters "
                f"(more than {MAX_HEAD_PARAMETERS:,}, {4 * MAX_HEAD_PARAMETERS / 2**30:.0f} GiB in float32); lower "
                "num_heads, head_hidden_sizes or head_output_size."
            )
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        self.norms = nn.ModuleList()
        for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            shape = (fan_in, num_heads, fan_out) if i == 0 else (num_heads, fan_in, fan_out)
            self.weights.append(nn.Parameter(torch.empty(shape)))
            use_norm = norm == "batchnorm" and i < len(sizes) - 2
            # A Linear followed by BatchNorm needs no bias: BN removes it.
            self.biases.append(nn.Parameter(torch.empty(num_heads, fan_out)) if not use_norm else None)
            self.norms.append(nn.BatchNorm1d(num_heads * fan_out) if use_norm else nn.Identity())
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialises each head like `nn.Linear`, independently per head."""
        for i, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            bound = 1.0 / math.sqrt(weight.shape[0 if i == 0 else 1])
            nn.init.uniform_(weight, -bound, bound)
            if bias is not None:
                nn.init.uniform_(bias, -bound, bound)
        for norm in self.norms:
            if isinstance(norm, nn.modules.batchnorm._BatchNorm):
                norm.reset_parameters()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x `(B, d)`. Returns: `(B, M, q)`."""
        m = self.num_heads
        last = len(self.weights) - 1
        # First layer, one GEMM for all heads: (B, d) @ (d, M*h) -> (B, M*h)
        h = x @ self.weights[0].view(x.shape[1], -1)
        if self.biases[0] is not None:
            h = h + self.biases[0].reshape(-1)
        if last == 0:
            return h.view(x.shape[0], m, -1)
        h = torch.relu(self.norms[0](h))
        # Head-major for bmm: (B, M*h) -> (M, B, h)
        h = h.view(x.shape[0], m, -1).transpose(0, 1)
        for i in range(1, last + 1):
            h = torch.bmm(h, self.weights[i])  # (M, B, h_i)
            if self.biases[i] is not None:
                h = h + self.biases[i].unsqueeze(1)
            if i < last:
                # per-head BN over (B, M*h_i)
                flat = self.norms[i](h.transpose(0, 1).reshape(x.shape[0], -1))
                h = torch.relu(flat).view(x.shape[0], m, -1).transpose(0, 1)
        return h.transpose(0, 1)  # (B, M, q)

    def as_modules(self) -> nn.ModuleList:
        """Returns M separate `nn.Sequential` MLPs holding copies of each head's weights and BN state.

        The plain reference the batched layout must match; also handy to export one head on its own.
        """
        heads = nn.ModuleList()
        last = len(self.weights) - 1
        for m in range(self.num_heads):
            layers: list[nn.Module] = []
            for i, (weight, bias, norm) in enumerate(zip(self.weights, self.biases, self.norms)):
                w = weight[:, m] if i == 0 else weight[m]  # (fan_in, fan_out)
                linear = nn.Linear(w.shape[0], w.shape[1], bias=bias is not None)
                linear.weight.data.copy_(w.detach().t())
                if bias is not None:
                    linear.bias.data.copy_(bias.detach()[m])
                layers.append(linear)
                if i < last:
                    if isinstance(norm, nn.modules.batchnorm._BatchNorm):
                        layers.append(_slice_batchnorm(norm, m, w.shape[1]))
                    layers.append(nn.ReLU())
            heads.append(nn.Sequential(*layers))
        return heads.to(self.weights[0].device)


def _slice_batchnorm(norm: nn.BatchNorm1d, head: int, width: int) -> nn.BatchNorm1d:
    """The BatchNorm1d of one head, cut out of the (M*width)-feature BatchNorm."""
    part = slice(head * width, (head + 1) * width)
    bn = nn.BatchNorm1d(width, eps=norm.eps, momentum=norm.momentum)
    bn.weight.data.copy_(norm.weight.detach()[part])
    bn.bias.data.copy_(norm.bias.detach()[part])
    bn.running_mean.copy_(norm.running_mean[part])
    bn.running_var.copy_(norm.running_var[part])
    bn.num_batches_tracked.copy_(norm.num_batches_tracked)
    return bn

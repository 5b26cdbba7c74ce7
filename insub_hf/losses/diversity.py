"""The InSub diversity loss: a hinge on the per-dimension spread of the M head embeddings."""

from __future__ import annotations

import torch
from torch import nn

from ..validation import check_choice, check_range
from .precision import in_float32


@in_float32
def head_spread(z: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """Per-dimension standard deviation across heads, `sqrt(unbiased variance + eps)`.

    Args:
        z: head embeddings `(B, M, q)`.
        eps: added inside the square root.

    Returns:
        sigma `(B, q)`. With M = 1 the spread is undefined; zeros are returned (no NaN).
    """
    if z.dim() != 3:
        raise ValueError(f"head_spread: z must be (batch, heads, dim), got shape {tuple(z.shape)}.")
    if z.shape[1] < 2:
        return z.new_zeros(z.shape[0], z.shape[2])
    return torch.sqrt(z.var(dim=1, unbiased=True) + eps)


@in_float32
def diversity_hinge(z: torch.Tensor, alpha: float = 0.08, eps: float = 1e-4) -> torch.Tensor:
    """`sum_o max(0, alpha - sigma_o)` for each sample of one view.

    Args:
        z: head embeddings `(B, M, q)`.
        alpha: the spread below which a dimension is penalised.
        eps: see `head_spread`.

    Returns:
        `(B,)`; zeros when M = 1 (no diversity term for a single head).

    References:
        Vahidi et al., "Diversified Ensemble of Independent Sub-Networks for Robust Self-Supervised Representation
        Learning", AAAI 2024, Eq. (3)-(4).
    """
    if z.shape[1] < 2:
        return z.new_zeros(z.shape[0])
    return torch.relu(alpha - head_spread(z, eps)).sum(dim=1)


class DiversityLoss(nn.Module):
    """Diversity hinge of each sample over its views.

    Args:
        alpha: minimum spread; eps: variance stabiliser.
        reduction: `"mean"` over the views (the authors' code: its batch mean is sum over batch, views and dims
            / 2B) or `"sum"` (the paper's `l_div(k)` over both views).

    Forward:
        *views: head embeddings of each view, each `(B, M, q)` -> per-sample loss `(B,)`; average it over the batch.
    """

    def __init__(self, alpha: float = 0.08, eps: float = 1e-4, reduction: str = "mean"):
        super().__init__()
        check_range("DiversityLoss.alpha", alpha, low=0.0)
        check_range("DiversityLoss.eps", eps, low=0.0, low_inclusive=False)
        check_choice("DiversityLoss.reduction", reduction, ("mean", "sum"))
        self.alpha = alpha
        self.eps = eps
        self.reduction = reduction

    def forward(self, *views: torch.Tensor) -> torch.Tensor:
        total = sum(diversity_hinge(z, self.alpha, self.eps) for z in views)  # (B,)
        return total / len(views) if self.reduction == "mean" else total

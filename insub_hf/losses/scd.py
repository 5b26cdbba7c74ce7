"""Self-Contrastive Decorrelation (SCD; Klein & Nabi, ACL 2022) with the decorrelation over M projector heads."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..distributed import gather_batch
from ..validation import check_range
from .precision import in_float32


@in_float32
def self_contrast(h1: torch.Tensor, h2: torch.Tensor, temperature: float = 0.05) -> torch.Tensor:
    """The repulsion term: `cos(h1_i, h2_i) / tau` per sentence, `(B,)` (minimised).

    Args:
        h1, h2: `(B, d)` sentence representations of the two dropout views.
    """
    if h1.shape != h2.shape or h1.dim() != 2:
        raise ValueError(f"self_contrast: h1 and h2 must both be (B, d), got {tuple(h1.shape)} and {tuple(h2.shape)}.")
    check_range("self_contrast.temperature", temperature, low=0.0, low_inclusive=False)
    return F.cosine_similarity(h1, h2, dim=-1) / temperature


@in_float32
def head_cross_correlation(p1: torch.Tensor, p2: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Cross-correlation of the batch-normalised projector outputs, averaged over heads.

    Each head's outputs are standardised over the batch (BatchNorm without affine: biased variance, `eps`), then
    `C_m = BN(p1_m)^T BN(p2_m) / B` and `C = mean_m C_m`.

    Args:
        p1, p2: `(B, M, q)` head outputs of the two views (B >= 2).

    Returns:
        C `(q, q)`.
    """
    if p1.shape != p2.shape or p1.dim() != 3:
        raise ValueError(
            f"head_cross_correlation: p1 and p2 must both be (B, M, q), got {tuple(p1.shape)} and {tuple(p2.shape)}."
        )
    if p1.shape[0] < 2:
        raise ValueError("head_cross_correlation: a batch of at least 2 sentences is needed to normalise over it.")

    def standardise(p: torch.Tensor) -> torch.Tensor:
        return (p - p.mean(dim=0)) / torch.sqrt(p.var(dim=0, unbiased=False) + eps)

    n1, n2 = standardise(p1), standardise(p2)
    return torch.einsum("bmi,bmj->ij", n1, n2) / (p1.shape[0] * p1.shape[1])


def decorrelation(c: torch.Tensor, off_diagonal_weight: float = 0.012) -> torch.Tensor:
    """`sum_i (C_ii - 1)^2 + lambda_scd * sum_{i != j} C_ij^2` for a `(q, q)` cross-correlation, a scalar."""
    diagonal = torch.diagonal(c)
    off = c.pow(2).sum() - diagonal.pow(2).sum()
    return (diagonal - 1).pow(2).sum() + off_diagonal_weight * off


def scd_loss(
    h1: torch.Tensor,
    h2: torch.Tensor,
    p1: torch.Tensor,
    p2: torch.Tensor,
    temperature: float = 0.05,
    alpha: float = 1.0,
    beta: float = 0.005225,
    off_diagonal_weight: float = 0.012,
    gather: bool = True,
) -> torch.Tensor:
    """SCD: `alpha * mean_i cos(h1_i, h2_i) / tau + beta * decorrelation(C)`, C averaged over the M heads.

    Under torch.distributed (`gather=True`) C is computed over the global batch (`gather_batch`).

    Args:
        h1, h2: `(B, d)` encoder representations of the two dropout views.
        p1, p2: `(B, M, q)` projector (head) outputs of the two views.

    Returns:
        The scalar loss (the decorrelation is a batch-level term, so there is no per-sample split).
    """
    if gather:
        (p1, p2), _ = gather_batch(p1, p2)
    return alpha * self_contrast(h1, h2, temperature).mean() + beta * decorrelation(
        head_cross_correlation(p1, p2), off_diagonal_weight
    )

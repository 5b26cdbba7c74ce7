"""Barlow Twins (Zbontar et al., ICML 2021): the two views' cross-correlation driven to the identity."""

from __future__ import annotations

import torch

from ..distributed import gather_batch
from .precision import in_float32
from .scd import decorrelation, head_cross_correlation


@in_float32
def barlow_twins_loss(
    z1: torch.Tensor, z2: torch.Tensor, off_diagonal_weight: float = 0.0051, gather: bool = True
) -> torch.Tensor:
    """`sum_i (1 - C_ii)^2 + lambda * sum_{i != j} C_ij^2`, a scalar, with C `(D, D)` the cross-correlation of the two
    views' embeddings standardised over the batch (BatchNorm without affine: biased variance, eps 1e-5) divided by
    N. The same cross-correlation and decorrelation as SCD's (`losses/scd.py`) with one head. Under
    torch.distributed (`gather=True`) C is computed over the global batch (`gather_batch`).

    Args:
        z1, z2: `(N, D)` embeddings of the two views (N >= 2).
    """
    if z1.shape != z2.shape or z1.dim() != 2:
        raise ValueError(
            f"barlow_twins_loss: z1 and z2 must both be (N, D), got {tuple(z1.shape)} and {tuple(z2.shape)}."
        )
    if gather:
        (z1, z2), _ = gather_batch(z1, z2)
    return decorrelation(head_cross_correlation(z1[:, None], z2[:, None]), off_diagonal_weight)

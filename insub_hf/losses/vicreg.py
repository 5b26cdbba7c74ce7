"""VICReg (Bardes et al., ICLR 2022): invariance, variance and covariance terms on two views' embeddings."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..distributed import gather_batch
from .precision import in_float32


def _off_diagonal_square_sum(c: torch.Tensor) -> torch.Tensor:
    """Sum of the squared off-diagonal entries of a square matrix."""
    return c.pow(2).sum() - torch.diagonal(c).pow(2).sum()


@in_float32
def vicreg_loss(
    z1: torch.Tensor,
    z2: torch.Tensor,
    invariance_weight: float = 25.0,
    variance_weight: float = 25.0,
    covariance_weight: float = 1.0,
    eps: float = 1e-4,
    gather: bool = True,
) -> torch.Tensor:
    """`lambda * MSE(z1, z2) + mu * [v(z1) + v(z2)] / 2 + nu * [c(z1) + c(z2)]`, a scalar.

    `v(z) = mean_j relu(1 - sqrt(Var_j(z) + eps))` (the hinge on each dimension's standard deviation over the batch)
    and `c(z) = sum_{i != j} Cov(z)_ij^2 / D` (unbiased covariance), as in the authors' code. Under torch.distributed
    (`gather=True`) every term is computed over the global batch (`gather_batch`).

    Args:
        z1, z2: `(N, D)` embeddings of the two views (N >= 2).
    """
    if z1.shape != z2.shape or z1.dim() != 2:
        raise ValueError(f"vicreg_loss: z1 and z2 must both be (N, D), got {tuple(z1.shape)} and {tuple(z2.shape)}.")
    if gather:
        (z1, z2), _ = gather_batch(z1, z2)
    n, d = z1.shape
    if n < 2:
        raise ValueError("vicreg_loss: the variance and covariance terms need a batch of at least 2 samples.")
    invariance = F.mse_loss(z1, z2)
    variance, covariance = 0.0, 0.0
    for z in (z1, z2):
        centred = z - z.mean(dim=0)
        variance = variance + F.relu(1 - torch.sqrt(centred.var(dim=0) + eps)).mean() / 2
        covariance = covariance + _off_diagonal_square_sum(centred.T @ centred / (n - 1)) / d
    return invariance_weight * invariance + variance_weight * variance + covariance_weight * covariance

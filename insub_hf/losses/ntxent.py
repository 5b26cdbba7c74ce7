"""SimCLR's normalised temperature-scaled cross-entropy (NT-Xent) on the mean head embedding."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..distributed import gather_batch
from ..validation import check_range
from .precision import in_float32


@in_float32
def nt_xent_loss(
    z1: torch.Tensor, z2: torch.Tensor, temperature: float = 0.5, normalize: bool = True, gather: bool = True
) -> torch.Tensor:
    """NT-Xent over 2N anchors: the positive of each view is the other view of the same sample, the
    denominator runs over the 2N-1 other embeddings.

    Under torch.distributed (`gather=True`), N is the global batch: the embeddings of every process are gathered
    with gradients (`gather_batch`) and serve as negatives, and this process's 2n anchors are scored against them.

    Args:
        z1: `(n, q)` embeddings of the first views.
        z2: `(n, q)` embeddings of the second views.
        temperature: tau > 0.
        normalize: L2-normalise the embeddings first (cosine similarity); otherwise a plain dot product.
        gather: use the other processes' embeddings as negatives (no effect in one process).

    Returns:
        Per-anchor losses `(2n,)` of this process's anchors, ordered `[z1; z2]`; `.mean()` is the SimCLR loss
        (its DDP-averaged gradient is that of the global mean).

    References:
        Chen et al., "A Simple Framework for Contrastive Learning of Visual Representations", ICML 2020.
    """
    if z1.shape != z2.shape or z1.dim() != 2:
        raise ValueError(f"nt_xent_loss: z1 and z2 must both be (N, q), got {tuple(z1.shape)} and {tuple(z2.shape)}.")
    if z1.shape[0] < 1:
        raise ValueError("nt_xent_loss: the batch is empty (N=0); NT-Xent needs at least one pair.")
    check_range("nt_xent_loss.temperature", temperature, low=0.0, low_inclusive=False)
    if normalize:
        z1, z2 = F.normalize(z1, dim=1), F.normalize(z2, dim=1)
    n = z1.shape[0]
    (all1, all2), offset = gather_batch(z1, z2) if gather else ((z1, z2), 0)
    total = all1.shape[0]  # N
    candidates = torch.cat([all1, all2], dim=0)  # (2N, q), view-major
    logits = torch.cat([z1, z2], dim=0) @ candidates.t() / temperature  # (2n, 2N)
    local = torch.arange(n, device=z1.device) + offset
    own = torch.cat([local, local + total])  # where each anchor sits among the candidates
    positive = torch.cat([local + total, local])
    self_mask = torch.zeros_like(logits, dtype=torch.bool)
    self_mask[torch.arange(2 * n, device=z1.device), own] = True
    logits = logits.masked_fill(self_mask, float("-inf"))  # drop each anchor itself from its denominator
    return F.cross_entropy(logits, positive, reduction="none")


class NTXentLoss(nn.Module):
    """Module wrapper of `nt_xent_loss` returning per-anchor losses `(2N,)`."""

    def __init__(self, temperature: float = 0.5, normalize: bool = True):
        super().__init__()
        check_range("NTXentLoss.temperature", temperature, low=0.0, low_inclusive=False)
        self.temperature = temperature
        self.normalize = normalize

    def forward(self, z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
        return nt_xent_loss(z1, z2, self.temperature, self.normalize)

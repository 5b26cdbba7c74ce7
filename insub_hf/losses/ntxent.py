"""SimCLR's normalised temperature-scaled cross-entropy (NT-Xent) on the mean head embedding."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..validation import check_range


def nt_xent_loss(z1: torch.Tensor, z2: torch.Tensor, temperature: float = 0.5, normalize: bool = True) -> torch.Tensor:
    """NT-Xent over 2N anchors: the positive of each view is the other view of the same sample, the
    denominator runs over the 2N-1 other embeddings.

    Args:
        z1: `(N, q)` embeddings of the first views.
        z2: `(N, q)` embeddings of the second views.
        temperature: tau > 0.
        normalize: L2-normalise the embeddings first (cosine similarity); otherwise a plain dot product.

    Returns:
        Per-anchor losses `(2N,)`, anchors ordered `[z1; z2]`; `.mean()` is the SimCLR loss.

    References:
        Chen et al., "A Simple Framework for Contrastive Learning of Visual Representations", ICML 2020.
    """
    if z1.shape != z2.shape or z1.dim() != 2:
        raise ValueError(f"nt_xent_loss: z1 and z2 must both be (N, q), got {tuple(z1.shape)} and {tuple(z2.shape)}.")
    if z1.shape[0] < 1:
        raise ValueError("nt_xent_loss: the batch is empty (N=0); NT-Xent needs at least one pair.")
    check_range("nt_xent_loss.temperature", temperature, low=0.0, low_inclusive=False)
    n = z1.shape[0]
    z = torch.cat([z1, z2], dim=0)  # (2N, q)
    if normalize:
        z = F.normalize(z, dim=1)
    logits = z @ z.t() / temperature  # (2N, 2N)
    self_mask = torch.eye(2 * n, dtype=torch.bool, device=z.device)
    logits = logits.masked_fill(self_mask, float("-inf"))  # drop i == j from the denominator
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)  # (2N,)
    return F.cross_entropy(logits, targets, reduction="none")


class NTXentLoss(nn.Module):
    """Module wrapper of `nt_xent_loss` returning per-anchor losses `(2N,)`."""

    def __init__(self, temperature: float = 0.5, normalize: bool = True):
        super().__init__()
        check_range("NTXentLoss.temperature", temperature, low=0.0, low_inclusive=False)
        self.temperature = temperature
        self.normalize = normalize

    def forward(self, z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
        return nt_xent_loss(z1, z2, self.temperature, self.normalize)

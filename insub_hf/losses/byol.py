"""BYOL's regression loss (Grill et al., NeurIPS 2020): the online prediction against the target projection."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .precision import in_float32


@in_float32
def byol_loss(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """`||p / |p| - t / |t| ||^2 = 2 - 2 cos(p, t)` per sample, `(N,)`; no gradient flows into `target`.

    Args:
        prediction: `(N, D)` the online network's predictions of one view.
        target: `(N, D)` the target network's projections of the other view.
    """
    if prediction.shape != target.shape or prediction.dim() != 2:
        raise ValueError(
            f"byol_loss: prediction and target must both be (N, D), got {tuple(prediction.shape)} and "
            f"{tuple(target.shape)}."
        )
    return 2 - 2 * F.cosine_similarity(prediction, target.detach(), dim=-1)

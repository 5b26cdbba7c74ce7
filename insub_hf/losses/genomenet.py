"""Self-GenomeNet's contrastive prediction between a sequence and its reverse complement (Gunduz et al. 2021)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..distributed import gather_batch
from .precision import in_float32


@in_float32
def self_genomenet_loss(
    context: torch.Tensor, context_rc: torch.Tensor, projections: torch.Tensor, gather: bool = True
) -> torch.Tensor:
    """Context at position j predicts the reverse complement's context at the mirrored position.

    With T positions, the forward context `c_j` (having read windows 0..j of the sequence) and the reverse
    complement's context `r_{T-1-j-d}` (having read the windows from j+d to the end, from the other strand) are a
    positive pair for distance d = 1..D; the prediction is `W_d c_j`, scored by a dot product against the mirrored
    contexts of every sequence in the batch (the others are negatives). Softmax cross-entropy, in both directions
    (sequence -> reverse complement and back), averaged over positions, distances and directions.

    Under torch.distributed (`gather=True`) the negatives are the sequences of every process (`gather_batch`).

    Args:
        context: `(B, T, q)` per-position embeddings of the sequences.
        context_rc: `(B, T, q)` the same for their reverse complements.
        projections: `(D, q, q)` one projection per distance.

    Returns:
        `(B,)` per-sequence loss.
    """
    if context.shape != context_rc.shape or context.dim() != 3:
        raise ValueError(
            f"self_genomenet_loss: context and context_rc must both be (B, T, q), got {tuple(context.shape)} and "
            f"{tuple(context_rc.shape)}."
        )
    b, t, q = context.shape
    distances = projections.shape[0]
    if projections.shape != (distances, q, q):
        raise ValueError(f"self_genomenet_loss: projections must be (D, {q}, {q}), got {tuple(projections.shape)}.")
    if t <= distances:
        raise ValueError(
            f"self_genomenet_loss: the encoder gives {t} positions, which leaves nothing to predict at {distances} "
            "distances; use longer sequences (or a smaller stride) or fewer distances."
        )
    (all_context, all_context_rc), offset = gather_batch(context, context_rc) if gather else ((context, context_rc), 0)
    n = all_context.shape[0]  # B over all processes
    targets = torch.arange(b, device=context.device) + offset
    losses = []
    for d in range(1, distances + 1):
        for anchor, other in ((context, all_context_rc), (context_rc, all_context)):
            prediction = anchor[:, : t - d] @ projections[d - 1]  # (B, T-d, q): positions j = 0..T-1-d
            mirrored = other[:, : t - d].flip(1)  # position j holds the other strand's context T-1-d-j
            logits = torch.einsum("bjq,cjq->jbc", prediction, mirrored)  # (T-d, B, n)
            ce = F.cross_entropy(logits.reshape(-1, n), targets.repeat(t - d), reduction="none")
            losses.append(ce.view(t - d, b).mean(dim=0))
    return torch.stack(losses).mean(dim=0)


class DistanceProjections(nn.Module):
    """The per-distance 1x1 projections `W_1..W_D` `(D, q, q)` of Self-GenomeNet, initialised like `nn.Linear`."""

    def __init__(self, distances: int, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(distances, dim, dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.weight.shape[1])
        nn.init.uniform_(self.weight, -bound, bound)

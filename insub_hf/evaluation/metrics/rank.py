"""RankMe (Garrido et al., "RankMe: Assessing the Downstream Performance of Pretrained Self-Supervised
Representations by Their Rank", ICML 2023): the effective rank of a set of embeddings, a label-free monitor of
dimensional collapse."""

from __future__ import annotations

import torch

EPSILON = 1e-7


def rankme(embeddings) -> float:
    """`exp(entropy(p))` with `p_k = s_k / sum(s) + eps` over the singular values `s` of `embeddings` `(N, d)`:
    between 1 (every embedding on one line) and min(N, d) (singular values all equal)."""
    embeddings = torch.as_tensor(embeddings, dtype=torch.float64)
    if embeddings.dim() != 2 or min(embeddings.shape) == 0:
        raise ValueError(f"rankme needs embeddings of shape (N, d), N, d >= 1, got {tuple(embeddings.shape)}.")
    if not torch.isfinite(embeddings).all():
        raise ValueError("rankme: embeddings contain NaN or inf.")
    singular = torch.linalg.svdvals(embeddings)
    p = singular / singular.sum().clamp_min(EPSILON) + EPSILON
    return float(torch.exp(-(p * p.log()).sum()))

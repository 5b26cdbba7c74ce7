"""Brier score (multi-class, Brier 1950)."""

from __future__ import annotations

import torch

from .inputs import check_labels, check_probabilities


def brier_score(probabilities, labels) -> float:
    """Mean over samples of `sum_c (p_c - 1[c = label])^2`; 0 is perfect, 2 the worst.

    Args:
        probabilities: `(N, C)`; labels: `(N,)`.
    """
    probs = check_probabilities(probabilities)
    labels = check_labels(labels, probs.shape[0], probs.shape[1])
    one_hot = torch.nn.functional.one_hot(labels, probs.shape[1]).double()
    return float(((probs - one_hot) ** 2).sum(dim=1).mean())

"""Negative log-likelihood of the labels."""

from __future__ import annotations

import torch

from .inputs import check_labels, check_logits, check_probabilities

PROBABILITY_FLOOR = 1e-12


def nll_from_logits(logits, labels) -> float:
    """Mean `-log softmax(logits)[label]`, computed with `log_softmax` (no log of a rounded-to-zero probability).

    Args:
        logits: `(N, C)`; labels: `(N,)`.
    """
    logits = check_logits(logits)
    labels = check_labels(labels, logits.shape[0], logits.shape[1])
    return float(-torch.log_softmax(logits, dim=1).gather(1, labels[:, None]).mean())


def nll(probabilities, labels) -> float:
    """Mean `-log p[label]` of probabilities `(N, C)`, clamped at 1e-12 (for ensembles: the averaged members)."""
    probs = check_probabilities(probabilities)
    labels = check_labels(labels, probs.shape[0], probs.shape[1])
    return float(-probs.gather(1, labels[:, None]).clamp_min(PROBABILITY_FLOOR).log().mean())

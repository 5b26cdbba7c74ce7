"""Ensemble diversity: pairwise disagreement of the members, relative to their error rate (Fort et al. 2019)."""

from __future__ import annotations

import torch

from .inputs import check_labels, check_member_probabilities


def disagreement_rate(member_probabilities) -> float:
    """Fraction of (sample, member pair) where two members predict different classes, averaged over all
    S(S-1)/2 pairs.

    Args:
        member_probabilities: `(N, S, C)` with S >= 2 members.
    """
    probs = check_member_probabilities(member_probabilities)
    if probs.shape[1] < 2:
        raise ValueError(f"disagreement needs at least 2 members, got {probs.shape[1]}.")
    predictions = probs.argmax(dim=2)  # (N, S)
    differs = predictions[:, :, None] != predictions[:, None, :]  # (N, S, S)
    pairs = torch.triu_indices(probs.shape[1], probs.shape[1], offset=1)
    return float(differs[:, pairs[0], pairs[1]].double().mean())


def normalized_disagreement(member_probabilities, labels) -> float:
    """Disagreement rate divided by the members' mean error rate, 1 - mean member accuracy.

    Independent members that err at random reach about 1; identical members give 0.

    Args:
        member_probabilities: `(N, S, C)`; labels: `(N,)`.

    References:
        Fort, Hu, Lakshminarayanan, "Deep Ensembles: A Loss Landscape Perspective", 2019.
    """
    probs = check_member_probabilities(member_probabilities)
    labels = check_labels(labels, probs.shape[0], probs.shape[2])
    member_accuracy = (probs.argmax(dim=2) == labels[:, None]).double().mean()
    error = 1.0 - float(member_accuracy)
    if error == 0.0:
        return 0.0
    return disagreement_rate(probs) / error

"""Top-1 accuracy."""

from __future__ import annotations

from .inputs import check_labels, check_probabilities


def accuracy(probabilities, labels) -> float:
    """Fraction of samples whose most probable class is the label (ties: the first maximal class).

    Args:
        probabilities: `(N, C)` predictive probabilities.
        labels: `(N,)` class indices.
    """
    probs = check_probabilities(probabilities)
    labels = check_labels(labels, probs.shape[0], probs.shape[1])
    return float((probs.argmax(dim=1) == labels).double().mean())

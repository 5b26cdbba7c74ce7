"""k-nearest-neighbour classification of frozen representations (cosine similarity, majority vote)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..validation import check_range


def knn_predict(
    train_features: torch.Tensor, train_labels: torch.Tensor, test_features: torch.Tensor, k: int = 20,
    chunk_size: int = 1024,
) -> torch.Tensor:
    """Majority vote of the k training samples most cosine-similar to each test sample.

    Ties between classes go to the smallest label (as `sklearn.neighbors.KNeighborsClassifier`).

    Args:
        train_features: `(N, d)`; train_labels: `(N,)` integers; test_features: `(T, d)`.
        k: neighbours (capped at N).

    Returns:
        Predicted labels `(T,)`.
    """
    check_range("k", k, low=1, integer=True)
    if train_features.shape[0] != train_labels.shape[0]:
        raise ValueError(
            f"train_features has {train_features.shape[0]} rows but train_labels {train_labels.shape[0]}."
        )
    k = min(k, train_features.shape[0])
    train = F.normalize(train_features.float(), dim=1)
    num_classes = int(train_labels.max()) + 1
    predictions = []
    for chunk in F.normalize(test_features.float(), dim=1).split(chunk_size):
        neighbours = (chunk @ train.t()).topk(k, dim=1).indices  # (t, k)
        votes = F.one_hot(train_labels[neighbours], num_classes).sum(dim=1)  # (t, classes)
        predictions.append(votes.argmax(dim=1))  # argmax returns the first (smallest) maximal class
    return torch.cat(predictions)


def knn_accuracy(
    train_features: torch.Tensor, train_labels: torch.Tensor, test_features: torch.Tensor,
    test_labels: torch.Tensor, k: int = 20,
) -> float:
    """Top-1 accuracy of `knn_predict` on labelled test features `(T, d)`, `(T,)`."""
    predictions = knn_predict(train_features, train_labels, test_features, k)
    return float((predictions == test_labels).float().mean())

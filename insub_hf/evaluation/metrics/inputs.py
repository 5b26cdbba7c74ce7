"""Checks shared by every metric: probabilities that are probabilities, finite logits, labels in range."""

from __future__ import annotations

import torch

SUM_TOLERANCE = 1e-4


def as_tensor(name: str, values) -> torch.Tensor:
    tensor = torch.as_tensor(values)
    if tensor.is_floating_point():
        tensor = tensor.double()
    return tensor


def check_logits(logits, name: str = "logits") -> torch.Tensor:
    """Returns `(N, C)` float64 logits; raises on another rank, an empty batch or NaN/inf values."""
    logits = as_tensor(name, logits)
    if logits.dim() != 2 or logits.shape[0] == 0:
        raise ValueError(f"{name} must have shape (N, C) with N >= 1, got {tuple(logits.shape)}.")
    if not torch.isfinite(logits).all():
        bad = int((~torch.isfinite(logits)).any(dim=1).nonzero()[0])
        raise ValueError(f"{name} contains NaN or inf (first in row {bad}); a metric over them would be meaningless.")
    return logits


def check_probabilities(probabilities, name: str = "probabilities") -> torch.Tensor:
    """Returns `(N, C)` float64 probabilities; raises unless every row lies in [0, 1] and sums to 1."""
    probs = check_logits(probabilities, name)
    if (probs < 0).any() or (probs > 1).any():
        raise ValueError(f"{name} must lie in [0, 1]; pass softmax outputs (or use the *_from_logits function).")
    sums = probs.sum(dim=1)
    off = (sums - 1).abs() > SUM_TOLERANCE
    if off.any():
        row = int(off.nonzero()[0])
        raise ValueError(
            f"{name} rows must sum to 1 (tolerance {SUM_TOLERANCE}), row {row} sums to {float(sums[row]):.6f}; "
            "pass softmax outputs."
        )
    return probs


def check_labels(labels, num_samples: int, num_classes: int, name: str = "labels") -> torch.Tensor:
    """Returns `(N,)` int64 labels; raises on another length or a label outside [0, num_classes)."""
    labels = torch.as_tensor(labels)
    if labels.is_floating_point() or labels.dim() != 1:
        raise ValueError(f"{name} must be a 1-D integer tensor, got dtype {labels.dtype} shape {tuple(labels.shape)}.")
    if labels.shape[0] != num_samples:
        raise ValueError(f"{name} has {labels.shape[0]} entries but the predictions have {num_samples} rows.")
    if labels.numel() and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(
            f"{name} must lie in [0, {num_classes - 1}] for {num_classes} classes, "
            f"got values in [{int(labels.min())}, {int(labels.max())}]."
        )
    return labels.long()


def check_member_probabilities(member_probabilities, name: str = "member_probabilities") -> torch.Tensor:
    """Returns `(N, S, C)` probabilities of S ensemble members (or stochastic passes), each row checked."""
    probs = as_tensor(name, member_probabilities)
    if probs.dim() != 3:
        raise ValueError(f"{name} must have shape (N, members, C), got {tuple(probs.shape)}.")
    check_probabilities(probs.reshape(-1, probs.shape[-1]), name)
    return probs

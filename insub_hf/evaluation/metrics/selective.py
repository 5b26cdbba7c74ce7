"""Selective prediction: how well a confidence ranks a classifier's errors last. The risk-coverage curve keeps the
most confident k of N predictions (k = 1..N); AURC averages its selective risk (errors among the kept / k; Geifman
et al., ICLR 2019), AUGRC its generalised risk (errors among the kept / N: the share of all inputs that are accepted
and wrong; Traub et al., "Overcoming Common Flaws in the Evaluation of Selective Classification Systems", NeurIPS
2024). Lower is better for both."""

from __future__ import annotations

import torch


def _errors_by_confidence(confidence, correct) -> torch.Tensor:
    """The errors `(N,)` (1.0 = wrong) in order of decreasing confidence (a stable sort: ties keep input order)."""
    confidence = torch.as_tensor(confidence, dtype=torch.float64).ravel()
    correct = torch.as_tensor(correct).ravel()
    if confidence.shape != correct.shape or confidence.numel() == 0:
        raise ValueError(f"confidence and correct must be non-empty and of one length, got {tuple(confidence.shape)} "
                         f"and {tuple(correct.shape)}.")
    if not torch.isfinite(confidence).all():
        raise ValueError("confidence contains NaN or inf.")
    order = torch.sort(confidence, descending=True, stable=True).indices
    return 1.0 - correct.double()[order]


def aurc(confidence, correct) -> float:
    """Area under the risk-coverage curve: the mean over k = 1..N of the error rate among the k most confident.

    Args:
        confidence: `(N,)` higher = more confident (e.g. the max probability).
        correct: `(N,)` 1 / True where the prediction is right.
    """
    errors = _errors_by_confidence(confidence, correct)
    kept = torch.arange(1, len(errors) + 1, dtype=torch.float64)
    return float((errors.cumsum(0) / kept).mean())


def augrc(confidence, correct) -> float:
    """Area under the generalised risk-coverage curve: the mean over k = 1..N of (errors among the k most confident)
    / N. Arguments as `aurc`."""
    errors = _errors_by_confidence(confidence, correct)
    return float((errors.cumsum(0) / len(errors)).mean())

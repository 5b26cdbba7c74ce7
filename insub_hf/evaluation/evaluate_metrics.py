"""Thin `evaluate.Metric` wrappers over the plain metric functions (which stay the source of truth).

`evaluate` has no ECE/TACE; these let the metrics be used where `evaluate` is expected (`add_batch`, `compute`,
`evaluate.combine`). Both take `predictions` = probability rows.
"""

from __future__ import annotations

import datasets
import evaluate
import numpy as np

from .metrics import (
    accuracy, brier_score, expected_calibration_error, fpr_at_tpr, nll, ood_auroc,
    thresholded_adaptive_calibration_error,
)

_CITATION = "Vahidi et al., Diversified Ensemble of Independent Sub-Networks for Robust Self-Supervised " \
    "Representation Learning, AAAI 2024."


class CalibrationMetrics(evaluate.Metric):
    """Accuracy, NLL, ECE (15 equal-width bins), TACE (15 equal-count bins, threshold 0.01) and Brier score.

    Inputs: `predictions` `(N, C)` probabilities (rows summing to 1), `references` `(N,)` class indices.
    """

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=self.__doc__,
            citation=_CITATION,
            inputs_description="predictions: (N, C) probabilities; references: (N,) int labels.",
            features=datasets.Features(
                {"predictions": datasets.Sequence(datasets.Value("float64")), "references": datasets.Value("int64")}
            ),
        )

    def _compute(self, predictions, references, n_bins: int = 15) -> dict[str, float]:
        probs, labels = np.asarray(predictions, dtype=np.float64), np.asarray(references, dtype=np.int64)
        return {
            "accuracy": accuracy(probs, labels),
            "nll": nll(probs, labels),
            "ece": expected_calibration_error(probs, labels, n_bins),
            "tace": thresholded_adaptive_calibration_error(probs, labels, n_bins),
            "brier": brier_score(probs, labels),
        }


class OODAUROC(evaluate.Metric):
    """AUROC of in-distribution (reference 1) vs OOD (reference 0) by a score that is higher in-distribution, and
    FPR95 (the share of OOD inputs still taken as in-distribution at 95 % TPR; lower is better).

    Inputs: `predictions` `(N,)` scores, `references` `(N,)` 1 for in-distribution, 0 for OOD.
    """

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=self.__doc__,
            citation=_CITATION,
            inputs_description="predictions: (N,) scores, higher = in-distribution; references: (N,) 1 in / 0 out.",
            features=datasets.Features(
                {"predictions": datasets.Value("float64"), "references": datasets.Value("int64")}
            ),
        )

    def _compute(self, predictions, references) -> dict[str, float]:
        scores, is_in = np.asarray(predictions, dtype=np.float64), np.asarray(references)
        if not np.isin(is_in, (0, 1)).all():
            raise ValueError("OODAUROC references must be 1 (in-distribution) or 0 (OOD).")
        return {"auroc": ood_auroc(scores[is_in == 1], scores[is_in == 0]),
                "fpr95": fpr_at_tpr(scores[is_in == 1], scores[is_in == 0])}

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


# How a score given to OODAUROC is oriented (`compute(..., higher=...)`)
SCORE_ORIENTATIONS = ("in", "ood")


def check_integer_references(references, metric: str, allowed: str) -> None:
    """Refuses references that are not whole numbers before `evaluate` casts them to int64 (0.7 would become 0)."""
    if references is None:
        return
    values = np.asarray(references)
    if values.dtype.kind == "f" and not (np.isfinite(values) & (values == np.round(values))).all():
        bad = values[~(np.isfinite(values) & (values == np.round(values)))][:3].tolist()
        raise ValueError(f"{metric} references must be {allowed}, got non-integer values such as {bad}.")
    if values.dtype.kind not in "biuf":
        raise ValueError(f"{metric} references must be {allowed}, got values of type {values.dtype}.")


class CalibrationMetrics(evaluate.Metric):
    """Accuracy, NLL, ECE (15 equal-width bins), TACE (15 equal-count bins, threshold 0.01) and Brier score.

    Inputs: `predictions` `(N, C)` probabilities (rows summing to 1), `references` `(N,)` class indices (whole
    numbers in [0, C); others are refused, not cast).
    """

    def add_batch(self, *, predictions=None, references=None, **kwargs):
        """`evaluate.Metric.add_batch`, the references checked before they are cast."""
        check_integer_references(references, "CalibrationMetrics", "class indices (whole numbers in [0, C))")
        return super().add_batch(predictions=predictions, references=references, **kwargs)

    def add(self, *, prediction=None, reference=None, **kwargs):
        """`evaluate.Metric.add`, the reference checked before it is cast."""
        check_integer_references([reference] if reference is not None else None, "CalibrationMetrics",
                                 "class indices (whole numbers in [0, C))")
        return super().add(prediction=prediction, reference=reference, **kwargs)

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
    """AUROC of in-distribution (reference 1) vs OOD (reference 0) by a score, and FPR95 (the share of OOD inputs
    still taken as in-distribution at 95 % TPR; lower is better).

    Inputs: `predictions` `(N,)` scores, `references` `(N,)` 1 for in-distribution, 0 for OOD, and how the score is
    oriented, named at `compute`: `higher="in"` (a confidence: the max probability) or `higher="ood"` (an
    uncertainty: an InSub model's `uncertainty`, entropy, a k-NN distance). Without it the metric refuses: a score
    read the wrong way round gives 1 - AUROC without a word.
    """

    def add_batch(self, *, predictions=None, references=None, **kwargs):
        """`evaluate.Metric.add_batch`, the references checked before they are cast."""
        check_integer_references(references, "OODAUROC", "1 (in-distribution) or 0 (OOD)")
        return super().add_batch(predictions=predictions, references=references, **kwargs)

    def add(self, *, prediction=None, reference=None, **kwargs):
        """`evaluate.Metric.add`, the reference checked before it is cast."""
        check_integer_references([reference] if reference is not None else None, "OODAUROC",
                                 "1 (in-distribution) or 0 (OOD)")
        return super().add(prediction=prediction, reference=reference, **kwargs)

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=self.__doc__,
            citation=_CITATION,
            inputs_description="predictions: (N,) scores, oriented as compute(higher='in' | 'ood') names; references: "
                               "(N,) 1 in / 0 out.",
            features=datasets.Features(
                {"predictions": datasets.Value("float64"), "references": datasets.Value("int64")}
            ),
        )

    def _compute(self, predictions, references, higher: str | None = None) -> dict[str, float]:
        if higher not in SCORE_ORIENTATIONS:
            raise ValueError(
                f"OODAUROC.compute(higher=...) must name how the score is oriented, one of {list(SCORE_ORIENTATIONS)}: "
                "'in' for a confidence (the max probability), 'ood' for an uncertainty (an InSub model's "
                f"`uncertainty`, entropy, a k-NN distance); got {higher!r}."
            )
        scores, is_in = np.asarray(predictions, dtype=np.float64), np.asarray(references)
        if not np.isin(is_in, (0, 1)).all():
            raise ValueError("OODAUROC references must be 1 (in-distribution) or 0 (OOD).")
        higher_is_in = higher == "in"
        return {"auroc": ood_auroc(scores[is_in == 1], scores[is_in == 0], higher_is_in),
                "fpr95": fpr_at_tpr(scores[is_in == 1], scores[is_in == 0], higher_is_in)}

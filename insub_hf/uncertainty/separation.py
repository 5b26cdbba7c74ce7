"""How well a score tells two sets apart, for deciding a reading's direction on validation data: the AUROC of
"higher = the second set" counted over all pairs, and its bootstrap interval. numpy alone; the evaluation's
`auroc_interval` is this one."""

from __future__ import annotations

import numpy as np
import torch


def pairwise_auroc(low_scores: np.ndarray, high_scores: np.ndarray) -> float:
    """P(high > low) + P(high = low) / 2 over all pairs of `low_scores (N,)` and `high_scores (K,)` (scikit-learn's
    `roc_auc_score` with `high_scores` as the positives), counted by binary search."""
    low = np.sort(np.asarray(low_scores, dtype=np.float64))
    high = np.asarray(high_scores, dtype=np.float64)
    below = np.searchsorted(low, high, side="left")
    tied = np.searchsorted(low, high, side="right") - below
    return float((below.sum() + 0.5 * tied.sum()) / (low.size * high.size))


def bootstrap_auroc_interval(low_scores, high_scores, resamples: int = 200, level: float = 0.9,
                             seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval `(lower, upper)` at `level` of `pairwise_auroc(low_scores, high_scores)`: each
    resample draws both sets again with replacement (`resamples` times from a fixed `seed`: the same interval every
    call). An interval that leaves out 0.5 says which way the score separates the sets beyond resampling noise."""
    low, high = (np.asarray(torch.as_tensor(x).float().cpu()).ravel() for x in (low_scores, high_scores))
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(resamples):  # the high set is drawn first, then the low one
        drawn_high = high[rng.integers(0, high.size, high.size)]
        values.append(pairwise_auroc(low[rng.integers(0, low.size, low.size)], drawn_high))
    tail = (1 - level) / 2
    return float(np.quantile(values, tail)), float(np.quantile(values, 1 - tail))

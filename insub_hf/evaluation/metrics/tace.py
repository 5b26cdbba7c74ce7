"""Thresholded adaptive calibration error (TACE, Nixon et al. 2019)."""

from __future__ import annotations

import torch

from .inputs import check_labels, check_probabilities


def thresholded_adaptive_calibration_error(
    probabilities, labels, n_bins: int = 15, threshold: float = 0.01
) -> float:
    """TACE: calibration of every class probability, not only the top one, over equal-count bins.

    For each class c, the probabilities p_{i,c} >= `threshold` are sorted and split into `n_bins` bins of equal
    count (sizes differ by at most one; a class with fewer kept samples than bins gets one bin per sample);
    each bin contributes |mean 1[y_i = c] - mean p_{i,c}|. TACE is the plain mean of these gaps over the bins of
    each class and then over the classes that keep any probability:
    TACE = 1/K sum_c 1/R_c sum_r |acc(r, c) - conf(r, c)|.

    Args:
        probabilities: `(N, C)`; labels: `(N,)`.
        n_bins: R, bins per class (15).
        threshold: probabilities below it are dropped (0.01).

    References:
        Nixon et al., "Measuring Calibration in Deep Learning", CVPR Workshops 2019.
    """
    probs = check_probabilities(probabilities)
    labels = check_labels(labels, probs.shape[0], probs.shape[1])
    per_class = []
    for c in range(probs.shape[1]):
        keep = probs[:, c] >= threshold
        if not keep.any():
            continue
        p = probs[keep, c]
        hit = (labels[keep] == c).double()
        order = torch.argsort(p, stable=True)
        gaps = [
            (hit[chunk].mean() - p[chunk].mean()).abs()
            for chunk in torch.tensor_split(order, min(n_bins, len(order)))
        ]
        per_class.append(torch.stack(gaps).mean())
    return float(torch.stack(per_class).mean()) if per_class else 0.0

"""Expected calibration error (Naeini et al. 2015; Guo et al. 2017) and the reliability-diagram bins."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .inputs import check_labels, check_probabilities


@dataclass
class ReliabilityBins:
    """Per-bin statistics of equal-width confidence bins `(lo, hi]` (the first bin also holds 0).

    Attributes:
        edges: `(n_bins + 1,)` bin edges from 0 to 1.
        counts: `(n_bins,)` samples per bin.
        confidence: `(n_bins,)` mean max-probability per bin (NaN where empty).
        accuracy: `(n_bins,)` fraction correct per bin (NaN where empty).
    """

    edges: torch.Tensor
    counts: torch.Tensor
    confidence: torch.Tensor
    accuracy: torch.Tensor


def reliability_bins(probabilities, labels, n_bins: int = 15) -> ReliabilityBins:
    """Groups samples by their max probability into `n_bins` equal-width bins; a confidence of exactly 1.0 falls
    in the last bin.

    Args:
        probabilities: `(N, C)`; labels: `(N,)`.
    """
    probs = check_probabilities(probabilities)
    labels = check_labels(labels, probs.shape[0], probs.shape[1])
    confidence, predicted = probs.max(dim=1)
    correct = (predicted == labels).double()
    edges = torch.linspace(0, 1, n_bins + 1, dtype=torch.float64)
    # bucketize with right=False puts v in bin i when edges[i] < v <= edges[i+1]: (lo, hi] bins, 1.0 -> last.
    bins = torch.bucketize(confidence, edges[1:-1], right=False)
    counts = torch.bincount(bins, minlength=n_bins).double()
    conf_sum = torch.zeros(n_bins, dtype=torch.float64).index_add_(0, bins, confidence)
    acc_sum = torch.zeros(n_bins, dtype=torch.float64).index_add_(0, bins, correct)
    return ReliabilityBins(edges, counts, conf_sum / counts, acc_sum / counts)


def expected_calibration_error(probabilities, labels, n_bins: int = 15) -> float:
    """ECE = sum_b (n_b / N) |acc_b - conf_b| over `n_bins` equal-width bins of the max probability.

    Args:
        probabilities: `(N, C)`; labels: `(N,)`.
        n_bins: number of bins (15 as in Guo et al. 2017).

    References:
        Guo et al., "On Calibration of Modern Neural Networks", ICML 2017.
    """
    bins = reliability_bins(probabilities, labels, n_bins)
    filled = bins.counts > 0
    gaps = (bins.accuracy[filled] - bins.confidence[filled]).abs()
    return float((bins.counts[filled] / bins.counts.sum() * gaps).sum())

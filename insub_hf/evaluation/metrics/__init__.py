"""Uncertainty metrics as plain functions of probabilities or logits (the source of truth; `evaluate` wrappers
in `..evaluate_metrics` call these)."""

from .accuracy import accuracy
from .brier import brier_score
from .disagreement import disagreement_rate, normalized_disagreement
from .ece import ReliabilityBins, expected_calibration_error, reliability_bins
from .inputs import check_labels, check_logits, check_member_probabilities, check_probabilities
from .nll import nll, nll_from_logits
from .ood import max_probability, mutual_information, ood_auroc, predictive_entropy
from .tace import thresholded_adaptive_calibration_error

__all__ = [
    "ReliabilityBins",
    "accuracy",
    "brier_score",
    "check_labels",
    "check_logits",
    "check_member_probabilities",
    "check_probabilities",
    "disagreement_rate",
    "expected_calibration_error",
    "max_probability",
    "mutual_information",
    "nll",
    "nll_from_logits",
    "normalized_disagreement",
    "ood_auroc",
    "predictive_entropy",
    "reliability_bins",
    "thresholded_adaptive_calibration_error",
]

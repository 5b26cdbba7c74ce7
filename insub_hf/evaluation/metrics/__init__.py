"""Uncertainty metrics as plain functions of probabilities or logits (the source of truth; `evaluate` wrappers
in `..evaluate_metrics` call these)."""

from __future__ import annotations

from .accuracy import accuracy
from .brier import brier_score
from .disagreement import disagreement_rate, normalized_disagreement
from .ece import ReliabilityBins, expected_calibration_error, reliability_bins
from .inputs import check_labels, check_logits, check_member_probabilities, check_probabilities
from .crop import CropTest, crop_test
from .nll import nll, nll_from_logits
from .rank import rankme
from .ood import aupr, fpr_at_tpr, max_probability, mutual_information, ood_auroc, predictive_entropy
from .retrieval import nearest_neighbour_errors, nearest_neighbours, r_auroc, split_half_r_auroc
from .selective import augrc, aurc
from .tace import thresholded_adaptive_calibration_error
from .temperature import fit_temperature, temperature_scale

__all__ = [
    "CropTest",
    "ReliabilityBins",
    "accuracy",
    "aupr",
    "augrc",
    "aurc",
    "brier_score",
    "check_labels",
    "check_logits",
    "check_member_probabilities",
    "check_probabilities",
    "crop_test",
    "disagreement_rate",
    "expected_calibration_error",
    "fit_temperature",
    "fpr_at_tpr",
    "max_probability",
    "mutual_information",
    "nearest_neighbour_errors",
    "nearest_neighbours",
    "nll",
    "nll_from_logits",
    "normalized_disagreement",
    "ood_auroc",
    "predictive_entropy",
    "r_auroc",
    "rankme",
    "reliability_bins",
    "split_half_r_auroc",
    "temperature_scale",
    "thresholded_adaptive_calibration_error",
]

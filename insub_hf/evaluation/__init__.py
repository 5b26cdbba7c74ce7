"""Evaluation of frozen representations: k-NN, probes, uncertainty metrics, OOD sets and corruptions."""

from . import metrics
from .comparison import ComparisonArguments, run_comparison
from .corruptions import CORRUPTIONS, corrupt
from .cost import count_parameters, training_memory_mb
from .evaluate_metrics import OODAUROC, CalibrationMetrics
from .features import FeatureSet, extract_features, extract_representations, set_dropout
from .harness import HarnessArguments, ImageEvaluationData, MethodEvaluator
from .knn import knn_accuracy, knn_predict
from .ood_sets import load_mnist_images, noise_images
from .probes import (
    LinearProbe,
    ProbeArguments,
    balanced_label_subset,
    fit_linear_probe,
    fit_probes,
    member_probabilities,
    train_val_split,
)

__all__ = [
    "CORRUPTIONS",
    "CalibrationMetrics",
    "ComparisonArguments",
    "FeatureSet",
    "HarnessArguments",
    "ImageEvaluationData",
    "MethodEvaluator",
    "OODAUROC",
    "LinearProbe",
    "ProbeArguments",
    "balanced_label_subset",
    "corrupt",
    "count_parameters",
    "extract_features",
    "extract_representations",
    "fit_linear_probe",
    "fit_probes",
    "knn_accuracy",
    "knn_predict",
    "load_mnist_images",
    "metrics",
    "noise_images",
    "member_probabilities",
    "run_comparison",
    "set_dropout",
    "train_val_split",
    "training_memory_mb",
]

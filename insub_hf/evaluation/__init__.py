"""Evaluation of frozen representations: k-NN, probes, uncertainty metrics, OOD sets and corruptions. It reads
checkpoints and features; it imports nothing from training or the jobs.

Names are imported when first used (PEP 562)."""

from __future__ import annotations

from ..lazy_exports import lazy_exports

_EXPORTS = {
    ".corruptions": ("CORRUPTIONS", "corrupt"),
    ".cost": ("count_parameters", "device_description", "training_memory_mb"),
    ".evaluate_metrics": ("CalibrationMetrics", "OODAUROC"),
    ".features": ("FeatureSet", "extract_features", "extract_representations"),
    ".harness": ("HarnessArguments", "MethodEvaluator"),
    ".image_data": ("ImageEvaluationData",),
    ".knn": ("knn_accuracy", "knn_predict"),
    ".ood_detector": ("InSubOODDetector", "kth_neighbour_distance"),
    ".ood_sets": ("load_mnist_images", "noise_images"),
    ".results": (
        "OOD_SCORES", "ComparisonRow", "Cost", "CorruptionMetrics", "HeadSpreadCalibration", "MethodResults", "Metrics",
        "TrainingRecord",
    ),
    ".probes": (
        "LinearProbe", "ProbeArguments", "balanced_label_subset", "fit_linear_probe", "fit_probes",
        "member_probabilities", "train_val_split",
    ),
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = sorted(["metrics", *(name for names in _EXPORTS.values() for name in names)])

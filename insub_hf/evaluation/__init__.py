"""Evaluation of frozen representations: k-NN, probes, uncertainty metrics, OOD sets and corruptions. It reads
checkpoints and features; it imports nothing from training or the jobs.

Names are imported when first used (PEP 562)."""

from __future__ import annotations

from ..lazy_exports import lazy_exports

_EXPORTS = {
    "CORRUPTIONS": ".corruptions",
    "corrupt": ".corruptions",
    "count_parameters": ".cost",
    "training_memory_mb": ".cost",
    "CalibrationMetrics": ".evaluate_metrics",
    "OODAUROC": ".evaluate_metrics",
    "FeatureSet": ".features",
    "extract_features": ".features",
    "extract_representations": ".features",
    "set_dropout": ".features",
    "HarnessArguments": ".harness",
    "ImageEvaluationData": ".harness",
    "MethodEvaluator": ".harness",
    "knn_accuracy": ".knn",
    "knn_predict": ".knn",
    "load_mnist_images": ".ood_sets",
    "noise_images": ".ood_sets",
    "LinearProbe": ".probes",
    "ProbeArguments": ".probes",
    "balanced_label_subset": ".probes",
    "fit_linear_probe": ".probes",
    "fit_probes": ".probes",
    "member_probabilities": ".probes",
    "train_val_split": ".probes",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = sorted([*_EXPORTS, "metrics"])

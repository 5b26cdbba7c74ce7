"""Evaluation of frozen representations."""

from .knn import extract_representations, knn_accuracy, knn_predict

__all__ = ["extract_representations", "knn_accuracy", "knn_predict"]

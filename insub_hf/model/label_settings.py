"""A classifier config's label settings, checked where they are set (`InSubConfig`, the classification models):
what `problem_type` may be, how many classes a config takes."""

from __future__ import annotations

from ..validation import check_choice, check_range

# The most classes a classifier config takes (transformers builds an id2label entry per class at construction)
MAX_LABELS = 100_000

# What a classifier's labels mean (transformers' `problem_type`; None: regression for one label, else decided by the
# labels' dtype: integers are classes, floats one 0/1 target per label)
PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")


def check_label_settings(num_labels, problem_type, where: str = "InSubConfig") -> None:
    """Refuses label settings the classifiers cannot honour, with the reason: a `problem_type` outside
    `PROBLEM_TYPES`, a single-label classifier over one class (a one-class softmax is always 1 and never learns), or
    more than `MAX_LABELS` labels."""
    if problem_type is not None:
        check_choice(f"{where}.problem_type", problem_type, PROBLEM_TYPES)
    if num_labels == 1 and problem_type == "single_label_classification":
        raise ValueError(
            f"{where}.num_labels must be at least 2 for problem_type='single_label_classification', got 1: a one-class "
            "softmax is always 1 and never learns (num_labels=1 is transformers' regression convention)."
        )
    check_range(f"{where}.num_labels", num_labels, low=1, high=MAX_LABELS, integer=True)

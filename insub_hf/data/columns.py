"""Checks that a data set holds what a transform is about to read."""

from __future__ import annotations

from datasets import Dataset


def check_dataset(dataset: Dataset, column: str, role: str, name: str = "dataset") -> None:
    """Raises ValueError when `dataset` is empty or lacks `column`.

    Args:
        dataset: a `datasets.Dataset`.
        column: the column to read.
        role: what the column is for, as the argument is called (e.g. `image_column`).
        name: how to call the data set in the message.
    """
    if column not in dataset.column_names:
        raise ValueError(
            f"{name} has no column {column!r} ({role}); its columns are {dataset.column_names}. "
            f"Set {role} to one of them."
        )
    if len(dataset) == 0:
        raise ValueError(f"{name} is empty (0 rows); it needs at least one example.")


def batch_column(batch: dict[str, list], column: str, role: str) -> list:
    """`batch[column]` for a set_transform function, or a ValueError naming the columns there are."""
    if column not in batch:
        raise ValueError(f"the data set has no column {column!r} ({role}); its columns are {sorted(batch)}.")
    return batch[column]

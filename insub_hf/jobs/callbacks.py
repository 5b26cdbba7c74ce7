"""Trainer callbacks of the jobs: the demo's per-epoch report (losses, head spread, k-NN accuracy) and quiet
progress (bars on the terminal, log dicts in a file)."""

from __future__ import annotations

import json
from pathlib import Path

from transformers import ProgressCallback, TrainerCallback

from ..evaluation.features import extract_representations
from ..evaluation.knn import knn_accuracy


def append_json_line(path: Path, row: dict) -> None:
    """Appends `row` as one JSON line to `path` (created with its folder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")


class KNNReportCallback(TrainerCallback):
    """At every logged epoch, measures k-NN accuracy of the frozen representation and prints one line.

    Args:
        train_dataset, test_dataset: labelled data sets yielding `pixel_values` (test transform) and `labels`.
        k: neighbours.
        name: a label for the printed lines (e.g. "InSub M=5").
        path: a JSON-lines file that keeps the rows, so that a resumed run's history still holds the epochs trained
            before the interruption (rows after the checkpoint it resumes from are dropped: they are re-run).

    Attributes:
        history: one dict per epoch: epoch, ssl_loss, diversity_loss, mean_sigma, knn_accuracy.
    """

    def __init__(self, train_dataset, test_dataset, k: int = 20, name: str = "", batch_size: int = 256,
                 path: str | Path | None = None):
        self.train_dataset = train_dataset
        self.test_dataset = test_dataset
        self.k = k
        self.name = name
        self.batch_size = batch_size
        self.path = Path(path) if path is not None else None
        self.history: list[dict[str, float]] = []

    def on_train_begin(self, args, state, control, **kwargs):
        if self.path is None or not state.is_world_process_zero:
            return
        kept = []
        if state.global_step > 0 and self.path.exists():  # resumed: the rows up to the checkpoint's epoch
            rows = [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]
            kept = [row for row in rows if row["epoch"] <= round(float(state.epoch or 0), 2)]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("".join(json.dumps(row) + "\n" for row in kept))
        self.history = kept

    def on_log(self, args, state, control, logs=None, model=None, **kwargs):
        if not logs or "loss" not in logs or model is None:
            return
        train = extract_representations(model, self.train_dataset, self.batch_size)
        test = extract_representations(model, self.test_dataset, self.batch_size)
        row = {
            "epoch": round(float(state.epoch or 0), 2),
            "ssl_loss": logs.get("ssl_loss", float("nan")),
            "diversity_loss": logs.get("diversity_loss", float("nan")),
            "mean_sigma": logs.get("mean_sigma", float("nan")),
            "knn_accuracy": knn_accuracy(*train, *test, k=self.k),
        }
        self.history.append(row)
        if self.path is not None and state.is_world_process_zero:
            append_json_line(self.path, row)
        print(
            f"[{self.name}] epoch {row['epoch']:g} | ssl {row['ssl_loss']:.4f} | div {row['diversity_loss']:.4f} | "
            f"sigma {row['mean_sigma']:.4f} | k-NN acc {100 * row['knn_accuracy']:.2f}%",
            flush=True,
        )


class LogFileProgressCallback(ProgressCallback):
    """The Trainer's progress bars, with the per-step log dicts appended to a JSON-lines file instead of printed.

    Args:
        path: the log file (created with its folder; appended to on resume).
    """

    def __init__(self, path: str | Path):
        super().__init__()
        self.path = Path(path)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            append_json_line(self.path, {"step": state.global_step, **logs})

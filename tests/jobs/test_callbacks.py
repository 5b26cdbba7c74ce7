"""The demo's per-epoch report survives an interrupted run: a resumed run's history holds every epoch once."""

import json

import torch
from datasets import Dataset

from insub_hf import InSubForPreTraining
from insub_hf.jobs.callbacks import KNNReportCallback
from insub_hf.training.trainer import InSubTrainer, InSubTrainingArguments

from ..conftest import tiny_config


def _labelled(n, seed):
    g = torch.Generator().manual_seed(seed)
    rows = {"pixel_values": torch.randn(n, 3, 32, 32, generator=g).numpy(), "labels": torch.arange(n) % 2}
    return Dataset.from_dict(rows).with_format("torch")


def _train(out, report, resume=None):
    g = torch.Generator().manual_seed(0)
    views = {"pixel_values": torch.randn(8, 3, 32, 32, generator=g), "pixel_values_2": torch.randn(8, 3, 32, 32, generator=g)}
    train = Dataset.from_dict({k: v.numpy() for k, v in views.items()}).with_format("torch")
    args = InSubTrainingArguments(
        output_dir=str(out), per_device_train_batch_size=4, num_train_epochs=3, logging_strategy="epoch",
        save_strategy="epoch", learning_rate=1e-3, report_to=[], disable_tqdm=True, use_cpu=True, seed=0,
        train_sampling_strategy="sequential",
    )
    torch.manual_seed(0)
    trainer = InSubTrainer(model=InSubForPreTraining(tiny_config(num_heads=2)), args=args, train_dataset=train,
                           callbacks=[report])
    trainer.train(resume_from_checkpoint=resume)


def test_a_resumed_run_reports_every_epoch_once_with_the_rows_before_the_interruption(tmp_path):
    path = tmp_path / "run" / "epoch_report.jsonl"
    make = lambda: KNNReportCallback(_labelled(8, 1), _labelled(4, 2), k=3, name="t", path=path)  # noqa: E731
    whole = make()
    _train(tmp_path / "run", whole)
    assert [row["epoch"] for row in whole.history] == [1, 2, 3]
    assert [json.loads(line) for line in path.read_text().splitlines()] == whole.history
    # killed after epoch 3 was logged but resumed from the epoch-2 checkpoint: epoch 3 is trained and reported again
    resumed = make()
    _train(tmp_path / "run", resumed, resume=str(tmp_path / "run" / "checkpoint-4"))
    assert [row["epoch"] for row in resumed.history] == [1, 2, 3]
    assert resumed.history[:2] == whole.history[:2]  # read back from the file, not lost
    torch.testing.assert_close(resumed.history[2]["ssl_loss"], whole.history[2]["ssl_loss"], rtol=1e-5, atol=1e-6)
    assert [json.loads(line) for line in path.read_text().splitlines()] == resumed.history
    # a fresh run in the same folder starts the report over
    fresh = make()
    _train(tmp_path / "run", fresh)
    assert [row["epoch"] for row in fresh.history] == [1, 2, 3] and len(path.read_text().splitlines()) == 3

"""One pretraining run through `InSubTrainer`, shared by every job (through `Experiment`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import PrinterCallback, ProgressCallback, TrainerCallback, set_seed

from ..checkpointing import last_complete_checkpoint, save_pretrained_atomic
from ..configuration_insub import InSubConfig
from ..encoders import load_encoder_weights
from ..evaluation.cost import count_parameters, training_memory_mb
from ..modeling_insub import InSubForPreTraining
from ..trainer import InSubTrainer, InSubTrainingArguments
from .callbacks import LogFileProgressCallback


@dataclass
class PretrainingResult:
    """A finished run: the model, its training log and what it cost.

    Attributes:
        model: the trained `InSubForPreTraining` (also saved under `run_dir/model`).
        log_history: the Trainer's log (loss, ssl_loss, diversity_loss, mean_sigma per logging step).
        cost: parameters, seconds per step, peak training memory (MiB) and steps.
    """

    model: InSubForPreTraining
    log_history: list[dict]
    cost: dict[str, float]


def pretrain(
    config: InSubConfig,
    train_dataset,
    run_dir: str | Path,
    epochs: float,
    batch_size: int,
    learning_rate: float,
    seed: int = 0,
    logging_steps: int | None = None,
    callbacks: list[TrainerCallback] | None = None,
    resume: bool = False,
    init_encoder_from: str | Path | None = None,
    batch_views: nn.Module | None = None,
    bf16: bool | None = None,
    torch_compile: bool = False,
    dataloader_num_workers: int | None = None,
    max_steps: int | None = None,
    processor=None,
) -> PretrainingResult:
    """Pretrains a fresh `InSubForPreTraining(config)` on two-view batches and saves it atomically.

    Args:
        config: the architecture.
        train_dataset: rows with both views (e.g. a data set with `ImageViews` as its transform), or plain
            `pixel_values` in [0, 1] with `batch_views`.
        run_dir: checkpoints go to `run_dir/checkpoint-*` (one per epoch, the last kept), the model to
            `run_dir/model`, the Trainer's log dicts to `run_dir/train_log.jsonl` (the terminal shows progress bars).
        epochs, batch_size, learning_rate: AdamW with 5% warm-up and cosine decay, weight decay 1e-4.
        logging_steps: log every this many steps (None: once per epoch).
        resume: continue from the last checkpoint in `run_dir` when there is one.
        init_encoder_from: start the encoder from this pretrained transformers backbone (see `load_encoder_weights`).
        batch_views: makes both views of each batch on the model's device (`BatchTwoViews`; see `InSubTrainer`).
        bf16, torch_compile, dataloader_num_workers: how fast to train; None takes the fast path where a GPU is
            present (see `InSubTrainingArguments`).
        max_steps: stop after this many optimiser steps instead (the data is cycled; `epochs` is then ignored).
        processor: the image processor (or tokenizer) saved with every checkpoint and the model (the Trainer's
            `processing_class`), so that they load with `AutoImageProcessor` and `pipeline()`.
    """
    set_seed(seed)
    model = InSubForPreTraining(config)
    if init_encoder_from is not None:
        load_encoder_weights(model, init_encoder_from)
    run_dir = Path(run_dir)
    args = InSubTrainingArguments(
        output_dir=str(run_dir), num_train_epochs=epochs, max_steps=max_steps or -1,
        per_device_train_batch_size=batch_size,
        learning_rate=learning_rate, weight_decay=1e-4, warmup_steps=0.05, lr_scheduler_type="cosine",
        logging_strategy="steps" if logging_steps else "epoch", logging_steps=logging_steps or 500,
        save_strategy="epoch", save_total_limit=1, seed=seed, dataloader_drop_last=True,
        bf16=bf16, torch_compile=torch_compile, dataloader_num_workers=dataloader_num_workers,
        dataloader_pin_memory=torch.cuda.is_available(),
    )
    trainer = InSubTrainer(
        model=model, args=args, train_dataset=train_dataset, callbacks=callbacks, batch_views=batch_views,
        processing_class=processor,
    )
    for printer in (ProgressCallback, PrinterCallback):
        trainer.remove_callback(printer)
    trainer.add_callback(LogFileProgressCallback(run_dir / "train_log.jsonl"))
    checkpoint = last_complete_checkpoint(run_dir) if resume else None
    output = trainer.train(resume_from_checkpoint=checkpoint)
    save_pretrained_atomic(model, run_dir / "model", processor=processor)
    batch = {k: v.to(model.device) for k, v in next(iter(trainer.get_train_dataloader())).items()}
    if batch_views is not None:
        batch = trainer.make_views(batch)
    memory = training_memory_mb(model, lambda: model(**batch).loss.backward())  # restores BatchNorm statistics
    model.zero_grad(set_to_none=True)
    steps = max(1, output.global_step)
    cost = {
        "parameters": count_parameters(model),
        "seconds_per_step": output.metrics["train_runtime"] / steps,
        "peak_memory_mb": memory,
        "steps": steps,
    }
    return PretrainingResult(model, trainer.state.log_history, cost)

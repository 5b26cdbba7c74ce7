"""One pretraining run through `InSubTrainer`, shared by every job (through `Experiment`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import PrinterCallback, ProgressCallback, TrainerCallback, set_seed

from ..checkpointing import last_complete_checkpoint, save_pretrained_atomic
from ..model.configuration_insub import InSubConfig
from ..encoders import load_encoder_weights
from ..encoders.pretrained import hub_repo_of
from ..encoders.frozen_base import name_frozen_base
from ..losses.step_checks import check_trained_weights
from ..evaluation.cost import count_parameters, training_memory_mb
from ..model.modeling_insub import InSubForPreTraining
from ..training.trainer import InSubTrainer, InSubTrainingArguments
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
    training_args: InSubTrainingArguments,
    callbacks: list[TrainerCallback] | None = None,
    resume: bool = False,
    init_encoder_from: str | Path | None = None,
    batch_views: nn.Module | None = None,
    processor=None,
    uncertainty_inputs: tuple[dict, dict | None] | None = None,
) -> PretrainingResult:
    """Pretrains a fresh `InSubForPreTraining(config)` with `InSubTrainer` on two-view batches and saves it atomically.

    Args:
        config: the architecture.
        train_dataset: rows with both views (e.g. a data set with `ImageViews` as its transform), or plain
            `pixel_values` in [0, 1] with `batch_views`.
        training_args: the run, as the Trainer takes it (a job's come from its recipe's defaults and the command
            line: `insub_hf.recipes`); checkpoints go to `output_dir/checkpoint-*`, the model to `output_dir/model`,
            the Trainer's log dicts to `output_dir/train_log.jsonl` (the terminal shows progress bars).
        resume: continue from the last complete checkpoint in `output_dir` when there is one.
        init_encoder_from: start the encoder from this pretrained transformers backbone (see `load_encoder_weights`).
        batch_views: makes both views of each batch on the model's device (`BatchTwoViews`; see `InSubTrainer`).
        processor: the image processor (or tokenizer) saved with every checkpoint and the model (the Trainer's
            `processing_class`), so that they load with `AutoImageProcessor` and `pipeline()`.
        uncertainty_inputs: `(inputs, calibration_inputs)`, in-distribution encoder inputs as tensors (the second
            held out from training, or None): the saved model's calibrated `uncertainty` is fitted on them
            (`InSubModel.fit_uncertainty`); None: the model serves none (`uncertainty=None`).
    """
    if training_args.torch_compile or getattr(training_args, "capture_step", False):
        # a job trains model after model: earlier models' graphs would only fill the recompile cache of the one
        # forward or step (8 entries, then eager) and slow its guards
        torch.compiler.reset()
    set_seed(training_args.seed)
    model = InSubForPreTraining(config)
    if init_encoder_from is not None:
        load_encoder_weights(model, init_encoder_from)
        if config.freeze_encoder and (repo := hub_repo_of(init_encoder_from)) is not None:
            name_frozen_base(model, repo)  # its saves leave the base out: it loads from its own repo
    run_dir = Path(training_args.output_dir)
    trainer = InSubTrainer(
        model=model, args=training_args, train_dataset=train_dataset, callbacks=callbacks, batch_views=batch_views,
        processing_class=processor,
    )
    for printer in (ProgressCallback, PrinterCallback):
        trainer.remove_callback(printer)
    trainer.add_callback(LogFileProgressCallback(run_dir / "train_log.jsonl"))
    checkpoint = last_complete_checkpoint(run_dir) if resume else None
    output = trainer.train(resume_from_checkpoint=checkpoint)
    check_trained_weights(model, trainer.state.log_history, str(run_dir))
    if uncertainty_inputs is not None:
        model.insub.fit_uncertainty(*uncertainty_inputs)
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

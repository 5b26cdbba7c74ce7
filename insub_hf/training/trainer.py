"""`InSubTrainer`: the transformers Trainer with InSub's side metrics and explicit loss scaling."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from contextlib import nullcontext
from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedModel, Trainer, TrainerCallback, TrainingArguments
from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME, logging

from ..checkpointing import checkpoint_problems, last_complete_checkpoint
from ..processing.image_range import check_unit_images
from ..data.batch_views import view_inputs
from ..data.device_images import DeviceImages, collate_device_batch
from ..data.seeding import SeededSamples, mix_seed, seeded_draws
from ..distributed import check_same_across_processes, convert_sync_batchnorm
from ..encoders.base import deferred_input_checks
from ..uncertainty.knn import clear_bank, holds_fit
from ..losses.step_checks import step_flags_bad, training_step_error, training_step_flags
from .captured_step import CapturedStepMixin
from .training_args import InSubTrainingArguments, fast_path_arguments, gpu_available, launched_processes

__all__ = ["InSubTrainer", "InSubTrainingArguments", "ObjectiveStepCallback", "SeededEpochCallback",
           "fast_path_arguments", "gpu_available", "launched_processes"]

logger = logging.get_logger(__name__)

SIDE_METRICS = ("ssl_loss", "diversity_loss", "mean_sigma", "hinge_active")


class ObjectiveStepCallback(TrainerCallback):
    """Calls the model's per-optimiser-step hooks (`step_begin`, `step_end`: the objective's schedules and EMA
    updates, e.g. DINO's teacher temperature, centre and teacher).

    `step_end` runs once per optimiser step, so gradient accumulation is covered. The hooks read the global step and
    the planned number of steps, so a resumed run continues its schedules where the checkpoint left off; what they
    move (a teacher, a centre) are model weights and buffers, saved and restored with every checkpoint.
    """

    @staticmethod
    def _model(kwargs) -> nn.Module | None:
        model = kwargs.get("model")
        model = getattr(model, "module", model)
        return model if hasattr(model, "step_begin") and hasattr(model, "step_end") else None

    def on_step_begin(self, args, state, control, **kwargs):
        model = self._model(kwargs)
        if model is not None:
            model.step_begin(state.global_step, state.max_steps)

    def on_step_end(self, args, state, control, **kwargs):
        model = self._model(kwargs)
        if model is not None:
            model.step_end(state.global_step - 1, state.max_steps)


class SeededEpochCallback(TrainerCallback):
    """Tells a `SeededSamples` training set which epoch begins (a resumed run's first one included)."""

    def __init__(self, samples: SeededSamples):
        self.samples = samples

    def on_epoch_begin(self, args, state, control, **kwargs):
        # state.epoch is the float progress (1.5 = half-way through epoch 1), restored from a checkpoint on resume
        self.samples.set_epoch(int(state.epoch + 1e-9))


# The config fields that make a run what it is: a checkpoint saved with other values is another run's
RUN_DEFINING_FIELDS = ("objective", "objective_config", "num_heads", "head_hidden_sizes", "head_output_size",
                       "diversity_alpha", "diversity_weight", "diversity_reduction", "normalize_heads", "head_norm")


def check_same_run(model: torch.nn.Module, checkpoint: str | os.PathLike) -> None:
    """Refuses to resume `model` from a checkpoint of another run (another objective, other heads or another hinge:
    the loss would jump), naming each field that differs and both values."""
    path = Path(checkpoint) / "config.json"
    config = getattr(getattr(model, "module", model), "config", None)
    if config is None or not path.is_file():
        return
    saved = json.loads(path.read_text())
    if saved.get("model_type") != getattr(config, "model_type", None):
        return
    ours = config.to_dict()
    changed = [f"{name}: checkpoint {saved.get(name)!r}, model {ours.get(name)!r}" for name in RUN_DEFINING_FIELDS
               if name in saved and json.loads(json.dumps(ours.get(name))) != saved.get(name)]
    if changed:
        raise ValueError(
            f"resume_from_checkpoint={str(checkpoint)!r} is another run's checkpoint ({'; '.join(changed)}): resuming "
            "would continue that run under this model's settings. Resume with the config the checkpoint was saved "
            "with, or start a new run in another output_dir."
        )


class InSubTrainer(CapturedStepMixin, Trainer):
    """Trains `InSubForPreTraining` (or any model returning `loss` and the side metrics).

    `compute_loss` returns the batch-mean loss; `loss_is_scaled_for_ga = False` makes `training_step` divide it by
    the gradient accumulation steps, so an accumulated step follows the gradient of the mean over micro-batches.
    The side metrics `ssl_loss`, `diversity_loss`, `mean_sigma` and `hinge_active` are averaged over each logging
    interval; they stay on the device until the logging step reads them.
    Each batch is checked for a NaN/inf loss and unnormalised inputs (`check_batch`) at the next logging step, before
    a checkpoint is saved and when training ends: no host sync inside a step. The trainer turns the model's own check in its
    forward off (`model.check_steps_in_forward = False`, for as long as the model lives) and does it instead.
    `ObjectiveStepCallback` runs the model's per-step hooks (the objective's schedules, e.g. an EMA teacher).

    With `batch_views` (e.g. `BatchTwoViews`), training batches carry plain images (`pixel_values` in [0, 1]) and
    the two augmented views are made here, on the model's device, for the whole batch at once.

    Random views are a function of where they are drawn, not of the generator's history, so a run resumed from any
    checkpoint (mid-epoch included) draws exactly the views of the uninterrupted run: per-sample view transforms read
    row i of epoch e with the generator seeded from (data seed, e, i) (`SeededSamples`, which wraps the training
    set), `batch_views` draws from (data seed, step, micro-batch, process).

    Several processes (`accelerate launch` / `torchrun`): the model config must be the same in all (checked here);
    the contrastive losses gather every process's embeddings with gradients, so a step equals one step on the
    global batch; BatchNorm statistics stay per process unless `args.sync_batchnorm`.
    """

    loss_is_scaled_for_ga = False
    side_metric_names = SIDE_METRICS

    def __init__(self, *args, batch_views: nn.Module | None = None, **kwargs):
        training_args = kwargs.get("args", args[1] if len(args) > 1 else None)
        if training_args is not None and training_args.data_seed is None:
            # the documented default (data order from `seed`), made explicit: otherwise the sampler reads
            # torch.initial_seed() when the loader is built, which any manual_seed call before train() changes
            training_args.data_seed = training_args.seed
        super().__init__(*args, **kwargs)
        check_distributed(self.args)
        self.batch_views = batch_views.to(self.args.device) if batch_views is not None else None
        self.check_capture_inputs()
        self.check_capture_optimizer()
        if (self.batch_views is not None and self.args.torch_compile and hasattr(self.batch_views, "compile_views")
                and not self.capturing):  # a captured step compiles its views with it
            self.batch_views.compile_views(backend=self.args.torch_compile_backend or "inductor",
                                           mode=self.args.torch_compile_mode)
        if getattr(self.args, "data_on_device", False) and self.train_dataset is not None:
            self._move_training_set(kwargs.get("data_collator") is None)
        elif isinstance(self.train_dataset, DeviceImages) and kwargs.get("data_collator") is None:
            self.data_collator = collate_device_batch  # its batches are gathered whole (`__getitems__`)
        self._view_seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
        self._micro_batch = (-1, 0)  # (global step, micro-batch within it) of the last views made per batch
        self._seeded_samples = None
        model = getattr(self.model, "module", self.model)
        if getattr(model.config, "freeze_encoder", False) and hasattr(model, "objective"):  # pretraining only
            model.insub.encoder.requires_grad_(False)  # again: loading weights (from_pretrained) unfreezes them
        if self.train_dataset is not None and _is_map_style(self.train_dataset):
            self._check_training_rows(getattr(model, "main_input_name", None))
            if self.batch_views is None:
                if self.args.dataloader_persistent_workers and self.args.dataloader_num_workers > 0:
                    raise ValueError(
                        "InSubTrainingArguments.dataloader_persistent_workers=True: persistent data loader workers "
                        "keep the epoch of the per-sample views they started with; set it to False (or make the "
                        "views per batch with batch_views)."
                    )
                self._seeded_samples = SeededSamples(self.train_dataset, self._view_seed)
                self.add_callback(SeededEpochCallback(self._seeded_samples))
        # the InSub forwards take `**inputs` (views), not loss kwargs: compute_loss passes no num_items_in_batch
        self.model_accepts_loss_kwargs = False
        config = getattr(model, "config", None)
        if config is not None:
            check_same_across_processes("The model config", config.to_diff_dict())
        self.add_callback(ObjectiveStepCallback)
        if getattr(self.args, "sync_batchnorm", False):
            self.model = convert_sync_batchnorm(self.model)
        # per-step values stay on the device until a logging step reads them (one host sync there)
        self._side_metrics: dict[str, dict[str, list[torch.Tensor]]] = {
            "train": defaultdict(list),
            "eval": defaultdict(list),
        }
        if hasattr(model, "check_steps_in_forward"):
            model.check_steps_in_forward = False  # compute_loss checks each batch (`check_batch`)
        self._pending_check: tuple[int, torch.Tensor, dict[str, torch.Tensor]] | None = None

    def _move_training_set(self, default_collator: bool) -> None:
        """`data_on_device`: the training set's images to the training device as one `DeviceImages`."""
        if self.batch_views is None or not _is_map_style(self.train_dataset):
            raise ValueError(
                "InSubTrainingArguments.data_on_device=True keeps a map-style set of plain images on the device and "
                "needs InSubTrainer(batch_views=...) to make the views there; set data_on_device=False for "
                f"{type(self.train_dataset).__name__}{'' if self.batch_views is not None else ' without batch_views'}."
            )
        self.train_dataset = DeviceImages.from_rows(self.train_dataset, self.args.device)
        if default_collator:
            self.data_collator = collate_device_batch

    def _check_training_rows(self, main_input: str | None) -> None:
        """A training set with no rows, or whose rows lack the model's input (a data set without its view
        transform), is refused here with what it holds, not deep inside the collator."""
        if len(self.train_dataset) == 0:
            raise ValueError("InSubTrainer: train_dataset is empty (0 rows); it needs at least one batch of samples.")
        batch = self.args.per_device_train_batch_size * self.args.world_size
        if self.args.dataloader_drop_last and len(self.train_dataset) < batch:
            raise ValueError(
                f"InSubTrainer: train_dataset has {len(self.train_dataset)} rows, fewer than one batch "
                f"(per_device_train_batch_size={self.args.per_device_train_batch_size} x {self.args.world_size} "
                "processes), and dataloader_drop_last=True drops that partial batch: there would be nothing to "
                "train on. Use a smaller batch or more data."
            )
        if main_input is None:
            return
        with seeded_draws(0):  # a look at row 0 that leaves the run's random streams alone
            row = self.train_dataset[0]
        if isinstance(row, dict) and main_input not in row:
            hint = (
                "a batch of plain images in `pixel_values` (batch_views makes the views)" if self.batch_views is not None
                else "the views: set the data set's view transform (e.g. dataset.with_transform(ImageViews(...)), "
                "DNAViews, TextViews) or pass batch_views"
            )
            raise ValueError(
                f"InSubTrainer: the training rows hold {sorted(row)} but the model reads `{main_input}`; give it "
                f"{hint}."
            )
        if self.batch_views is not None and isinstance(row, dict) and torch.is_tensor(row.get("pixel_values")):
            check_unit_images(row["pixel_values"], "InSubTrainer with batch_views: the training rows' pixel_values")

    def get_train_dataloader(self):
        """The Trainer's loader over the training set, read through `SeededSamples` (per-sample views)."""
        if self._seeded_samples is None:
            return super().get_train_dataloader()
        plain, self.train_dataset = self.train_dataset, self._seeded_samples
        try:
            return super().get_train_dataloader()
        finally:
            self.train_dataset = plain

    def train(self, resume_from_checkpoint: str | bool | None = None, *args, **kwargs):
        """`Trainer.train`; `resume_from_checkpoint=True` takes the last *complete* checkpoint of `output_dir`
        (a save interrupted half-way is skipped with a warning), and an explicit folder is checked first."""
        if resume_from_checkpoint is True:
            resume_from_checkpoint = last_complete_checkpoint(self.args.output_dir)
            if resume_from_checkpoint is None:
                raise ValueError(
                    f"resume_from_checkpoint=True: no complete checkpoint-* folder in {self.args.output_dir}."
                )
        elif resume_from_checkpoint:
            problems = checkpoint_problems(resume_from_checkpoint)
            if problems:
                raise ValueError(
                    f"resume_from_checkpoint={str(resume_from_checkpoint)!r} cannot be resumed from: "
                    + "; ".join(problems) + "."
                )
        if resume_from_checkpoint:
            check_same_run(self.model, resume_from_checkpoint)
        inner = getattr(self.model, "insub", self.model)
        if holds_fit(inner):
            # training moves the representations away from what was fitted on them (the bank, the calibration, the
            # spread's direction): served on, they would describe another model
            logger.warning("InSubTrainer.train: the model's fitted `uncertainty` describes its weights before "
                           "training, so it is dropped (`uncertainty` is None); fit it again after training: "
                           "model.fit_uncertainty(your_inputs).")
            clear_bank(inner)
        channels_last = bool(getattr(self.args, "channels_last", False)) and any(
            isinstance(m, nn.Conv2d) for m in self.model.modules()
        )
        if channels_last and hasattr(self.args, "check_channels_last"):
            self.args.check_channels_last()  # again: an ISA cap set since the arguments were built makes it unsafe
        if channels_last:
            self.model.to(memory_format=torch.channels_last)
        # a model compiled after another (a job's next run, a notebook's second model) recompiles the same forward:
        # automatic dynamic shapes would then make what differs (a config's loss weight, a size) symbolic, which
        # compiles for longer and runs slower; each model's graph stays static instead
        static = torch._dynamo.config.patch(automatic_dynamic_shapes=False) if self.args.torch_compile else nullcontext()
        try:
            with static:
                result = super().train(resume_from_checkpoint, *args, **kwargs)
            self.check_pending_batches()
            return result
        finally:
            if channels_last:  # the trained model then computes exactly what its saved and reloaded copy does
                self.model.to(memory_format=torch.contiguous_format)

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: torch.nn.Module | None = None) -> None:
        """Restores the weights through `from_pretrained`, strictly.

        transformers 5 saves some encoders (ViT, ...) under their older key names and renames them back only in
        `from_pretrained`; the stock resume loads the file as it is, non-strictly, and would leave every renamed
        weight (and the DINO teacher's) at its fresh initialisation with a mere warning.
        """
        target = model if model is not None else self.model
        target = getattr(target, "module", target)
        has_safetensors = any(
            os.path.isfile(os.path.join(resume_from_checkpoint, name))
            for name in (SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME)
        )
        if not isinstance(target, PreTrainedModel) or not has_safetensors:
            return super()._load_from_checkpoint(resume_from_checkpoint, model)
        loaded = type(target).from_pretrained(resume_from_checkpoint, config=target.config)
        target.load_state_dict(loaded.state_dict(), strict=True)

    def compute_loss(
        self,
        model: torch.nn.Module,
        inputs: dict[str, torch.Tensor],
        return_outputs: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ):
        if self.batch_views is not None and model.training:
            inputs = self.make_views(inputs)
        with deferred_input_checks():  # check_batch reads the same flags at the next logging step
            outputs = model(**inputs)
        mode = "train" if model.training else "eval"
        for name in SIDE_METRICS:
            value = outputs.get(name) if isinstance(outputs, dict) else None
            if value is not None:
                self._side_metrics[mode][name].append(value.detach().mean())
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs[0]
        self.check_batch(loss, inputs)
        return (loss, outputs) if return_outputs else loss

    def check_batch(self, loss: torch.Tensor, inputs: dict[str, torch.Tensor]) -> None:
        """The model's `check_training_step`, for eager and compiled training alike, on every device: the flags stay
        on the device and `check_pending_batches` reads them at the next logging step, before any checkpoint is
        saved and when training ends, so a step that does not log reads nothing back to the host."""
        self.merge_pending_check(*training_step_flags(loss, inputs))

    def merge_pending_check(self, loss_bad: torch.Tensor, largest: dict[str, torch.Tensor]) -> None:
        """Adds one batch's flags (`training_step_flags`) to those the next logging step reads, on the device."""
        if self._pending_check is None:
            self._pending_check = (self.state.global_step, loss_bad, largest)
            return
        first, bad, seen = self._pending_check
        merged = {k: torch.maximum(seen[k], v) if k in seen else v for k, v in largest.items()}
        self._pending_check = (first, bad | loss_bad, {**seen, **merged})

    def check_pending_batches(self) -> None:
        """Raises `check_training_step`'s error for the batches since the last check."""
        if self._pending_check is None:
            return
        (first, loss_bad, largest), self._pending_check = self._pending_check, None
        if bool(step_flags_bad(loss_bad, largest)):
            state = "not finite" if bool(loss_bad) else "finite"
            raise training_step_error(f"{state} at a step in {first}..{self.state.global_step}", largest)

    def _save_checkpoint(self, model, trial):
        self.check_pending_batches()  # a checkpoint never holds weights trained on a batch that failed its check
        return super()._save_checkpoint(model, trial)

    def make_views(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A training batch of plain images -> the same batch with both views (`pixel_values`, `pixel_values_2`)
        made by `batch_views` on the batch's device."""
        if "pixel_values_2" in inputs:
            raise ValueError(
                "InSubTrainer(batch_views=...) makes both views from `pixel_values`; the batch already holds "
                "`pixel_values_2` (a per-sample view transform): use one of the two."
            )
        inputs = dict(inputs)
        step = self.state.global_step
        micro = self._micro_batch[1] + 1 if self._micro_batch[0] == step else 0
        self._micro_batch = (step, micro)
        images = inputs["pixel_values"]
        seed = mix_seed(self._view_seed, step, micro, self.args.process_index)
        with seeded_draws(seed, images.device):
            inputs.update(view_inputs(self.batch_views, images))
        return inputs

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        self.check_pending_batches()
        mode = "train" if "loss" in logs else "eval" if "eval_loss" in logs else None
        if mode is not None:
            prefix = "eval_" if mode == "eval" else ""
            for name, values in self._side_metrics[mode].items():
                if values:
                    logs[prefix + name] = round(torch.stack(values).float().mean().item(), 6)
            self._side_metrics[mode].clear()
        if mode == "train":  # values callbacks measured between steps (e.g. the collapse monitors), once each
            for callback in self.callback_handler.callbacks:
                pop_latest = getattr(callback, "pop_latest", None)
                if callable(pop_latest):
                    logs.update({k: round(v, 6) for k, v in pop_latest().items()})
        super().log(logs, start_time)


def check_distributed(args: TrainingArguments) -> None:
    """Refuses, before any training, a run whose launcher started several processes that transformers does not train
    as one distributed run (each would train alone on all the data and overwrite the others' output)."""
    from transformers.training_args import ParallelMode

    processes = launched_processes()
    if processes > 1 and args.parallel_mode != ParallelMode.DISTRIBUTED:
        raise RuntimeError(
            f"The launcher started {processes} processes (WORLD_SIZE={processes}), but the training arguments make "
            f"each train alone (parallel_mode={args.parallel_mode.value}, use_cpu={args.use_cpu}, "
            f"ddp_backend={args.ddp_backend!r}). On a machine without a GPU pass --use_cpu true --ddp_backend gloo "
            "(or `accelerate launch --cpu`); with GPUs, check that every process sees one."
        )


def _is_map_style(dataset) -> bool:
    return not isinstance(dataset, torch.utils.data.IterableDataset) and hasattr(dataset, "__getitem__") and hasattr(
        dataset, "__len__"
    )

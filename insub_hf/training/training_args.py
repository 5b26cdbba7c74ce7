"""`InSubTrainingArguments`: transformers' `TrainingArguments` with the defaults of multi-view self-supervised
batches and the GPU fast path, and what it reads of the launcher (processes, devices)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

import torch
from transformers import Trainer, TrainingArguments

from .memory_format import resolve_channels_last
from ..validation import check_range


# One table of the Trainer settings the jobs treat apart, by role:
# - untrained: how a run is logged, saved, pushed, resumed or how fast it goes, never the weights it trains (a change
#   names no other run in a run cache, and a resumed run may change it);
# - recorded: results.json always keeps it (beside every field changed from the job's defaults);
# - card: the training settings results.json lists in full and a model card shows (as `Trainer.create_model_card`);
# - place: where a run goes or who pushes it, left out of the command a release's card names.
TRAINER_FIELDS: dict[str, tuple[str, ...]] = {
    "untrained": (
        "output_dir", "logging_strategy", "logging_steps", "logging_first_step", "log_on_each_node",
        "logging_nan_inf_filter", "include_num_input_tokens_seen", "log_level", "log_level_replica", "disable_tqdm",
        "report_to", "run_name", "project", "trackio_space_id", "trackio_bucket_id", "trackio_static_space_id",
        "save_only_model", "save_strategy", "save_steps", "save_on_each_node", "save_total_limit",
        "enable_jit_checkpoint", "push_to_hub", "hub_token", "hub_private_repo", "hub_model_id", "hub_strategy",
        "hub_always_push", "hub_revision", "dataloader_num_workers", "dataloader_pin_memory",
        "dataloader_persistent_workers", "dataloader_prefetch_factor", "dataloader_multiprocessing_context",
        "torch_compile", "torch_compile_backend", "torch_compile_mode", "torch_empty_cache_steps",
        "skip_memory_metrics", "resume_from_checkpoint", "do_train", "do_eval", "do_predict", "eval_strategy",
        "eval_steps", "eval_delay", "per_device_eval_batch_size", "eval_on_start", "local_rank", "ddp_timeout",
        "channels_last", "data_on_device", "capture_step",
    ),
    "recorded": ("num_train_epochs", "max_steps", "per_device_train_batch_size", "learning_rate", "seed", "bf16"),
    "card": (
        "learning_rate", "per_device_train_batch_size", "gradient_accumulation_steps", "num_train_epochs", "max_steps",
        "seed", "optim", "weight_decay", "lr_scheduler_type", "warmup_steps", "bf16",
    ),
    "place": ("output_dir", "push_to_hub", "hub_token", "hub_model_id", "hub_private_repo", "resume_from_checkpoint"),
}
HYPERPARAMETERS = TRAINER_FIELDS["card"]


@dataclass
class InSubTrainingArguments(TrainingArguments):
    """`TrainingArguments` with defaults that suit multi-view self-supervised batches, and the fast path by default
    where a CUDA GPU is present: bf16 autocast and data loader workers (`fast_path_arguments`; a value given is
    kept), channels_last for convolutional encoders (on a CPU only where it is safe: `channels_last`).
    `torch_compile=True` compiles the training forward into one graph (no breaks from encoders, heads or losses; the
    genomic encoder's LSTM excepted)."""

    _argument_group_name = "training (transformers' TrainingArguments; the defaults are the job's recipe)"

    remove_unused_columns: bool = field(
        default=False,
        metadata={"help": "Keep the view columns (pixel_values_2, ...) that a set_transform creates on the fly."},
    )
    global_batch_size: int | None = field(
        default=None,
        metadata={
            "help": "Samples per step over all processes (the contrastive batch: every one is a negative for the "
            "others); sets per_device_train_batch_size = global_batch_size / world size. Must divide evenly."
        },
    )
    sync_batchnorm: bool = field(
        default=False,
        metadata={"help": "Batch statistics over all processes in every BatchNorm (heads and encoder); GPU only."},
    )
    channels_last: bool | None = field(
        default=None,
        metadata={
            "help": "Train a convolutional encoder with its weights in channels_last memory format (NHWC), back to the "
            "default layout when train() returns; no effect on encoders without Conv2d. Default (unset): on a GPU, and "
            "on a CPU only where oneDNN runs its AVX-512 kernels (the CPU has AVX-512 and ONEDNN_MAX_CPU_ISA does not "
            "cap it lower): oneDNN's AVX2 channels_last kernels hang or crash on narrow layers (an upstream bug), so "
            "true on such a CPU is refused."
        },
    )

    logging_nan_inf_filter: bool = field(
        default=False,
        metadata={"help": "transformers' filter of NaN/inf losses from the logged loss; off: it reads every step's loss "
                          "on the host (a device sync per step), and InSubTrainer refuses a non-finite loss anyway."},
    )
    bf16: bool | None = field(
        default=None,
        metadata={"help": "bf16 autocast (the losses stay in float32). Default: on where a CUDA GPU supports bf16 "
                          "(and fp16 is off), off elsewhere."},
    )
    dataloader_num_workers: int | None = field(
        default=None,
        metadata={"help": "Data loader worker processes. Default: min(8, CPU cores - 1) where a CUDA GPU is present, "
                          "0 elsewhere (on a few CPU cores, workers only compete with the step)."},
    )
    dataloader_pin_memory: bool | None = field(
        default=None, metadata={"help": "Pin the batches' memory. Default: where a CUDA GPU is present."},
    )
    data_on_device: bool = field(
        default=False,
        metadata={
            "help": "Keep the training set of plain images (InSubTrainer's batch_views) on the training device as one "
            "tensor and gather each batch there (DeviceImages): no loader workers, no pixel copies per step. Needs "
            "room on the device for the set (float32: 4 bytes per pixel; a uint8 DeviceImages given as the training "
            "set: 1)."
        },
    )

    capture_step: bool = field(
        default=False,
        metadata={
            "help": "Train each optimiser step as one compiled graph (views, forward, backward, gradient clipping, "
            "AdamW with its learning rate as a tensor), so that with torch_compile_mode='reduce-overhead' a GPU "
            "replays it as one CUDA graph. Needs InSubTrainer(batch_views=...), AdamW (optim adamw_torch or "
            "adamw_torch_fused), gradient_accumulation_steps=1 and one process; every batch has the same size "
            "(dataloader_drop_last is set True)."
        },
    )

    def get_process_log_level(self) -> int:
        """transformers' `TrainingArguments.get_process_log_level`, which `Trainer.__init__` calls first: a stock
        Trainer given `capture_step=True` (which only `InSubTrainer` runs) is refused there, before any work."""
        caller = sys._getframe(1).f_locals.get("self")
        if self.capture_step and isinstance(caller, Trainer) and not hasattr(caller, "captured_step"):
            raise ValueError(
                f"InSubTrainingArguments.capture_step=True is run by InSubTrainer's own step; {type(caller).__name__} "
                "would train every step uncaptured: use insub_hf.InSubTrainer(..., batch_views=...), or "
                "capture_step=False."
            )
        return super().get_process_log_level()

    def check_channels_last(self) -> None:
        """channels_last checked again (`InSubTrainer.train` calls this): an ISA cap set in the process after the
        arguments were built (`ONEDNN_MAX_CPU_ISA`) makes it unsafe on this CPU, refused naming the field."""
        if self.channels_last:
            resolve_channels_last(True, on_cpu=self.use_cpu or not gpu_available(),
                                  field="InSubTrainingArguments.channels_last")

    def __post_init__(self) -> None:
        if self.fp16 and (self.use_cpu or not gpu_available()):
            raise ValueError(
                "InSubTrainingArguments.fp16=True needs a GPU (fp16 autocast with a loss scaler); training on the CPU "
                "it would be ignored. Use bf16=True (CPU autocast) or leave both off."
            )
        if self.capture_step:
            self.check_capture_step()
        if self.data_on_device:
            # the batches are gathered on the device: loader workers would copy them back and pinning refuses them
            for name, given in (("dataloader_num_workers", self.dataloader_num_workers),
                                ("dataloader_pin_memory", self.dataloader_pin_memory)):
                if given:
                    raise ValueError(
                        f"InSubTrainingArguments.{name}={given} with data_on_device=True: batches gathered on the "
                        f"device take no loader workers and no pinned memory; leave {name} unset (or 0 / False)."
                    )
            self.dataloader_num_workers, self.dataloader_pin_memory = 0, False
        # the fast path where a GPU is present, unless the fields were given (fast_path_arguments)
        chosen = fast_path_arguments(
            False if self.bf16 is None and self.fp16 else self.bf16, dataloader_num_workers=self.dataloader_num_workers
        )
        self.bf16, self.dataloader_num_workers = chosen["bf16"], chosen["dataloader_num_workers"]
        if self.dataloader_pin_memory is None:
            self.dataloader_pin_memory = chosen["dataloader_pin_memory"]
        self.use_cpu = self.use_cpu or chosen.get("use_cpu", False)
        if launched_processes() > 1 and not gpu_available():
            # several processes (torchrun, accelerate launch) on a machine without a GPU: transformers only makes
            # them one distributed run when told it trains on the CPU; otherwise each trains alone on all the data
            self.use_cpu = True
            self.ddp_backend = self.ddp_backend or "gloo"
        super().__post_init__()
        self.channels_last = resolve_channels_last(
            self.channels_last, on_cpu=self.use_cpu or not gpu_available(), field="InSubTrainingArguments.channels_last"
        )
        # the Trainer's own fields, refused here rather than deep inside numpy, torch or a loader
        check_range("InSubTrainingArguments.seed", self.seed, low=0, high=2**32 - 1, integer=True)
        check_range("InSubTrainingArguments.dataloader_num_workers", self.dataloader_num_workers, low=0, integer=True)
        check_range("InSubTrainingArguments.gradient_accumulation_steps", self.gradient_accumulation_steps, low=1,
                    integer=True)
        check_range("InSubTrainingArguments.weight_decay", self.weight_decay, low=0)
        check_range("InSubTrainingArguments.max_grad_norm", self.max_grad_norm, low=0)
        for name in ("per_device_train_batch_size", "per_device_eval_batch_size"):
            check_range(f"InSubTrainingArguments.{name}", getattr(self, name), low=1, integer=True)
        if self.max_steps <= 0:  # the epochs decide how long to train
            check_range("InSubTrainingArguments.num_train_epochs", self.num_train_epochs, low=0, low_inclusive=False)
        check_range("InSubTrainingArguments.learning_rate", self.learning_rate, low=0)
        if self.global_batch_size is not None:
            size = self.world_size
            if self.global_batch_size < 1 or self.global_batch_size % size:
                raise ValueError(
                    f"InSubTrainingArguments.global_batch_size={self.global_batch_size} must be a positive multiple of "
                    f"the world size ({size} processes), so that every process holds the same share; use e.g. "
                    f"{max(size, self.global_batch_size // size * size)}."
                )
            self.per_device_train_batch_size = self.global_batch_size // size

    def check_capture_step(self) -> None:
        """`capture_step=True` refused, naming the field, where one graph cannot hold the step."""
        from .captured_step import captured_step_problem

        optim = getattr(self.optim, "value", self.optim)
        problems = [
            (f"gradient_accumulation_steps={self.gradient_accumulation_steps} (the captured step is one micro-batch: "
             "use 1 and a larger per_device_train_batch_size)") if self.gradient_accumulation_steps != 1 else None,
            (f"optim={optim!r} (the captured step updates with AdamW: use 'adamw_torch' or 'adamw_torch_fused')"
             if optim not in ("adamw_torch", "adamw_torch_fused") else None),
            "fp16=True (its loss scaler steps outside the graph: use bf16)" if self.fp16 else None,
            (f"{launched_processes()} processes (the captured step trains one process; several processes train "
             "without capture_step)") if launched_processes() > 1 else None,
            captured_step_problem(),
        ]
        problems = [p for p in problems if p]
        if problems:
            raise ValueError("InSubTrainingArguments.capture_step=True cannot capture this run's step: "
                             + "; ".join(problems) + ".")
        self.dataloader_drop_last = True  # one shape for every step: a last short batch would trace a second graph


def gpu_available() -> bool:
    """Whether torch sees an accelerator transformers trains on without `use_cpu` (CUDA or Apple's MPS)."""
    return torch.cuda.is_available() or torch.backends.mps.is_available()


def launched_processes() -> int:
    """How many processes the launcher started (`WORLD_SIZE`, set by torchrun and accelerate launch); 1 without one."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def fast_path_arguments(
    bf16: bool | None = None, torch_compile: bool = False, dataloader_num_workers: int | None = None
) -> dict:
    """`InSubTrainingArguments` keywords for how fast to train, with the fast path as the default where a CUDA GPU is
    present: bf16 autocast where the GPU has it, data loader workers (min(8, CPU cores - 1)) and pinned memory. On
    CPU: float32, no workers (on a few cores, workers only compete with the step). `torch_compile` stays opt-in.
    None means that default; a value given is kept."""
    cuda = torch.cuda.is_available()
    if bf16 is None:
        bf16 = cuda and torch.cuda.is_bf16_supported()
    if dataloader_num_workers is None:
        dataloader_num_workers = min(8, max(1, (os.cpu_count() or 2) - 1)) if cuda else 0
    arguments = dict(
        bf16=bf16, torch_compile=torch_compile, dataloader_num_workers=dataloader_num_workers,
        dataloader_pin_memory=cuda,
    )
    if bf16 and not gpu_available():
        arguments["use_cpu"] = True  # transformers accepts bf16 without a GPU only when told it trains on the CPU
    return arguments

"""The experiment runner every job uses: pretrain named model variants through `InSubTrainer` (each in its own run
folder, resumable or cached), then write results.json, print the table and push when asked."""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from transformers import TrainerCallback

from .cards import RunRecord
from ..checkpointing import write_json
from ..checksums import add_checksums
from ..model.configuration_insub import InSubConfig
from ..hub import final_push_target, push_model_to_hub
from ..model.modeling_insub import InSubForPreTraining
from ..training.trainer import InSubTrainingArguments
from ..uncertainty.readings import is_calibrated
from .arguments import UNTRAINED_FIELDS, hyperparameters, recorded_training
from .pretraining import PretrainingResult, pretrain


# The share of a job's training inputs held out of pretraining as the calibration inputs of its models' uncertainty
CALIBRATION_FRACTION = 0.2


def calibration_split(rows: int, fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`(kept, held)`: indices of `rows` training inputs, `fraction` of them (at least 2) held out of pretraining as
    the calibration inputs of the models' `uncertainty` (`InSubModel.fit_uncertainty`), drawn with `seed`."""
    order = torch.randperm(rows, generator=torch.Generator().manual_seed(seed))
    held = max(2, round(rows * fraction))
    if held >= rows:
        raise ValueError(f"calibration_fraction={fraction} of {rows} training inputs leaves none to pretrain on.")
    return order[held:].sort().values, order[:held].sort().values


# In-distribution rows a job fits its models' uncertainty on, at most (`InSubModel.fit_uncertainty`: a bank and
# calibration inputs; fitting 5,000 adds a few seconds)
UNCERTAINTY_ROWS = 5000


@dataclass
class Variant:
    """One model to pretrain.

    Attributes:
        name: its run folder under the experiment's output folder (checkpoints, then the model in `name/model`).
        config: the architecture.
        seed: initialisation, data order and augmentation.
        callbacks: Trainer callbacks of this run (e.g. a per-epoch report).
        training: `InSubTrainingArguments` fields this run changes from the job's (e.g. its learning rate).
    """

    name: str
    config: InSubConfig
    seed: int = 0
    callbacks: list[TrainerCallback] = field(default_factory=list)
    training: dict = field(default_factory=dict)


def baseline_and_insub(build: Callable[[int, float], InSubConfig], num_heads: int, diversity_weight: float,
                       prefix: str = "") -> list[tuple[str, InSubConfig]]:
    """The two models every pretraining job compares, as `(run name, config)`: the baseline (one head, no hinge:
    `{prefix}baseline`) and InSub (`num_heads` heads, lambda `diversity_weight`: `{prefix}insub_m{num_heads}`).
    `build(num_heads, diversity_weight)` is the job's config of its recipe."""
    return [(f"{prefix}baseline", build(1, 0.0)),
            (f"{prefix}insub_m{num_heads}", build(num_heads, diversity_weight))]


class Experiment:
    """Pretrains variants into `output_dir/<variant name>` with one job's training arguments, and finishes with
    results.json, a printed table and an optional push.

    Args:
        job: the command (`"demo"`, `"compare"`, ...), recorded in results.json, by which a card renders it.
        training_args: the job's `InSubTrainingArguments` (each variant trains with a copy: its run folder as
            `output_dir`, its seed). `--push_to_hub` (with `hub_model_id`, default the output folder's name) makes
            `push` upload the job's model once, with its card; the token is checked here, before any training.
        arguments: the job's own arguments as recorded in results.json (beside `recorded_training`).
        training_defaults: the job's training defaults (its recipe's), against which changes are recorded and key
            the run cache (`training_changes`).
        overwrite: replace what a finished run left in `output_dir` (`--overwrite_output_dir`).
        The Trainer's `--resume_from_checkpoint true` continues every variant from its last complete checkpoint
        (`resume_requested`).
        output_dir: the experiment's folder, if not `training_args.output_dir`. One that holds a finished run (results
            or trained models) is refused here, before any work, unless `overwrite` or resuming.
    """

    def __init__(self, job: str, training_args: InSubTrainingArguments, arguments: dict, training_defaults: dict,
                 overwrite: bool = False, output_dir: str | Path | None = None):
        resume = resume_requested(training_args)
        self.output_dir = Path(output_dir or training_args.output_dir)
        check_output_dir(self.output_dir, overwrite or resume)
        self.training_defaults, self.resume = training_defaults, resume
        self.arguments = {**arguments, **recorded_training(training_args, training_defaults)}
        self.push_target = final_push_target(training_args)  # checks the token; the runs themselves push nothing
        self.training_args, self.job = training_args, job
        recorded = json.loads(json.dumps(self.arguments, default=str))  # as the file holds them
        if resume:
            check_resumed_arguments(self.output_dir / RUN_ARGUMENTS, recorded)
        write_json(self.output_dir / RUN_ARGUMENTS, recorded)

    def run_arguments(self, variant: Variant) -> InSubTrainingArguments:
        """The training arguments of `variant`: the job's with the variant's changes, in its run folder with its
        seed."""
        return replace(self.training_args, **variant.training, output_dir=str(self.output_dir / variant.name),
                       seed=variant.seed)

    def pretrain(
        self, variant: Variant, train_dataset, cached: bool = False, batch_views: torch.nn.Module | None = None,
        processor=None, init_encoder_from: str | Path | None = None,
        uncertainty_inputs: tuple[dict, dict | None] | None = None,
    ) -> PretrainingResult:
        """Pretrains `variant` on two-view rows (or on plain images with `batch_views`, see `pretrain`), saving
        `processor` (the data's image processor or tokenizer) with its checkpoints and model; with `cached`, a
        finished run of the same name is loaded instead (its model and `record.json`: cost and log).
        `uncertainty_inputs`: what the saved model's calibrated `uncertainty` is fitted on (`pretrain`)."""
        run_dir = self.output_dir / variant.name
        record_path = run_dir / "record.json"
        if cached and record_path.exists() and (run_dir / "model" / "config.json").exists():
            record = json.loads(record_path.read_text())
            model = InSubForPreTraining.from_pretrained(run_dir / "model")
            model = model.to("cuda" if torch.cuda.is_available() else "cpu")
            return PretrainingResult(model, record.get("log_history", []), record["cost"])
        result = pretrain(
            variant.config, train_dataset, self.run_arguments(variant), callbacks=variant.callbacks,
            resume=self.resume or cached, init_encoder_from=init_encoder_from, batch_views=batch_views,
            processor=processor, uncertainty_inputs=uncertainty_inputs,
        )
        if cached:
            write_json(record_path, {"cost": result.cost, "log_history": result.log_history})
        return result

    def finish(self, results: dict, table: str, filename: str = "results.json") -> Path:
        """Writes the run's record (`cards.RunRecord`: this job, its arguments, the training settings in full and
        `results`) to `output_dir/filename` (whole or not at all), prints `table`."""
        path = self.output_dir / filename
        write_json(path, RunRecord(self.job, self.arguments, hyperparameters(self.training_args), results).to_dict())
        print(table)
        return path

    def push(self, model, card=None, commit_message: str | None = None):
        """Pushes `model` with `card` (an `insub_hf.hub.model_card.HubCard`) when `--push_to_hub` was given; returns the upload's
        `CommitInfo`, or None."""
        if self.push_target is None:
            return None
        repo_id, token = self.push_target
        return push_model_to_hub(
            model, repo_id, card, token=token, private=self.training_args.hub_private_repo,
            commit_message=commit_message,
        )


def training_record(log_history: list[dict], cost: dict) -> dict:
    """What a comparison keeps of a run's log: cost, sigma, hinge activity (and its mean) and, where a collapse
    monitor ran, RankMe over training, the final ssl loss and its late drop."""
    logs = [h for h in log_history if "ssl_loss" in h]
    fifth = max(1, len(logs) // 5)
    late, before = logs[-fifth:], logs[-2 * fifth:-fifth]
    drop = None
    if before:
        previous = float(np.mean([h["ssl_loss"] for h in before]))
        drop = (previous - float(np.mean([h["ssl_loss"] for h in late]))) / abs(previous)
    active = [(h["step"], h["hinge_active"]) for h in logs if "hinge_active" in h]
    return {
        "cost": cost,
        "sigma_over_training": [(h["step"], h["mean_sigma"]) for h in logs if "mean_sigma" in h],
        "rankme_over_training": [(h["step"], h["rankme"]) for h in logs if "rankme" in h],
        "hinge_active_over_training": active,
        "hinge_active_mean": float(np.mean([value for _, value in active])) if active else None,
        "ssl_loss_final": logs[-1]["ssl_loss"] if logs else None,
        "ssl_loss_late_drop": drop,
    }


# The run cache's format: raised whenever what a key reads changes, so that no cached run is taken for another
CACHE_VERSION = 2


# Config fields a trained model gets afterwards (its uncertainty's reading), not part of what a run trains
AFTER_TRAINING = ("uncertainty",)


def settings_key(config: InSubConfig, **settings) -> str:
    """A short hash of the cache's version, a run's config (its non-default fields) and the other `settings` it
    depends on, so a changed setting names another run in a cache instead of reusing one."""
    spec = {"cache_version": CACHE_VERSION, "config": config.to_diff_dict(), **settings}
    spec["config"].pop("transformers_version", None)
    for name in AFTER_TRAINING:  # measured or set after training: the same run either way
        spec["config"].pop(name, None)
    return short_hash(spec)


def short_hash(spec: dict) -> str:
    """12 hex digits of SHA-1 over `spec` as sorted JSON: the name of a cache entry."""
    return hashlib.sha1(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:12]


# The arguments a run was started with (what a resumed run is compared with), and those a resumed run may change
RUN_ARGUMENTS = "run_arguments.json"
FREE_ON_RESUME = frozenset({"overwrite_output_dir", *UNTRAINED_FIELDS})


def resume_requested(training_args: InSubTrainingArguments) -> bool:
    """`--resume_from_checkpoint`: true (or `last`) continues every run of a job from that run's last complete
    checkpoint; unset starts them. A job trains several runs, each in its own folder, so one checkpoint folder is
    refused, naming the allowed values."""
    value = training_args.resume_from_checkpoint
    if value in (None, "", False):
        return False
    if str(value).lower() in ("true", "last"):
        return True
    raise ValueError(
        f"InSubTrainingArguments.resume_from_checkpoint={value!r}: a job continues each of its runs from that run's "
        "last complete checkpoint in output_dir; pass true (or last), or leave it unset."
    )


def check_resumed_arguments(path: Path, now: dict) -> None:
    """Refuses to resume a run whose recorded arguments (`path`) differ from `now` (JSON values) outside
    `FREE_ON_RESUME`, naming each field: the checkpoints hold the old run's weights, so results under new values
    would mislabel them."""
    if not path.is_file():
        return  # a run started before the arguments were recorded
    previous = json.loads(path.read_text())
    changed = [
        f"{name}: {previous.get(name)!r} -> {now.get(name)!r}" for name in sorted(set(previous) | set(now))
        if name not in FREE_ON_RESUME and previous.get(name) != now.get(name)
    ]
    if changed:
        raise ValueError(
            f"--resume_from_checkpoint: {path.parent} holds a run started with other settings ({'; '.join(changed)}); resume it with "
            "the same settings, or start a new run in another output_dir (or with --overwrite_output_dir)."
        )


# What a finished job leaves in its output_dir (a trained model: `<run>/model/config.json`)
FINISHED_FILES = ("results.json", "*_results.json", "ablation.json", "mechanism.json", "*/model/config.json")


def check_output_dir(output_dir: str | Path, replace: bool = False) -> None:
    """Refuses an `output_dir` that is a file, that cannot be written, or that holds a finished run (results or
    trained models) unless `replace`; called before any work (data included), so a mistaken command never
    overwrites a good run and an unwritable folder fails before the hours of training, not after."""
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise NotADirectoryError(f"output_dir={str(output_dir)!r} is a file, not a folder.")
    finished = [] if replace or not output_dir.is_dir() else sorted(
        {str(p.relative_to(output_dir)) for pattern in FINISHED_FILES for p in output_dir.glob(pattern)}
    )
    if finished:
        raise FileExistsError(
            f"output_dir={str(output_dir)!r} holds a finished run ({', '.join(finished[:3])}); pass "
            "--overwrite_output_dir to replace it, --resume_from_checkpoint true to continue it, or choose another "
            "output_dir."
        )
    existing = output_dir.absolute()
    while not existing.exists():  # the folder itself, or where it would be created
        existing = existing.parent
    try:
        tempfile.TemporaryFile(dir=existing).close()  # leaves nothing behind
    except OSError as error:
        raise PermissionError(
            f"output_dir={str(output_dir)!r} cannot be written ({error.strerror or error}); choose a folder this "
            "user may write to. Nothing was run."
        ) from None


def record_direction(model_dir: str | Path, direction: int | None) -> None:
    """Writes the head spread's direction, fixed by the harness on validation data, into a saved model's config.json
    (`InSubConfig.uncertainty['direction']`), so that the model's `uncertainty` output and its card read it that
    way; None where no direction holds (`HeadSpreadCalibration.usable_direction`)."""
    path = Path(model_dir) / "config.json"
    config = json.loads(path.read_text())
    block = config.get("uncertainty") or {}
    if is_calibrated(block):  # fitted with the model (`fit_uncertainty`), which fixed its direction
        return
    if config.get("uncertainty") is not None and block.get("direction") == direction:
        return
    config["uncertainty"] = {**block, "direction": direction}
    write_json(path, config)
    add_checksums(model_dir)  # the weights record the config they belong to

"""The comparison protocol the image jobs run: the data (training rows, evaluation images, OOD sets), the run cache
(pretrained models keyed by their settings) and one table cell (a method at one M and seed: its models pretrained or
loaded, then the harness on them). `insub-hf compare`, `ablation` and `mechanism` are front-ends over it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..model.configuration_insub import InSubConfig
from ..data import (
    IMAGE_DATASET_PRESETS,
    BatchTwoViews,
    ImageViews,
    DeviceImages,
    balanced_indices,
    fashion_mnist_tensors,
    load_fashion_mnist,
    load_image_dataset,
    fashion_mnist_description,
    resolve_fashion_mnist_source,
)
from ..evaluation.harness import HarnessArguments, MethodEvaluator
from ..evaluation.image_data import ImageEvaluationData
from ..evaluation.ood_sets import load_mnist_images, load_sklearn_digits, noise_ood_sets
from ..evaluation.probes import ProbeArguments
from ..evaluation.results import ComparisonRow, Cost, MethodResults, TrainingRecord
from ..model.modeling_insub import InSubForPreTraining
from .arguments import ProtocolArguments, training_changes
from .evaluation_cache import EvaluationCache
from .experiment import Experiment, Variant, record_direction, settings_key, training_record
from .heartbeat import heartbeat
from .methods import METHODS, method_members

# The linear probe a converged baseline reaches on the full Fashion-MNIST with the default protocol (at least).
FASHION_MNIST_PLATEAU = 0.85
# A run whose ssl loss still fell by more than this over its last fifth of steps has not reached its plateau.
STILL_IMPROVING = 0.03


@dataclass
class ProtocolData:
    """What the protocol trains and evaluates on.

    Attributes:
        train: the pretraining rows (`datasets.Dataset`): plain images with `views`, else both views per row.
        views: the per-batch view maker (`BatchTwoViews`) or None.
        evaluation: every image in [0, 1] with labels, and the OOD sets.
        description: where the data came from, for the log and results.json.
        processor: the data's `InSubImageProcessor`, saved with the runs' checkpoints and models.
    """

    train: object
    views: BatchTwoViews | None
    evaluation: ImageEvaluationData
    description: str
    processor: object = None


def _per_class(value: int) -> int | None:
    return value or None


def load_protocol_data(args: ProtocolArguments) -> ProtocolData:
    """The pretraining rows and the evaluation images in [0, 1]."""
    preset = IMAGE_DATASET_PRESETS[args.dataset]
    description = args.dataset
    if args.dataset == "fashion_mnist":
        source = resolve_fashion_mnist_source(args.data_source)
        description = fashion_mnist_description(source)
        per_class = _per_class(args.train_per_class), _per_class(args.test_per_class)
        if args.batch_views:  # tensors straight from the arrays: no PIL image per sample
            tensors = fashion_mnist_tensors(source, *per_class)
            (train_images, train_labels), (test_images, test_labels) = tensors["train"], tensors["test"]
            data = None
        else:
            data = load_fashion_mnist(source, *per_class)
    else:
        data = load_image_dataset(args.dataset, preset=args.dataset, label_column=preset.label_column)
        for split, per_class in (("train", args.train_per_class), ("test", args.test_per_class)):
            labels = np.asarray(data[split][preset.label_column])
            data[split] = data[split].select(balanced_indices(labels, _per_class(per_class), seed=0))
    if data is not None:
        train_images, train_labels = preset.to_tensors(data["train"])
        test_images, test_labels = preset.to_tensors(data["test"])
    shape = tuple(test_images.shape[1:])
    ood = noise_ood_sets(args.ood_images, shape, seed=1)
    if args.ood_dataset == "mnist":
        ood["mnist"] = load_mnist_images(min(args.ood_images, 5000), seed=3)
        # held out: chosen after the scores' directions were fixed, to check them on unseen OOD images
        ood["digits8x8"] = load_sklearn_digits(min(args.ood_images, 1797), shape, seed=4)
    elif args.ood_dataset != "none":
        ood_preset = IMAGE_DATASET_PRESETS[args.ood_dataset]
        ood_data = load_image_dataset(args.ood_dataset, split="test", preset=args.ood_dataset)
        ood[args.ood_dataset] = ood_preset.to_tensors(ood_data.select(range(min(args.ood_images, len(ood_data)))))[0]
    label_feature = data["train"].features.get(preset.label_column) if data is not None else None
    num_classes = getattr(label_feature, "num_classes", None) or int(train_labels.max()) + 1
    evaluation = ImageEvaluationData(
        train_images, train_labels, test_images, test_labels, ood, *preset.normalization(), num_classes
    )
    description = f"{description}: {len(train_images)} train / {len(test_images)} test images"
    processor = preset.image_processor()  # saved with every run's checkpoints and model
    if args.batch_views:  # the images as one tensor: the trainer gathers batches from it (on its device)
        views = args.make_batch_views(preset)
        return ProtocolData(DeviceImages(train_images), views, evaluation, description, processor)
    train = data["train"].with_transform(ImageViews(preset.augmentation(), preset.image_column))
    return ProtocolData(train, None, evaluation, description, processor)


class RunCache:
    """Pretrained models under `output_dir/cache/<key>`, keyed by (method config, seed, data, training
    settings), so that a longer table reuses what was already trained."""

    def __init__(self, experiment: Experiment, args: ProtocolArguments, data: ProtocolData):
        self.experiment, self.args, self.data = experiment, args, data

    def key(self, config: InSubConfig, seed: int) -> str:
        """The run's cache name: its config, seed and data, the recipe's batch, epochs and learning rate, and every
        other training argument changed from the job's defaults that changes the weights (`training_changes`)."""
        a, t = self.args, self.experiment.training_args
        epochs = t.num_train_epochs
        spec = {
            "seed": seed, "dataset": a.dataset, "data": self.data.description,
            "train_per_class": a.train_per_class, "batch": t.per_device_train_batch_size,
            # 3 and 3.0 (the default and `--num_train_epochs 3`) are one run
            "epochs": int(epochs) if float(epochs).is_integer() else epochs,
            "lr": t.learning_rate, "batch_views": a.batch_views,
            "min_crop_scale": a.min_crop_scale,
        }
        if t.bf16:  # other numerics, another run (float32 runs keep the keys they always had)
            spec["bf16"] = True
        changed = {
            name: value for name, value in training_changes(t, self.experiment.training_defaults).items()
            if name not in ("per_device_train_batch_size", "num_train_epochs", "learning_rate", "bf16", "seed")
        }
        if changed:  # e.g. another schedule; runs on the recipe's settings keep the keys they always had
            spec["training"] = changed
        return settings_key(config, **spec)

    def evaluation_data(self) -> dict:
        """What the evaluation reads besides the runs (for `EvaluationCache.key`)."""
        a = self.args
        return {"dataset": a.dataset, "data": self.data.description, "test_per_class": a.test_per_class,
                "ood_dataset": a.ood_dataset, "ood_images": a.ood_images}

    def model_dir(self, key: str) -> Path:
        """Where the run of `key` (`RunCache.key`) keeps its model."""
        return self.experiment.output_dir / "cache" / key / "model"

    def get(self, config: InSubConfig, seed: int) -> tuple[InSubForPreTraining, dict]:
        """(model, record) from the cache, pretraining and storing it first when absent; the record holds the cost,
        the head spread and the share of spreads below alpha over training, and how much the ssl loss still fell in
        the last fifth of the steps."""
        variant = Variant(f"cache/{self.key(config, seed)}", config, seed)
        evaluation = self.data.evaluation
        # the saved model's uncertainty: fitted on the pretraining images (a bank, and up to 2,000 of them to rank
        # against), which keeps every run's training data and cache key as they were
        result = self.experiment.pretrain(
            variant, self.data.train, cached=True, batch_views=self.data.views, processor=self.data.processor,
            uncertainty_inputs=(evaluation.inputs(evaluation.train_images), None),
        )
        return result.model, training_record(result.log_history, result.cost)


def evaluate_cell(
    method: str, m: int | None, seed: int, cache: RunCache, data: ImageEvaluationData, probe_args: ProbeArguments,
    harness_args: HarnessArguments, evaluation_data: dict | None = None,
) -> tuple[MethodResults, dict]:
    """Pretrains (or loads) the models of `method` at M=`m` for `seed` and runs the harness on `data` (cached in
    `output_dir/evaluation_cache`; `evaluation_data`: what identifies `data` there, default the protocol's test
    data). Returns the results, with the first model's training record and the cost summed over the models, and the
    arrays of the plots (with that record's sigma and hinge activity over training)."""
    spec = METHODS[method]
    members = method_members(cache.args, method, m, seed)
    run_keys = [cache.key(config, run_seed) for config, run_seed in members]  # before training writes into the configs
    runs = [cache.get(config, run_seed) for config, run_seed in members]
    evaluations = EvaluationCache(cache.experiment.output_dir / "evaluation_cache")
    key = evaluations.key(run_keys, method, evaluation_data or cache.evaluation_data(), probe_args, harness_args)
    evaluator = MethodEvaluator(
        [model for model, _ in runs], data, probe_args, harness_args,
        num_probes=m if spec.probe_per_head else 1, mc_dropout=spec.dropout,
    )
    with heartbeat(f"evaluation of {method} (seed {seed})"):  # the harness prints nothing for minutes
        results, arrays, seconds = evaluations.get(key, evaluator.run)
    if evaluator.seconds:  # evaluated now, not loaded from the cache: where its time went
        print(f"[compare] evaluation of {method} (seed {seed}) in {seconds:.1f} s: "
              + ", ".join(f"{part} {value:.1f}" for part, value in evaluator.seconds.items()), flush=True)
    with_heads = [key for key, (config, _) in zip(run_keys, members) if config.num_heads > 1]
    for key, calibration in zip(with_heads, results.head_spread_calibration):
        record_direction(cache.model_dir(key), calibration.usable_direction)
    costs = [record["cost"] for _, record in runs]
    results.training = TrainingRecord(**{
        key: runs[0][1][key] for key in ("ssl_loss_final", "ssl_loss_late_drop", "hinge_active_mean")
    })
    results.cost = Cost(
        parameters=sum(c["parameters"] for c in costs), seconds_per_step=sum(c["seconds_per_step"] for c in costs),
        peak_memory_mb=sum(c["peak_memory_mb"] for c in costs), pretrained_models=len(costs),
        pretraining_seconds=sum(c["seconds_per_step"] * c["steps"] for c in costs), evaluation_seconds=seconds,
    )
    for key in ("sigma_over_training", "hinge_active_over_training"):
        arrays[key] = runs[0][1][key]
    return results, arrays


def convergence_warnings(rows: list[ComparisonRow], evaluation_size: int, dataset: str) -> list[str]:
    """Warnings for runs that have not reached their plateau: the ssl loss still falling late in training, or a
    baseline probe far below what the protocol reaches on the full Fashion-MNIST."""
    warnings = []
    for row in rows:
        training = row.results.training
        drop = training.ssl_loss_late_drop if training else None
        if drop is not None and drop > STILL_IMPROVING:
            warnings.append(
                f"{row.name} (seed {row.seed}): the ssl loss still fell {100 * drop:.1f}% over the last fifth "
                "of training; it has not reached its plateau (raise --num_train_epochs)."
            )
        if row.method == "baseline" and dataset == "fashion_mnist" and evaluation_size >= 60000:
            accuracy = row.results.test.accuracy
            if accuracy < FASHION_MNIST_PLATEAU:
                warnings.append(
                    f"Baseline (seed {row.seed}): linear probe {100 * accuracy:.1f}% < "
                    f"{100 * FASHION_MNIST_PLATEAU:.0f}%, far below the plateau on the full Fashion-MNIST; the numbers "
                    "compare under-trained encoders (raise --num_train_epochs)."
                )
    return warnings

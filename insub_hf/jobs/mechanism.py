"""Does an objective pull the M heads together, and does the diversity hinge hold them apart?

For each objective of the registry (SimCLR, DINO, SCD, Self-GenomeNet, BYOL, VICReg, Barlow Twins) this job trains
the same model twice for a short run, with lambda 0 and with the hinge on at that objective's job defaults, and for
SimCLR also with the cosine of the mean (the paper's written formula) instead of the raw mean; it records the mean
head spread sigma over training, and RankMe of the mean embedding (the collapse monitor on a fixed batch). Where sigma with lambda 0 falls below alpha, the objective pulls the heads together
and the hinge has work to do; where it stays above alpha, the hinge is idle at that alpha. Output: `mechanism.json`,
`mechanism.md` and `mechanism.png`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import AutoConfig, AutoTokenizer

from ..training.collapse_monitor import CollapseMonitorCallback
from ..model.configuration_insub import InSubConfig
from ..data import DNAViews, TextViews, bundled_upstream_path, load_fasta_dataset, load_sentence_corpus
from ..data.dna_views import one_hot_dna
from ..evaluation.cost import device_description
from ..objectives import OBJECTIVES
from .arguments import (
    GenomicsArguments, JobOutputArguments, ProtocolArguments, TextArguments, genomics_config, recorded_training,
    text_config, training_arguments, training_changes, with_training_defaults,
)
from .comparison import load_protocol_data
from .experiment import Experiment, Variant, check_output_dir, settings_key, training_record, write_json
from .methods import method_config
from ..encoders.pretrained import packaged_minilm_path
from ..recipes import DNA, IMAGE, TEXT
from ..training.trainer import InSubTrainingArguments
from ..validation import CheckedArguments, checked

# Short runs of every objective: 150 optimiser steps, sigma logged every 5; the batch and learning rate of each
# objective's modality recipe (images: these, `recipes.IMAGE`; text and DNA: theirs unless a flag sets them)
TRAINING_DEFAULTS = IMAGE.training_arguments(
    output_dir="runs/mechanism", num_train_epochs=1, max_steps=150, logging_steps=5
)


@dataclass
class MechanismArguments(CheckedArguments, JobOutputArguments):
    """Which objectives and how many heads (the runs' training: `InSubTrainingArguments`, from `TRAINING_DEFAULTS`;
    output_dir holds the runs, tables and the plot)."""

    _argument_group_name = 'model and data'

    objectives: list[str] = checked(
        default_factory=lambda: list(OBJECTIVES), help=f"Any of {tuple(OBJECTIVES)}.", choices=tuple(OBJECTIVES)
    )
    num_heads: int = checked(IMAGE.num_heads, "M of every run.", low=2, integer=True)
    train_per_class: int = checked(
        0, "SimCLR/DINO: Fashion-MNIST training images per class (0: all).", low=0, integer=True
    )
    max_sentences: int | None = checked(
        2000, "SCD: corpus sentences used.", low=1, integer=True, optional=True
    )


@dataclass
class ObjectiveSetup:
    """What one objective's runs share: training rows, batch views, training arguments and the model per variant
    (`variants`: name -> config; alpha is the hinge's)."""

    train: object
    batch_views: object
    training_args: InSubTrainingArguments
    variants: dict[str, InSubConfig]
    alpha: float
    source: str
    processor: object = None
    init_encoder_from: str | Path | None = None
    monitor_inputs: dict | None = None  # a fixed batch of encoder inputs the collapse monitor measures


# Inputs of the fixed batch the collapse monitor measures RankMe and the spread on, per objective
MONITORED = 256


def with_weight(config: InSubConfig, weight: float) -> InSubConfig:
    """A copy of `config` with `diversity_weight=weight`."""
    return InSubConfig.from_dict({**config.to_dict(), "diversity_weight": weight})


def hinge_variants(config: InSubConfig, prefix: str = "") -> dict[str, InSubConfig]:
    """`{"<prefix>lambda 0": ..., "<prefix>hinge": config}`."""
    return {f"{prefix}lambda 0": with_weight(config, 0.0), f"{prefix}hinge": config}


def image_setup(args: MechanismArguments, training_args: InSubTrainingArguments, objective: str) -> ObjectiveSetup:
    """An image objective on Fashion-MNIST with the comparison's encoder, two views per image and optimiser (alpha,
    lambda: its defaults; the objective's own settings: its defaults, SimCLR's temperature the comparison's)."""
    protocol = ProtocolArguments(
        train_per_class=args.train_per_class, ood_dataset="none", objective=objective, num_heads=args.num_heads,
    )
    data = load_protocol_data(protocol)
    raw = method_config(protocol, "insub", args.num_heads)
    variants = hinge_variants(raw, "raw mean, " if objective == "simclr" else "")
    if objective == "simclr":
        variants.update(hinge_variants(method_config(protocol, "insub_cosine", args.num_heads), "cosine, "))
    evaluation = data.evaluation
    return ObjectiveSetup(
        data.train, data.views, training_args, variants, raw.diversity_alpha, data.description, data.processor,
        monitor_inputs=evaluation.inputs(evaluation.test_images[:MONITORED]),
    )


def recipe_batch_and_rate(training_args: InSubTrainingArguments, recipe) -> InSubTrainingArguments:
    """`training_args` with the batch and learning rate of `recipe`'s training, where no flag set them."""
    own = {name: recipe.training[name] for name in ("per_device_train_batch_size", "learning_rate")}
    return with_training_defaults(training_args, TRAINING_DEFAULTS, own)


def text_setup(args: MechanismArguments, training_args: InSubTrainingArguments) -> ObjectiveSetup:
    """SCD on the packaged MiniLM with the text job's settings."""
    text = TextArguments(max_sentences=args.max_sentences, num_heads=args.num_heads)
    path = packaged_minilm_path()
    tokenizer, encoder_config = AutoTokenizer.from_pretrained(path), AutoConfig.from_pretrained(path)
    corpus = load_sentence_corpus(text.corpus, text.text_column, max_sentences=text.max_sentences)
    train = corpus.with_transform(TextViews(tokenizer, text.text_column, text.max_length, encoder_config.vocab_size))
    config = text_config(text, encoder_config, args.num_heads, text.diversity_weight)
    batch = tokenizer(corpus[text.text_column][:MONITORED], padding=True, truncation=True, max_length=text.max_length,
                      return_tensors="pt")
    return ObjectiveSetup(train, None, recipe_batch_and_rate(training_args, TEXT), hinge_variants(config),
                          text.diversity_alpha, f"{len(corpus)} bundled sentences, all-MiniLM-L6-v2",
                          init_encoder_from=path,
                          monitor_inputs={k: batch[k] for k in ("input_ids", "attention_mask")})


def genomics_setup(args: MechanismArguments, training_args: InSubTrainingArguments) -> ObjectiveSetup:
    """Self-GenomeNet on the bundled Drosophila upstream regions with the genomics job's settings."""
    genomics = GenomicsArguments(num_heads=args.num_heads)
    corpus = load_fasta_dataset(bundled_upstream_path())
    train = corpus.with_transform(DNAViews(genomics.crop_length, two_views=False))
    config = genomics_config(genomics, args.num_heads, genomics.diversity_weight)
    crops = [one_hot_dna(s[: genomics.crop_length]) for s in corpus["sequence"][:MONITORED]]
    return ObjectiveSetup(train, None, recipe_batch_and_rate(training_args, DNA), hinge_variants(config),
                          genomics.diversity_alpha,
                          f"{len(corpus)} bundled upstream sequences, crops of {genomics.crop_length} nt",
                          monitor_inputs={"dna_one_hot": torch.stack(
                              [c for c in crops if len(c) == genomics.crop_length])})


def objective_setup(args: MechanismArguments, training_args: InSubTrainingArguments, objective: str) -> ObjectiveSetup:
    modality = OBJECTIVES[objective].modality
    if modality == "image":
        return image_setup(args, training_args, objective)
    return text_setup(args, training_args) if modality == "text" else genomics_setup(args, training_args)


def summarize(curve: list[tuple[int, float]], alpha: float, weight: float, hinge_active: float | None) -> dict:
    """One run's sigma curve `[(step, sigma), ...]` reduced to first / lowest / final sigma and its settings."""
    sigma = np.array([v for _, v in curve])
    return {
        "alpha": alpha, "weight": weight, "first_sigma": float(sigma[0]), "min_sigma": float(sigma.min()),
        "final_sigma": float(sigma[-1]), "hinge_active_mean": hinge_active,
    }


def verdict(runs: dict[str, dict], prefix: str = "") -> dict:
    """What the lambda-0 and hinge runs of one objective (names `<prefix>lambda 0`, `<prefix>hinge`) show:
    `pulls_together` = sigma with lambda 0 ends below half its first value; `hinge_has_work` = it ends below alpha;
    `hinge_keeps` = the hinge run's final sigma over the lambda-0 run's."""
    free, hinge = runs[f"{prefix}lambda 0"], runs[f"{prefix}hinge"]
    return {
        "pulls_together": free["final_sigma"] < 0.5 * free["first_sigma"],
        "hinge_has_work": free["final_sigma"] < hinge["alpha"],
        "hinge_keeps": hinge["final_sigma"] / free["final_sigma"],
    }


def mechanism_table(results: dict) -> str:
    lines = ["| objective | run | alpha | lambda | sigma first | sigma lowest | sigma final | hinge active |",
             "|---|---|---|---|---|---|---|---|"]
    for objective, r in results.items():
        for name, run in r["runs"].items():
            active = "-" if run["hinge_active_mean"] is None else f"{100 * run['hinge_active_mean']:.0f}%"
            lines.append(
                f"| {objective} | {name} | {run['alpha']:g} | {run['weight']:g} | {run['first_sigma']:.4f} | "
                f"{run['min_sigma']:.4f} | {run['final_sigma']:.4f} | {active} |"
            )
    lines.append("")
    for objective, r in results.items():
        for prefix, v in r["verdicts"].items():
            label = f"{objective} ({prefix.rstrip(', ')})" if prefix else objective
            lines.append(
                f"- {label}: with lambda 0 the heads are {'pulled together' if v['pulls_together'] else 'not pulled together'}"
                f" and sigma ends {'below' if v['hinge_has_work'] else 'above'} alpha (the hinge "
                f"{'has work' if v['hinge_has_work'] else 'is idle there'}); the hinge leaves sigma "
                f"{v['hinge_keeps']:.2f}x the lambda-0 value."
            )
    return "\n".join(lines)


def run_mechanism(args: MechanismArguments, training_args: InSubTrainingArguments | None = None) -> dict:
    """Trains every (objective, variant) run with `training_args` (default: `TRAINING_DEFAULTS`; text and DNA with
    their recipes' batch and learning rate unless given), or loads it from `output_dir/runs`, writes
    `mechanism.json`, `mechanism.md` and `mechanism.png` and prints the table."""
    from ..evaluation.plots import mechanism_plot

    training_args = training_args or training_arguments(TRAINING_DEFAULTS)
    check_output_dir(training_args.output_dir, args.overwrite_output_dir)
    out, seed = Path(training_args.output_dir), training_args.seed
    results, curves = {}, {}
    for objective in args.objectives:
        setup = objective_setup(args, training_args, objective)
        experiment = Experiment("mechanism", setup.training_args, asdict(args), TRAINING_DEFAULTS, overwrite=True)
        runs, curves[objective] = {}, {}
        t = setup.training_args
        training = {**training_changes(t, TRAINING_DEFAULTS), "logging_steps": t.logging_steps}
        for name, config in setup.variants.items():
            key = settings_key(config, training=training, seed=seed, data=setup.source)
            monitor = CollapseMonitorCallback(setup.monitor_inputs, every=max(1, t.logging_steps))
            result = experiment.pretrain(
                Variant(f"runs/{objective}-{key}", config, seed, [monitor]), setup.train, cached=True,
                batch_views=setup.batch_views, processor=setup.processor, init_encoder_from=setup.init_encoder_from,
            )
            record = training_record(result.log_history, result.cost)
            curves[objective][name] = {"sigma": record["sigma_over_training"],
                                       "rankme": record["rankme_over_training"]}
            runs[name] = {**summarize(record["sigma_over_training"], config.diversity_alpha, config.diversity_weight,
                                      record["hinge_active_mean"]),
                          "normalize_mean": config.objective_config.get("normalize_mean"), "run": f"runs/{objective}-{key}",
                          "sigma_over_training": record["sigma_over_training"],
                          "rankme_over_training": record["rankme_over_training"]}
            print(f"[mechanism] {objective}, {name}: sigma {runs[name]['first_sigma']:.4f} -> "
                  f"{runs[name]['final_sigma']:.4f}", flush=True)
        prefixes = ["raw mean, ", "cosine, "] if objective == "simclr" else [""]
        results[objective] = {
            "data": setup.source, "alpha": setup.alpha, "runs": runs,
            "verdicts": {p: verdict(runs, p) for p in prefixes},
        }
    alphas = {o: {name: run["alpha"] for name, run in r["runs"].items()} for o, r in results.items()}
    mechanism_plot(curves, alphas, out / "mechanism.png")
    table = mechanism_table(results)
    (out / "mechanism.md").write_text(table + "\n")
    recorded = {**asdict(args), **recorded_training(training_args, TRAINING_DEFAULTS)}
    write_json(out / "mechanism.json", {"args": recorded, "device": device_description(), "results": results})
    print(f"{table}\n[mechanism] wrote {out}/mechanism.md, mechanism.json, mechanism.png")
    return results


ARGUMENT_GROUPS = (MechanismArguments, InSubTrainingArguments)
run = run_mechanism

"""`insub-hf text-candidates`: which way of pretraining InSub on a sentence model keeps the base model's quality, and
which reading of its uncertainty tells more than sentence length and the k-NN distance any user already has.

Each candidate (`CANDIDATES`) is an InSub model (the text recipe's heads and hinge) pretrained from the base model
on the bundled pretraining tweets, at every seed. Every model, the base included, is measured on validation data and
then on test data as `evaluation.text_bench` measures a text model (transfer, cosine agreement with the base, each
uncertainty reading); `knn` searches the pretraining tweets.

The choice (`choose`) reads validation numbers only: the candidate with the best validation transfer among those
within 1 point of the base and with cosine correlation >= 0.9, and for it the reading with the best mean
validation OOD AUROC, the k-NN distance unless a spread reading beats it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
from transformers import AutoConfig

from ..model.configuration_insub import InSubConfig
from ..encoders import load_encoder_weights
from ..data import TextViews, load_sentence_corpus
from ..encoders.pretrained import base_tokenizer, encoder_path
from ..evaluation.text_bench import SPLITS, TextBenchArguments, make_bench, measure_base, measure_model
from ..evaluation.text_ood_sets import NEAR_DOMAIN
from .arguments import JobOutputArguments, job_seeds, training_arguments
from .experiment import Experiment, Variant
from ..recipes import TEXT
from ..model.modeling_insub import InSubModel
from ..model.sentence_embeddings import InSubSentenceEncoder
from ..training.trainer import InSubTrainingArguments
from ..validation import checked

TRAINING_DEFAULTS = TEXT.training_arguments(output_dir="runs/text_candidates")

# name -> (InSubConfig changes, InSubTrainingArguments changes) from the text recipe (SCD, M 3, batch 64, 1 epoch)
CANDIDATES = {
    "scd": ({"freeze_encoder": False}, {"learning_rate": 3e-5}),  # the paper's: the whole encoder tuned at 3e-5
    "scd_lr3e-6": ({"freeze_encoder": False}, {"learning_rate": 3e-6}),  # lightly tuned: a tenth of the rate
    "scd_frozen": ({"freeze_encoder": True}, {"learning_rate": 1e-3}),  # the base's representation; heads only
}
# what the text release ships (`insub-hf release text --uncertainty`): the reading `choose` picked on validation data,
# with scd_frozen as the text recipe (docs/text_candidates.md)
RELEASE_READING = "knn"
BASE = "base"  # the base model as it is (no InSub heads: its readings are length and k-NN only)


@dataclass
class TextCandidatesArguments(TextBenchArguments, JobOutputArguments):
    """The candidates, seeds and measurements (training: `InSubTrainingArguments`, from `TRAINING_DEFAULTS`)."""

    _argument_group_name = 'candidates and data'

    encoder: str = field(
        default="minilm", metadata={"help": "minilm (the packaged all-MiniLM-L6-v2), a local folder or a Hub id."}
    )
    candidates: list[str] = checked(default_factory=lambda: list(CANDIDATES), help="Which candidates to train.",
                                    choices=list(CANDIDATES))
    seeds: list[int] | None = checked(None, "Seeds of each candidate (default: the Trainer's --seed and the next).",
                                      low=0, integer=True, optional=True)
    max_length: int = checked(32, "Tokens per pretraining sentence.", low=2, integer=True)


def base_encoder(path, encoder_config, tokenizer) -> InSubSentenceEncoder:
    """The base model as it is (one head, no hinge), as the measurements read every model."""
    model = InSubModel(InSubConfig.for_text(encoder_config, num_heads=1, diversity_weight=0.0))
    load_encoder_weights(model, path)
    return InSubSentenceEncoder(model, tokenizer)


def choose(results: dict, base_name: str = BASE) -> dict:
    """The validation-only choice (module docstring), over the seeds' mean."""
    def mean(model: str, *keys) -> float:
        values = []
        for per_seed in results[model].values():
            value = per_seed["validation"]
            for key in keys:
                value = value[key]
            values.append(value)
        return float(np.mean(values))

    base_accuracy = mean(base_name, "transfer_accuracy")
    eligible = [c for c in results if c != base_name and mean(c, "transfer_accuracy") >= base_accuracy - 0.01
                and mean(c, "cosine_spearman_with_base") >= 0.9]
    if not eligible:
        return {"candidate": None, "reading": "knn", "why": "no candidate keeps the base's transfer and cosines"}
    candidate = max(eligible, key=lambda c: mean(c, "transfer_accuracy"))
    ood = {r: mean(candidate, "readings", r, "mean_ood_auroc") for r in ("spread", "spread_by_length", "knn")}
    reading = max(("spread", "spread_by_length"), key=ood.get)
    reading = reading if ood[reading] > ood["knn"] else "knn"
    return {"candidate": candidate, "reading": reading, "validation_mean_ood_auroc": ood, "eligible": eligible}


def table(results: dict, sets: list[str]) -> str:
    """Markdown: per split (validation first), model and seed: transfer, cosine correlation, and per reading the
    mean OOD AUROC, near-domain AUROC, error AUROC and Spearman with length."""
    lines = []
    for split in SPLITS:
        lines += [f"\n### {split}\n", "| model | seed | transfer acc | cos Spearman vs base | reading | mean OOD AUROC | "
                  + " | ".join(sets) + " | error AUROC | Spearman with length |", "|" + "---|" * (8 + len(sets))]
        for model, per_seed in results.items():
            for seed, numbers in per_seed.items():
                row = numbers[split]
                for r, values in row["readings"].items():
                    lines.append(
                        f"| {model} | {seed} | {100 * row['transfer_accuracy']:.2f} | {row['cosine_spearman_with_base']:.3f}"
                        f" | {r} | {100 * values['mean_ood_auroc']:.1f} | "
                        + " | ".join(f"{100 * values['ood_auroc'][s]:.1f}" for s in sets)
                        + f" | {100 * values['error_auroc']:.1f} | {values['length_spearman']:.2f} |")
    return "\n".join(lines)


def run_text_candidates(args: TextCandidatesArguments, training_args: InSubTrainingArguments | None = None) -> dict:
    """Trains every candidate at every seed, measures them and the base model (validation, then test), writes
    results.json (numbers and the validation-only choice) and candidates.md (the table); returns the results."""
    training_args = training_args or training_arguments(TRAINING_DEFAULTS)
    args.seeds = job_seeds(args.seeds, training_args, count=2)
    path = encoder_path(args.encoder)
    experiment = Experiment("text-candidates", training_args, asdict(args), TRAINING_DEFAULTS,
                            overwrite=args.overwrite_output_dir)
    tokenizer = base_tokenizer(path)
    encoder_config = AutoConfig.from_pretrained(path)
    corpus = load_sentence_corpus("bundled")
    train = corpus.with_transform(TextViews(tokenizer, "text", args.max_length, encoder_config.vocab_size))
    bench = make_bench(args, list(corpus["text"][:args.bank_size]))
    results = {BASE: {0: measure_base(bench, base_encoder(path, encoder_config, tokenizer), args)}}
    for name in args.candidates:
        config_changes, training_changes = CANDIDATES[name]
        results[name] = {}
        for seed in args.seeds:
            config = InSubConfig.for_text(encoder_config, **config_changes)
            variant = Variant(f"{name}_seed{seed}", config, seed, training=training_changes)
            model = experiment.pretrain(variant, train, init_encoder_from=path).model.insub
            numbers = measure_model(InSubSentenceEncoder(model, tokenizer), True, bench, args, seed).numbers
            results[name][seed] = numbers
            print(f"{name} seed {seed}: validation transfer {100 * numbers['validation']['transfer_accuracy']:.2f} %")
    set_names = list(bench.sets)
    chosen = choose(results)
    text = table(results, set_names)
    (experiment.output_dir / "candidates.md").write_text(text + "\n")
    experiment.finish({"results": results, "choice": chosen, "ood_sets": set_names,
                       "near_domain": [s for s in set_names if s in NEAR_DOMAIN]},
                      text + f"\nchosen on validation data: {chosen}")
    return {"results": results, "choice": chosen}


ARGUMENT_GROUPS = (TextCandidatesArguments, InSubTrainingArguments)
run = run_text_candidates

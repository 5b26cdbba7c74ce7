"""`insub-hf text-candidates`: which way of pretraining InSub on a sentence model keeps the base model's quality, and
which reading of its uncertainty tells more than sentence length and the k-NN distance any user already has.

Each candidate (`CANDIDATES`) is an InSub model (the text recipe's heads and hinge) pretrained from the base model
on the bundled pretraining tweets, at every seed. Every model, the base included, is measured twice, on validation
data and then on test data (disjoint tweets and disjoint halves of each OOD set):

- transfer: logistic regression on the unit embeddings of the transfer tweets (train split), penalty chosen on the
  validation tweets; accuracy on validation, then test;
- drop-in: the Spearman correlation of all pairwise cosines with the base model's;
- each uncertainty reading (`READINGS`): OOD AUROC against each set of `evaluation.text_ood_sets` (higher = OOD,
  its direction fixed on the validation halves), AUROC for the transfer classifier's errors, Spearman with the
  sentence's token count. `length` (the token count itself) shows what length alone explains; `knn` is the cosine
  distance to the k-th nearest pretraining tweet.

The choice (`choose`) reads validation numbers only: the candidate with the best validation transfer among those
within 1 point of the base and with cosine correlation >= 0.9, and for it the reading with the best mean
validation OOD AUROC, the k-NN distance unless a spread reading beats it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from scipy.stats import spearmanr
from transformers import AutoConfig

from ..configuration_insub import InSubConfig
from ..data import TextViews, load_sentence_corpus, load_tweet_sentiment
from ..encoders.pretrained import base_tokenizer, encoder_path
from ..encoders import load_encoder_weights
from ..evaluation.metrics.ood import ood_auroc
from ..evaluation.senteval import fit_classifier
from ..evaluation.text_ood_sets import NEAR_DOMAIN, shuffled_words, text_ood_sets
from ..modeling_insub import InSubModel
from .arguments import JobOutputArguments, job_seeds, training_arguments
from .experiment import Experiment, Variant
from ..recipes import TEXT
from ..sentence_embeddings import InSubSentenceEncoder
from ..text_uncertainty import fit_length_standardisation, knn_distance, length_standardised
from ..trainer import InSubTrainingArguments
from ..validation import CheckedArguments, checked

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
READINGS = ("spread", "spread_by_length", "knn", "length")
SPLITS = ("validation", "test")


@dataclass
class TextCandidatesArguments(CheckedArguments, JobOutputArguments):
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
    transfer_train: int = checked(3000, "Transfer tweets the classifier is trained on.", low=10, integer=True)
    split_size: int = checked(1500, "Tweets of each of validation and test.", low=10, integer=True)
    ood_size: int = checked(500, "Sentences of each OOD set per split.", low=10, integer=True)
    k: int = checked(10, "The k-NN reading's neighbour.", low=1, integer=True)
    bank_size: int = checked(4000, "Pretraining tweets the k-NN reading searches (the bundled corpus has 4,000).",
                             low=1, integer=True)
    length_buckets: int = checked(5, "Token-count buckets of the length-standardised spread.", low=1, integer=True)


@dataclass
class Encoded:
    """One model's view of a list of sentences: unit `embeddings (N, d)`, `spread (N,)` (its heads'; None for the
    base), `lengths (N,)` token counts."""

    embeddings: torch.Tensor
    spread: torch.Tensor | None
    lengths: torch.Tensor


def encode(encoder: InSubSentenceEncoder, sentences: list[str], heads: bool) -> Encoded:
    out = encoder.encode(sentences)
    lengths = torch.as_tensor([int(m.sum()) for m in encoder.tokenize(list(sentences))["attention_mask"]])
    return Encoded(F.normalize(out.embeddings, dim=1), out.uncertainty if heads else None, lengths)


def cosine_correlation(a: torch.Tensor, b: torch.Tensor) -> float:
    """Spearman correlation of the pairwise cosines of unit rows `a (N, d)` with those of `b (N, d')`."""
    upper = torch.triu_indices(len(a), len(a), offset=1)
    pairs = lambda x: (x @ x.T)[upper[0], upper[1]].numpy()  # noqa: E731
    return float(spearmanr(pairs(a), pairs(b)).statistic)


def _split(data, args: TextCandidatesArguments):
    """The transfer tweets in a fixed order (seed 0, whatever the run's seed): train, validation, test."""
    order = np.random.default_rng(0).permutation(len(data))
    stops = np.cumsum([args.transfer_train, args.split_size, args.split_size])
    if stops[-1] > len(data):
        raise ValueError(f"transfer_train + 2 * split_size = {stops[-1]} is more than the {len(data)} transfer tweets.")
    return {name: data.select(order[start:stop]) for name, start, stop in
            zip(("train", *SPLITS), (0, *stops[:-1]), stops)}


def readings(encoded: Encoded, bank: torch.Tensor, k: int, standardise: dict | None) -> dict[str, torch.Tensor]:
    """Every reading of one model on a set of sentences (unoriented: the direction is fixed later)."""
    out = {"knn": knn_distance(encoded.embeddings, bank, k), "length": encoded.lengths.double()}
    if encoded.spread is not None:
        out["spread"] = encoded.spread
        out["spread_by_length"] = length_standardised(encoded.spread, encoded.lengths, **standardise)
    return out


@dataclass
class Bench:
    """What every model is measured on: the transfer tweets (`data`: train, validation, test), the OOD sets
    (`sets`: name -> split -> sentences), the k-NN reading's bank sentences and the base model's unit embeddings of
    the validation and test tweets (`base`, for the cosine correlation)."""

    data: dict
    sets: dict
    bank_sentences: list[str]
    base: dict | None = None


def make_bench(args: TextCandidatesArguments, bank_sentences: list[str]) -> Bench:
    """The transfer tweets in a fixed split (`_split`) and `ood_size` sentences of each OOD set per split (disjoint
    halves; the shuffled words of the split's own tweets)."""
    data = _split(load_tweet_sentiment("transfer"), args)
    made = text_ood_sets(list(data["validation"]["text"]), 2 * args.ood_size, seed=0)  # "shuffled" is made per split
    sets = {name: {} for name in made}
    for split, offset in zip(SPLITS, (0, args.ood_size)):
        for name, sentences in made.items():
            sets[name][split] = (shuffled_words(list(data[split]["text"][:args.ood_size]), seed=1) if name == "shuffled"
                                 else sentences[offset:offset + args.ood_size])
    return Bench(data, sets, bank_sentences)


def measure_base(bench: Bench, path, encoder_config, tokenizer, args: TextCandidatesArguments) -> dict:
    """The base model's numbers (its readings: k-NN and length); keeps its embeddings in `bench.base`."""
    model = InSubModel(InSubConfig.for_text(encoder_config, num_heads=1, diversity_weight=0.0))
    load_encoder_weights(model, path)
    measured = measure_model(InSubSentenceEncoder(model, tokenizer), False, bench, args, seed=0)
    bench.base = measured.embeddings
    return measured.numbers


@dataclass
class Measured:
    """What `measure_model` measured: `numbers` (for results.json: per split the transfer accuracy, the cosine
    correlation and every reading's AUROCs and Spearman; the readings' `directions` and `length_standardisation`),
    and beside them the model's unit `embeddings` of the validation and test tweets (`SPLITS`) and of the `bank`."""

    numbers: dict
    embeddings: dict[str, torch.Tensor]
    bank: torch.Tensor


def measure_model(encoder, heads: bool, bench: Bench, args: TextCandidatesArguments, seed: int) -> Measured:
    """Validation and test numbers of one model (see the module's docstring), its readings' directions and length
    standardisation (fitted on the validation tweets)."""
    data = bench.data
    enc = {split: encode(encoder, list(data[split]["text"]), heads) for split in ("train", *SPLITS)}
    bank = encode(encoder, bench.bank_sentences, False).embeddings
    standardise = fit_length_standardisation(enc["validation"].spread, enc["validation"].lengths,
                                             args.length_buckets) if heads else None
    labels = {split: np.asarray(data[split]["label"]) for split in ("train", *SPLITS)}
    classifier = fit_classifier((enc["train"].embeddings.numpy(), labels["train"]),
                                (enc["validation"].embeddings.numpy(), labels["validation"]), seed=seed)
    per_split, scores = {}, {}
    for split in SPLITS:
        errors = torch.as_tensor(classifier.predict(enc[split].embeddings.numpy()) != labels[split])
        in_scores = readings(enc[split], bank, args.k, standardise)
        out_scores = {name: readings(encode(encoder, sentences[split], heads), bank, args.k, standardise)
                      for name, sentences in bench.sets.items()}
        scores[split] = (in_scores, out_scores, errors)
        correlation = (cosine_correlation(enc[split].embeddings[:1000], bench.base[split][:1000])
                       if bench.base is not None else 1.0)
        per_split[split] = {"transfer_accuracy": float(1 - errors.double().mean()),
                            "cosine_spearman_with_base": correlation}
    # each reading's direction: the one with the higher mean AUROC over the validation OOD sets
    in_val, out_val, _ = scores["validation"]
    directions = {r: 1 if np.mean([ood_auroc(in_val[r], out_val[s][r], higher_is_in=False) for s in bench.sets])
                  >= 0.5 else -1 for r in in_val}
    for split in SPLITS:
        in_scores, out_scores, errors = scores[split]
        per_split[split]["readings"] = {r: {
            "ood_auroc": {s: ood_auroc(d * in_scores[r], d * out_scores[s][r], higher_is_in=False) for s in bench.sets},
            "error_auroc": ood_auroc(d * in_scores[r][~errors], d * in_scores[r][errors], higher_is_in=False),
            "length_spearman": float(spearmanr(d * in_scores[r].numpy(), enc[split].lengths.numpy()).statistic),
        } for r, d in directions.items()}
        for numbers in per_split[split]["readings"].values():
            numbers["mean_ood_auroc"] = float(np.mean(list(numbers["ood_auroc"].values())))
    return Measured({"directions": directions, "length_standardisation": standardise, **per_split},
                    {split: enc[split].embeddings for split in SPLITS}, bank)


def uncertainty_settings(reading: str, measured: Measured, k: int) -> dict:
    """`InSubUncertainty`'s settings for `reading` of a model `measure_model` measured."""
    numbers = measured.numbers
    if reading == "knn":
        return {"reading": "knn", "k": k, "bank": measured.bank}
    if reading == "spread_by_length":
        return {"reading": reading, "direction": numbers["directions"][reading], **numbers["length_standardisation"]}
    return {"reading": "spread"}


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
    experiment = Experiment(training_args, asdict(args), TRAINING_DEFAULTS, overwrite=args.overwrite_output_dir)
    tokenizer = base_tokenizer(path)
    encoder_config = AutoConfig.from_pretrained(path)
    corpus = load_sentence_corpus("bundled")
    train = corpus.with_transform(TextViews(tokenizer, "text", args.max_length, encoder_config.vocab_size))
    bench = make_bench(args, list(corpus["text"][:args.bank_size]))
    results = {BASE: {0: measure_base(bench, path, encoder_config, tokenizer, args)}}
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

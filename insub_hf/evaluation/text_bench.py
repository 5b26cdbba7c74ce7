"""How a text model's embeddings and uncertainty readings are measured (what `insub-hf text-candidates` compares and
`insub-hf release text` reports): transfer to the tweets' sentiment, drop-in cosine agreement with the base model,
and each uncertainty reading (`READINGS`) against OOD sets, the transfer classifier's errors and sentence length, on
validation data and then on test data (disjoint tweets and disjoint halves of each OOD set).

- transfer: logistic regression on the unit embeddings of the transfer tweets (train split), penalty chosen on the
  validation tweets; accuracy on validation, then test;
- drop-in: the Spearman correlation of all pairwise cosines with the base model's;
- each reading: OOD AUROC against each set of `text_ood_sets` (higher = OOD, its direction fixed on the validation
  halves), AUROC for the transfer classifier's errors, Spearman with the sentence's token count. `length` (the token
  count itself) shows what length alone explains; `knn` is the distance to the k-th nearest bank sentence.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch
import torch.nn.functional as F
from scipy.stats import spearmanr

from ..data import load_tweet_sentiment
from ..uncertainty.knn import knn_distance
from ..uncertainty.length import fit_length_buckets, standardise_by_length
from ..uncertainty.settings import DEFAULT_K
from ..validation import CheckedArguments, checked
from .metrics.ood import ood_auroc
from .senteval import fit_classifier
from .text_ood_sets import english_prose, shuffled_words, text_ood_sets

READINGS = ("spread", "spread_by_length", "knn", "length")
SPLITS = ("validation", "test")
# The second domain's own bank and held-out sentences (`second_domain`; english_prose has 3,571)
OWN_BANK, OWN_HELD_OUT = 2000, 500


@dataclass
class TextBenchArguments(CheckedArguments):
    """What a text model is measured on and how (`make_bench`, `measure_model`)."""

    transfer_train: int = checked(3000, "Transfer tweets the classifier is trained on.", low=10, integer=True)
    split_size: int = checked(1500, "Tweets of each of validation and test.", low=10, integer=True)
    ood_size: int = checked(500, "Sentences of each OOD set per split.", low=10, integer=True)
    k: int = checked(DEFAULT_K, "The k-NN reading's neighbour.", low=1, integer=True)
    bank_size: int = checked(4000, "Pretraining tweets the k-NN reading searches (the bundled corpus has 4,000).",
                             low=1, integer=True)
    length_buckets: int = checked(5, "Token-count buckets of the length-standardised spread.", low=1, integer=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.k > self.bank_size:  # the k-th neighbour of a smaller bank does not exist
            raise ValueError(f"{type(self).__name__}.k={self.k} is more than bank_size={self.bank_size}; give k <= bank_size.")
        if self.ood_size > self.split_size:  # the shuffled set is each split's own tweets, shuffled
            raise ValueError(f"{type(self).__name__}.ood_size={self.ood_size} is more than split_size={self.split_size}: "
                             "the shuffled set is made of each split's own tweets; give ood_size <= split_size.")


@dataclass
class Encoded:
    """One model's view of a list of sentences: unit `embeddings (N, d)`, `spread (N,)` (its heads'; None for the
    base), `lengths (N,)` token counts."""

    embeddings: torch.Tensor
    spread: torch.Tensor | None
    lengths: torch.Tensor


def encode(encoder, sentences: list[str], heads: bool, cache: dict | None = None) -> Encoded:
    """`encoder` (an `InSubSentenceEncoder`) on `sentences`: unit embeddings, its heads' spread (with `heads`) and
    the token counts; `cache` (a bench's) keeps what the same encoder object gave for the same sentences."""
    key = (id(encoder), tuple(sentences))
    found = cache.get(key) if cache is not None else None
    if found is None:
        out = encoder.encode(sentences)
        lengths = torch.as_tensor([int(m.sum()) for m in encoder.tokenize(list(sentences))["attention_mask"]])
        found = Encoded(F.normalize(out.embeddings, dim=1), out.head_spread, lengths)
        if cache is not None:
            cache[key] = found
    return replace(found, spread=found.spread if heads else None)


def cosine_correlation(a: torch.Tensor, b: torch.Tensor) -> float:
    """Spearman correlation of the pairwise cosines of unit rows `a (N, d)` with those of `b (N, d')`."""
    upper = torch.triu_indices(len(a), len(a), offset=1)
    pairs = lambda x: (x @ x.T)[upper[0], upper[1]].numpy()  # noqa: E731
    return float(spearmanr(pairs(a), pairs(b)).statistic)


def _split(data, args: TextBenchArguments):
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
        out["spread_by_length"] = standardise_by_length(encoded.spread, encoded.lengths, **standardise)
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
    # what each encoder gave (`encode`): a base measured through the model that holds it frozen is encoded once
    encoded: dict = field(default_factory=dict)


def make_bench(args: TextBenchArguments, bank_sentences: list[str]) -> Bench:
    """The transfer tweets in a fixed split (`_split`) and `ood_size` sentences of each OOD set per split (disjoint
    halves; the shuffled words of the split's own tweets)."""
    data = _split(load_tweet_sentiment("transfer"), args)
    try:
        made = text_ood_sets(list(data["validation"]["text"]), 2 * args.ood_size, seed=0)  # "shuffled": per split
    except ValueError as error:  # a maker has fewer strings than both halves need
        raise ValueError(
            f"{type(args).__name__}.ood_size={args.ood_size}: each OOD set needs 2 x ood_size = {2 * args.ood_size} "
            f"strings (a validation and a test half), and {error} Give a smaller ood_size."
        ) from None
    sets = {name: {} for name in made}
    for split, offset in zip(SPLITS, (0, args.ood_size)):
        for name, sentences in made.items():
            sets[name][split] = (shuffled_words(list(data[split]["text"][:args.ood_size]), seed=1) if name == "shuffled"
                                 else sentences[offset:offset + args.ood_size])
    return Bench(data, sets, bank_sentences)


def measure_base(bench: Bench, encoder, args: TextBenchArguments) -> dict:
    """The base model's numbers (`encoder`: an `InSubSentenceEncoder` of it with one head; its readings: k-NN and
    length); keeps its embeddings in `bench.base`, against which every other model's cosines are compared."""
    measured = measure_model(encoder, False, bench, args, seed=0)
    bench.base = measured.embeddings
    return measured.numbers


@dataclass
class Measured:
    """What `measure_model` measured: `numbers` (for results.json: per split the transfer accuracy, the cosine
    correlation and every reading's AUROCs and Spearman; the readings' `directions` and `length_buckets`),
    and beside them the model's unit `embeddings` of the validation and test tweets (`SPLITS`), of the `bank` and
    of each OOD set's test sentences (`ood`, by set)."""

    numbers: dict
    embeddings: dict[str, torch.Tensor]
    bank: torch.Tensor
    ood: dict[str, torch.Tensor]


def measure_model(encoder, heads: bool, bench: Bench, args: TextBenchArguments, seed: int) -> Measured:
    """Validation and test numbers of one model (see the module's docstring), its readings' directions and length
    standardisation (fitted on the validation tweets)."""
    data = bench.data
    enc = {split: encode(encoder, list(data[split]["text"]), heads, bench.encoded) for split in ("train", *SPLITS)}
    bank = encode(encoder, bench.bank_sentences, False, bench.encoded).embeddings
    standardise = fit_length_buckets(enc["validation"].spread, enc["validation"].lengths,
                                             args.length_buckets) if heads else None
    labels = {split: np.asarray(data[split]["label"]) for split in ("train", *SPLITS)}
    classifier = fit_classifier((enc["train"].embeddings.numpy(), labels["train"]),
                                (enc["validation"].embeddings.numpy(), labels["validation"]), seed=seed)
    per_split, scores = {}, {}
    for split in SPLITS:
        errors = torch.as_tensor(classifier.predict(enc[split].embeddings.numpy()) != labels[split])
        in_scores = readings(enc[split], bank, args.k, standardise)
        outside = {name: encode(encoder, sentences[split], heads, bench.encoded) for name, sentences in bench.sets.items()}
        out_scores = {name: readings(encoded, bank, args.k, standardise) for name, encoded in outside.items()}
        if split == "test":
            ood = {name: encoded.embeddings for name, encoded in outside.items()}
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
    return Measured({"directions": directions, "length_buckets": standardise, **per_split},
                    {split: enc[split].embeddings for split in SPLITS}, bank, ood)


def second_domain(encoder, measured: Measured, k: int, seed: int = 2) -> dict:
    """The k-NN reading where a user's data is another domain of English (`english_prose`, the standard library's
    docstrings): `OWN_HELD_OUT` of its sentences against the test OOD sets `measured` holds (their own shuffled words
    in place of the tweets'), with the shipped bank (`measured.bank`) and with a bank of `OWN_BANK` other sentences
    of that domain, as `set_bank` makes one. Returns `{"shipped": {set: AUROC}, "own": {set: AUROC}, "own_bank":
    OWN_BANK, "held_out": OWN_HELD_OUT}`."""
    prose = english_prose(OWN_BANK + OWN_HELD_OUT, seed)
    own_bank, held_out = encode(encoder, prose[:OWN_BANK], False).embeddings, prose[OWN_BANK:]
    outside = {name: e for name, e in measured.ood.items() if name not in ("english_prose", "shuffled")}
    outside["shuffled"] = encode(encoder, shuffled_words(held_out, seed), False).embeddings
    inside = encode(encoder, held_out, False).embeddings
    out = {"own_bank": OWN_BANK, "held_out": OWN_HELD_OUT}
    for label, bank in (("shipped", measured.bank), ("own", own_bank)):
        seen = knn_distance(inside, bank, k)
        out[label] = {name: ood_auroc(seen, knn_distance(e, bank, k), higher_is_in=False) for name, e in outside.items()}
    return out


def uncertainty_settings(reading: str, measured: Measured, k: int) -> dict:
    """The settings that make `reading` the model's `uncertainty` (`HubCard.sentence_uncertainty`), as `measure_model`
    measured them."""
    numbers = measured.numbers
    if reading == "knn":
        return {"reading": "knn", "k": k, "bank": measured.bank}
    if reading == "spread_by_length":
        return {"reading": reading, "direction": numbers["directions"][reading], **numbers["length_buckets"]}
    return {"reading": "spread"}



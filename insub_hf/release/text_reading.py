"""How the text release measures its model's uncertainty: the single readings as `insub-hf text-candidates` measures
a candidate (with a bank of broad natural English or of the pretraining sentences), and what fitting the calibrated
reading on a user's sentences gives (`fitted_examples`); the model itself ships unfitted, since a general-purpose
text model cannot know its user's domain. Sentences are tokenised as the sentence encoder tokenises them: one
truncation on every path."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..jobs.cards import TEXT_TEST, TEXT_VALIDATION
from ..data import load_tweet_sentiment
from ..data.broad_text import REGISTERS, broad_english, pool_digest
from ..encoders.pretrained import base_tokenizer, encoder_path
from ..evaluation.text_ood_sets import english_prose, text_ood_sets
from ..uncertainty.knn import clear_bank
from ..uncertainty.settings import DEFAULT_K
from ..validation import checked
from ..jobs import text_candidates

# The single readings the text release measures with its bank and marks as `text-candidates` chose (the model
# itself ships unfitted: its calibrated `uncertainty` is fitted on a user's own sentences, as its card says)
RELEASE_READINGS = ("spread", "spread_by_length", "knn")

BANKS = ("broad", "pretraining")


@dataclass
class TextReleaseArguments:
    """The single readings the text release measures (`measure`): the one `insub-hf text-candidates` chose on
    validation data, marked on the card, the k-NN reading's neighbour and what its bank holds."""

    _argument_group_name = 'text release'

    uncertainty: str = checked(
        text_candidates.RELEASE_READING,
        "The single reading the card marks as chosen on validation data: knn (the cosine distance to the k-th "
        "nearest bank sentence), spread (the heads' spread) or spread_by_length (the spread standardised per "
        "sentence-length bucket on validation tweets). The model ships unfitted either way (`uncertainty` None "
        "until `fit_uncertainty` on a user's sentences).",
        choices=RELEASE_READINGS,
    )
    k: int = checked(DEFAULT_K, "The k-NN reading's neighbour (also of the fitted examples).", low=1, integer=True)
    bank: str = checked("broad", "What the bank holds (--detector_bank sentences): broad (natural English of "
                        f"{len(REGISTERS)} registers in equal parts, {', '.join(REGISTERS)}, drawn from the pool "
                        "bundled with insub-hf) or pretraining (the pretraining sentences).", choices=BANKS)


def broad_bank(size: int, seed: int) -> tuple[list[str], dict[str, int]]:
    """`size` sentences of broad natural English (`data.broad_text.broad_english`) and how many each register gave,
    with the pool's SHA-256 under `"pool sha256"`."""
    drawn = broad_english(size, seed)
    return ([s for part in drawn.values() for s in part],
            {**{name: len(part) for name, part in drawn.items()}, "pool sha256": pool_digest()})


def tokens(encoder, sentences: list[str]) -> dict[str, torch.Tensor]:
    """`sentences` as `encoder` (an `InSubSentenceEncoder`) tokenises them: `input_ids` and `attention_mask`."""
    batch = encoder.tokenize(list(sentences))
    return {name: batch[name] for name in ("input_ids", "attention_mask")}


def fitted_examples(model, encoder, corpus: list[str], rows: int, k: int, seed: int) -> dict:
    """What fitting the calibrated `uncertainty` gives a user (`InSubModel.fit_uncertainty`, the card's one line),
    on two kinds of user data, after which `model` is left unfitted (`unfit`): the pretraining sentences
    (`corpus[:rows]` the bank, the first `TEXT_VALIDATION` transfer tweets the calibration, the next `TEXT_TEST`
    the in-distribution test) and another domain (the standard library's docstrings: a bank, calibration and
    held-out sentences of their own). Each against the `text_ood_sets` (its own shuffled words in place of the
    tweets'), as `evaluation.flagging.separation_by_reading` measures them; `rows` caps every part, `k` is the
    k-NN reading's neighbour."""
    from ..evaluation.flagging import measured_separation
    from ..evaluation.text_bench import OWN_BANK, OWN_HELD_OUT

    def measured(bank: list[str], calibration: list[str], inside: list[str], skip: str | None) -> dict:
        model.fit_uncertainty(tokens(encoder, bank), tokens(encoder, calibration), k=k, seed=seed)
        outside = {name: tokens(encoder, sentences)
                   for name, sentences in text_ood_sets(inside, len(inside), seed).items() if name != skip}
        block = model.config.uncertainty
        return {**measured_separation(model, tokens(encoder, inside), outside),
                "bank": block["bank_size"], "calibration": block["calibration_size"][1],
                "components": block["components"]}

    tweets = list(load_tweet_sentiment("transfer")["text"])
    validation, test = min(TEXT_VALIDATION, rows), min(TEXT_TEST, rows)
    prose = english_prose(min(OWN_BANK, rows) + validation + min(OWN_HELD_OUT, rows), seed=2)
    bank = min(OWN_BANK, rows)
    try:
        return {
            "tweets": measured(list(corpus[:rows]), tweets[:validation], tweets[validation:validation + test], None),
            "docstrings": measured(prose[:bank], prose[bank:bank + validation], prose[bank + validation:],
                                   "english_prose"),
        }
    finally:
        unfit(model)


def unfit(model) -> None:
    """`model` (an `InSubModel`) with no fitted `uncertainty`: no bank, no calibration, no direction; it serves
    `uncertainty=None` until `fit_uncertainty`."""
    clear_bank(model)
    model.config.set_uncertainty(reading="spread", direction=None, length_buckets=None)


def measure(model, tokenizer, args, reading: TextReleaseArguments, bank: list[str], seed: int) -> dict:
    """The released model measured as `insub-hf text-candidates` measures a candidate: transfer, cosine correlation
    with the base, every single uncertainty reading on validation then test, with `bank` as the k-NN reading's bank;
    that reading on a second domain with this bank and with the domain's own (`second_domain`); `reading` names the
    one `text-candidates` chose."""
    from transformers import AutoConfig

    from ..evaluation.text_bench import (
        TextBenchArguments, make_bench, measure_base, measure_model, second_domain,
    )
    from ..encoders.frozen_base import frozen_base_facts
    from ..model.sentence_embeddings import InSubSentenceEncoder

    path = encoder_path(args.encoder)
    check = TextBenchArguments(k=reading.k, bank_size=len(bank))
    bench = make_bench(check, list(bank))
    encoder = InSubSentenceEncoder(model, tokenizer)
    # a model over its frozen base gives the base's own embeddings: measured through it, each sentence is encoded once
    base = encoder if frozen_base_facts(model) is not None else text_candidates.base_encoder(
        path, AutoConfig.from_pretrained(path), base_tokenizer(path))
    measure_base(bench, base, check)
    measured = measure_model(encoder, True, bench, check, seed)
    elsewhere = second_domain(encoder, measured, reading.k)
    return {**measured.numbers, "reading": reading.uncertainty, "ood_sets": list(bench.sets),
            "second_domain": elsewhere}

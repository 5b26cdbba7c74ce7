"""How the text release chooses and checks its model's uncertainty: the bank its k-NN reading searches (broad natural
English or the pretraining sentences), the readings measured as `insub-hf text-candidates` measures a candidate, and
the shipped scores' check on tweets against their shuffled words. Sentences are tokenised as the sentence encoder
tokenises them: one truncation on every path."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..cards import TEXT_TEST, TEXT_VALIDATION
from ..data import load_tweet_sentiment
from ..data.broad_text import BROAD_SOURCES, broad_english
from ..encoders.pretrained import base_tokenizer, encoder_path
from ..evaluation.text_ood_sets import shuffled_words
from ..uncertainty.settings import DEFAULT_K
from ..validation import checked
from . import text_candidates

# The readings the text release can ship (the calibrated one is fitted on a user's own sentences: its card says how)
RELEASE_READINGS = ("spread", "spread_by_length", "knn")

BANKS = ("broad", "pretraining")


@dataclass
class TextReleaseArguments:
    """How the released text model reads its `uncertainty` (`insub-hf text-candidates` chose it on validation data)
    and what its bank holds."""

    _argument_group_name = 'text release'

    uncertainty: str = checked(
        text_candidates.RELEASE_READING,
        "What the model's `uncertainty` is, through sentence-transformers and AutoModel alike: knn (the cosine "
        "distance to the k-th nearest bank sentence, the bank in the weights), spread (the heads' spread) or "
        "spread_by_length (the spread standardised per sentence-length bucket on validation tweets).",
        choices=RELEASE_READINGS,
    )
    k: int = checked(DEFAULT_K, "The k-NN reading's neighbour.", low=1, integer=True)
    bank: str = checked("broad", "What the bank holds (--detector_bank sentences): broad (natural English of "
                        f"{len(BROAD_SOURCES)} registers in equal parts: {', '.join(BROAD_SOURCES)}; needs Debian's "
                        "wordnet-base and fortunes) or pretraining (the pretraining sentences).", choices=BANKS)


def broad_bank(size: int, seed: int) -> tuple[list[str], dict[str, int]]:
    """`size` sentences of broad natural English (`data.broad_text.broad_english`) and how many each source gave."""
    drawn = broad_english(size, seed)
    return [s for part in drawn.values() for s in part], {name: len(part) for name, part in drawn.items()}


def tokens(encoder, sentences: list[str]) -> dict[str, torch.Tensor]:
    """`sentences` as `encoder` (an `InSubSentenceEncoder`) tokenises them: `input_ids` and `attention_mask`."""
    batch = encoder.tokenize(list(sentences))
    return {name: batch[name] for name in ("input_ids", "attention_mask")}


def validation_shuffled(seed: int) -> list[str]:
    """The `TEXT_VALIDATION` transfer tweets with their words shuffled: what the head spread's direction is fixed
    against."""
    return shuffled_words(load_tweet_sentiment("transfer")["text"][:TEXT_VALIDATION], seed)


def shuffled_check(detector, encoder, seed: int) -> dict[str, float]:
    """The AUROCs (higher = more likely OOD) of the released model's own scores (`detector`, its `InSubOODDetector`)
    on the `TEXT_TEST` tweets after the validation ones against their shuffled words."""
    from ..evaluation.metrics.ood import ood_auroc

    test = load_tweet_sentiment("transfer")["text"][TEXT_VALIDATION:TEXT_VALIDATION + TEXT_TEST]
    seen = detector.score(tokens(encoder, test))
    unseen = detector.score(tokens(encoder, shuffled_words(test, seed + 1)))
    return {name: ood_auroc(seen[name], unseen[name], higher_is_in=False) for name in seen}


def measure(model, tokenizer, args, reading: TextReleaseArguments, bank: list[str], seed: int) -> tuple[dict, dict]:
    """The released model measured as `insub-hf text-candidates` measures a candidate (transfer, cosine correlation
    with the base, every uncertainty reading on validation then test, with `bank` as the k-NN reading's bank; that
    reading on a second domain with this bank and with the domain's own, `second_domain`), and the settings of the
    chosen `reading` (its direction and length buckets fixed on validation data) with the embedded `bank`."""
    from transformers import AutoConfig

    from ..evaluation.text_bench import (
        TextBenchArguments, make_bench, measure_base, measure_model, second_domain, uncertainty_settings,
    )
    from ..sentence_embeddings import InSubSentenceEncoder

    path = encoder_path(args.encoder)
    check = TextBenchArguments(k=reading.k, bank_size=len(bank))
    bench = make_bench(check, list(bank))
    measure_base(bench, text_candidates.base_encoder(path, AutoConfig.from_pretrained(path), base_tokenizer(path)), check)
    encoder = InSubSentenceEncoder(model, tokenizer)
    measured = measure_model(encoder, True, bench, check, seed)
    settings = {**uncertainty_settings(reading.uncertainty, measured, reading.k), "bank": measured.bank}
    elsewhere = second_domain(encoder, measured, reading.k)
    return {**measured.numbers, "reading": reading.uncertainty, "ood_sets": list(bench.sets),
            "second_domain": elsewhere}, settings

"""Text views: tokenised sentences; the two views are two dropout passes of the encoder over the same tokens."""

from __future__ import annotations

import warnings

from ..validation import check_choice
from .columns import batch_column


def check_tokenizer(tokenizer, vocab_size: int) -> None:
    """Raises ValueError when the tokenizer can emit ids the encoder's embedding table does not have."""
    if len(tokenizer) > vocab_size:
        raise ValueError(
            f"the tokenizer has {len(tokenizer)} tokens but the encoder's vocab_size is {vocab_size}: they do not "
            "match; load the tokenizer that was saved with the encoder."
        )


class SentenceTokenizer:
    """Tokenises sentences to `input_ids` / `attention_mask` tensors of `max_length` tokens (or of the batch's
    longest sentence, with `padding="longest"`: the same embeddings, faster), with checks.

    Empty or whitespace-only strings (and non-strings) are refused with their row; sentences longer than
    `max_length` tokens are truncated, and the first time that happens a warning says so.

    Args:
        tokenizer: a transformers tokenizer.
        max_length: tokens per sentence, special tokens included.
        vocab_size: the encoder's vocabulary size, checked against the tokenizer when given.
        column: how to call the texts in messages.
        padding: `"max_length"` (fixed-length batches, for training) or `"longest"`.
    """

    def __init__(self, tokenizer, max_length: int = 32, vocab_size: int | None = None, column: str = "text",
                 padding: str = "max_length"):
        if vocab_size is not None:
            check_tokenizer(tokenizer, vocab_size)
        if not isinstance(max_length, int) or max_length < 2:
            raise ValueError(f"max_length must be an integer >= 2, got {max_length!r}.")
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.column = column
        check_choice("padding", padding, ("max_length", "longest"))
        self.padding = padding
        self.warned = False

    def __call__(self, texts: list) -> dict:
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{self.column}[{i}] is {text!r}; every row needs a non-empty string.")
        if not self.warned:
            lengths = [len(ids) for ids in self.tokenizer(texts, truncation=False)["input_ids"]]
            if max(lengths) > self.max_length:
                self.warned = True
                warnings.warn(
                    f"the first batch with a sentence longer than max_length={self.max_length} tokens holds "
                    f"{sum(n > self.max_length for n in lengths)} of its {len(texts)} (the longest {max(lengths)}); "
                    "sentences over max_length are truncated (said once, for the first such batch).",
                    stacklevel=2,
                )
        return self.tokenizer(
            texts, max_length=self.max_length, truncation=True, padding=self.padding, return_tensors="pt"
        )


class TextViews:
    """A `Dataset.set_transform` function tokenising `text_column` to fixed-length `input_ids`/`attention_mask`.

    `InSubForPreTraining` encodes the same tokens twice, so dropout makes the two views.

    Args:
        tokenizer: a transformers tokenizer matching the encoder.
        text_column: the column holding strings.
        max_length: tokens per sentence; longer sentences are truncated (see `SentenceTokenizer`).
        vocab_size: the encoder's vocabulary size, to refuse a tokenizer that does not match it.
    """

    def __init__(self, tokenizer, text_column: str = "text", max_length: int = 32, vocab_size: int | None = None):
        self.text_column = text_column
        self.tokenize = SentenceTokenizer(tokenizer, max_length, vocab_size, text_column)

    def __call__(self, batch: dict[str, list]) -> dict[str, list]:
        encoded = self.tokenize(batch_column(batch, self.text_column, "text_column"))
        return {"input_ids": list(encoded["input_ids"]), "attention_mask": list(encoded["attention_mask"])}

"""Text views: tokenised sentences; the two views are two dropout passes of the encoder over the same tokens."""

from __future__ import annotations

from .columns import batch_column


class TextViews:
    """A `Dataset.set_transform` function tokenising `text_column` to fixed-length `input_ids`/`attention_mask`.

    `InSubForPreTraining` encodes the same tokens twice (in one batch of 2B), so dropout makes the two views.

    Args:
        tokenizer: a transformers tokenizer matching the encoder.
        text_column: the column holding strings.
        max_length: tokens per sentence; longer sentences are truncated.
    """

    def __init__(self, tokenizer, text_column: str = "text", max_length: int = 32):
        self.tokenizer = tokenizer
        self.text_column = text_column
        self.max_length = max_length

    def __call__(self, batch: dict[str, list]) -> dict[str, list]:
        texts = batch_column(batch, self.text_column, "text_column")
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{self.text_column}[{i}] is {text!r}; every row needs a non-empty string.")
        encoded = self.tokenizer(
            texts, max_length=self.max_length, truncation=True, padding="max_length", return_tensors="pt"
        )
        return {"input_ids": list(encoded["input_ids"]), "attention_mask": list(encoded["attention_mask"])}

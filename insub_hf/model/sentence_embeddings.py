"""Sentence embeddings and their per-sentence uncertainty from a pretrained InSub text model, in one call."""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import AutoTokenizer

from ..checkpointing import atomic_folder, save_pretrained_atomic
from .configuration_insub import encoder_field
from ..data.text_views import SentenceTokenizer
from .modeling_insub import InSubModel
from ..validation import check_range

# `encode` shows a progress bar from this many batches on (64 sentences each: a few seconds on a CPU)
PROGRESS_FROM = 50


@dataclass
class SentenceEmbeddings:
    """Embeddings of N sentences.

    Attributes:
        embeddings: `(N, d)` encoder representations (what transfer classifiers read).
        uncertainty: `(N,)` the model's calibrated uncertainty in [0, 1] (`InSubModelOutput.uncertainty`); None
            where it is not fitted, NaN for a sentence outside the calibrated token counts.
        head_embeddings: `(N, M, q)`.
        head_spread: `(N,)` the heads' spread averaged over dimensions, read in `config.uncertainty['direction']`
            (0 when M = 1).
        knn_distance: `(N,)` the cosine distance to the k-th nearest row of the model's bank; None without one.
    """

    embeddings: torch.Tensor
    uncertainty: torch.Tensor | None
    head_embeddings: torch.Tensor
    head_spread: torch.Tensor
    knn_distance: torch.Tensor | None = None


class InSubSentenceEncoder:
    """A pretrained `InSubModel` over a BERT-style encoder together with its tokenizer.

    Args:
        model: the InSub model (its encoder reads `input_ids`).
        tokenizer: the matching tokenizer (checked against the encoder's vocabulary).
        max_length: tokens per sentence; longer ones are truncated (with one warning). Default: the base model's
            (the tokenizer's `model_max_length`, capped by the encoder's position embeddings).

    Example:
        >>> encoder = InSubSentenceEncoder.from_pretrained("runs/text/insub_m3/model")
        >>> out = encoder.encode(["A sentence.", "Another one."])  # out.embeddings (2, d), out.uncertainty (2,)
    """

    def __init__(self, model: InSubModel, tokenizer, max_length: int | None = None):
        if model.encoder.main_input_name != "input_ids":
            raise ValueError(
                f"InSubSentenceEncoder needs a text encoder (input_ids); this model reads {model.encoder.main_input_name}."
            )
        positions = encoder_field(model.config.encoder_config, "max_position_embeddings")
        if max_length is None:  # the base model's length
            max_length = model.config.text_max_length(tokenizer)
        check_range("InSubSentenceEncoder: max_length", max_length, low=3, integer=True)  # 2 special tokens + 1 word
        if positions is not None and max_length > positions:
            raise ValueError(
                f"InSubSentenceEncoder: max_length={max_length} is more than the encoder's {positions} position "
                f"embeddings (encoder_config.max_position_embeddings); use max_length <= {positions}."
            )
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.tokenize = SentenceTokenizer(tokenizer, max_length, model.encoder.vocab_size, padding="longest")

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, max_length: int | None = None, **kwargs) -> InSubSentenceEncoder:
        """Loads the model (an `InSubModel` or `InSubForPreTraining` checkpoint) and the tokenizer saved beside it."""
        model = InSubModel.from_pretrained(path, **kwargs)
        try:
            tokenizer = AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError) as error:
            raise FileNotFoundError(
                f"InSubSentenceEncoder.from_pretrained({str(path)!r}): no tokenizer could be loaded from it ({error}). "
                "Save the model with InSubSentenceEncoder.save_pretrained (model and tokenizer in one folder), or "
                "build InSubSentenceEncoder(model, tokenizer)."
            ) from None
        return cls(model, tokenizer, max_length)

    def save_pretrained(self, path: str | os.PathLike) -> None:
        """Writes model (safetensors, atomically) and tokenizer into one folder."""
        save_pretrained_atomic(self.model, path, processor=self.tokenizer)

    def save_sentence_transformer(self, path: str | os.PathLike, uncertainty: dict | None = None) -> Path:
        """Writes the folder a Hub repo of this model holds (`insub_hf.hub.save_for_hub`; needs the `[st]` extra):
        the model with its remote code, the tokenizer, the sentence-transformers files and the generated model card,
        so that `SentenceTransformer(path, trust_remote_code=True)` and `AutoModel.from_pretrained(path,
        trust_remote_code=True)` load it without insub-hf. `encode(sentences)` then gives the L2-normalised
        `embeddings` (as the MiniLM base model's), `encode(sentences, output_value="uncertainty")` the per-sentence
        uncertainty: the model's own, or with `uncertainty` the reading chosen for it (`InSubModel.with_reading`:
        the folder's model reads it; this encoder's model stays as it was). What else `path` holds stays."""
        from ..hub import save_for_hub
        from ..hub.model_card import HubCard

        path, tokenizer = Path(path), copy.deepcopy(self.tokenizer)
        tokenizer.model_max_length = self.tokenize.max_length  # this encoder's length travels with the folder
        with atomic_folder(path) as tmp:
            # the folder's model reads the chosen reading itself: one number on every path that loads it
            save_for_hub(self.model.with_reading(uncertainty), tmp, path.name, HubCard(tokenizer=tokenizer))
        return path

    @torch.no_grad()
    def encode(self, sentences, batch_size: int = 64,
               show_progress_bar: bool | None = None) -> SentenceEmbeddings:
        """Embeds `sentences` (non-empty strings: a list, a string, or any iterable of them) in batches; returns
        `SentenceEmbeddings` on the CPU.
        `show_progress_bar`: a tqdm bar over the batches (default: from `PROGRESS_FROM` batches on)."""
        if isinstance(sentences, str):
            sentences = [sentences]
        if not hasattr(sentences, "__len__"):  # a generator or other iterable of sentences: read once, in order
            sentences = list(sentences)
        if len(sentences) == 0:
            raise ValueError("encode: got no sentences; give a list of non-empty strings.")
        check_range("encode: batch_size", batch_size, low=1, integer=True)
        device = next(self.model.parameters()).device
        parts = []
        starts = range(0, len(sentences), batch_size)
        shown = len(starts) >= PROGRESS_FROM if show_progress_bar is None else show_progress_bar
        for start in tqdm(starts, desc="encode", disable=not shown, leave=False):
            batch = self.tokenize(list(sentences[start : start + batch_size]))
            out = self.model(input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device))
            parts.append((out.representation.cpu(), None if out.uncertainty is None else out.uncertainty.cpu(),
                          out.head_embeddings.cpu(), out.head_spread.cpu(),
                          None if out.knn_distance is None else out.knn_distance.cpu()))
        return SentenceEmbeddings(*(None if p[0] is None else torch.cat(p) for p in zip(*parts)))

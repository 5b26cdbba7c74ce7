"""BERT-style text encoders: a transformers model pooled to one vector per sentence."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from ..validation import check_choice
from .base import POOLINGS, Encoder, EncoderOutput, check_rank


def masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of the token states where `attention_mask` is 1. hidden `(B, T, d)`, mask `(B, T)` -> `(B, d)`."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


@contextmanager
def dropout_rate(module: nn.Module, p: float) -> Iterator[None]:
    """Sets every `nn.Dropout` inside `module` (BERT's hidden and attention dropout read these) to rate `p`,
    restoring the previous rates on exit. SCD's two views are two passes under two rates."""
    if not 0 <= p < 1:
        raise ValueError(f"dropout rate must be in [0, 1), got {p!r}.")
    layers = [m for m in module.modules() if isinstance(m, nn.Dropout)]
    before = [m.p for m in layers]
    for m in layers:
        m.p = p
    try:
        yield
    finally:
        for m, rate in zip(layers, before):
            m.p = rate


class TransformersTextEncoder(Encoder):
    """A BERT-style `AutoModel`; the sentence vector is the CLS token state or the masked mean of the tokens.

    Shapes: input_ids, attention_mask `(B, T)` -> token features `(B, T, hidden_size)` -> `(B, hidden_size)`.
    """

    main_input_name = "input_ids"
    input_names = ("input_ids", "attention_mask", "token_type_ids")
    repeats_input_for_second_view = True  # the same tokens under two dropout masks

    def __init__(self, model: nn.Module, pooling: str = "cls"):
        super().__init__()
        check_choice("InSubConfig.pooling", pooling, POOLINGS)
        self.model = model
        self.pooling = pooling
        self.output_dim = model.config.hidden_size
        self.vocab_size = model.config.vocab_size

    @classmethod
    def from_model(cls, model: nn.Module, config) -> TransformersTextEncoder:
        return cls(model, config.pooling)

    def forward_features(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self._run(input_ids, attention_mask, token_type_ids).last_hidden_state

    def encode(self, output_hidden_states: bool = False, output_attentions: bool = False,
               **inputs: torch.Tensor) -> EncoderOutput:
        """The pooled sentence vector, the token states `(B, T, d)` and, when asked, every layer's states and
        attention weights."""
        out = self._run(**inputs, output_hidden_states=output_hidden_states, output_attentions=output_attentions)
        pooled = self.pool(out.last_hidden_state, attention_mask=inputs.get("attention_mask"))
        return EncoderOutput(pooled, out.last_hidden_state, out.hidden_states if output_hidden_states else None,
                             out.attentions if output_attentions else None)

    def resize_vocabulary(self, vocab_size: int) -> None:
        """After the token embeddings were resized (`resize_token_embeddings`): token ids below `vocab_size` are
        accepted, and the encoder's config says so."""
        self.vocab_size = self.model.config.vocab_size = vocab_size

    def _run(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
             token_type_ids: torch.Tensor | None = None, output_hidden_states: bool = False,
             output_attentions: bool = False):
        """The transformers model's output on checked token ids (all-ones mask when none is given)."""
        check_rank("input_ids", input_ids, 2, "(batch, tokens)")
        positions = getattr(self.model.config, "max_position_embeddings", None)
        if positions is not None and input_ids.shape[1] > positions:  # a shape: no device read
            raise ValueError(
                f"input_ids has {input_ids.shape[1]} tokens per row; this encoder reads at most {positions} "
                "(max_position_embeddings): tokenize with truncation=True (the model's tokenizer truncates at its "
                "model_max_length)."
            )
        vocab = self.vocab_size
        # a data-dependent check, skipped inside torch.compile (see `check_finite`)
        if not torch.compiler.is_compiling() and input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= vocab):
            raise ValueError(
                f"input_ids hold token ids in [{int(input_ids.min())}, {int(input_ids.max())}] but the encoder's "
                f"vocab_size is {vocab}: the tokenizer does not match the encoder."
            )
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        kwargs = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        if output_hidden_states:
            kwargs["output_hidden_states"] = True
        if output_attentions:
            kwargs["output_attentions"] = True
        return self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)

    def pool(self, features: torch.Tensor, attention_mask: torch.Tensor | None = None, **inputs) -> torch.Tensor:
        if self.pooling == "cls":
            return features[:, 0]
        if attention_mask is None:
            attention_mask = torch.ones(features.shape[:2], dtype=torch.long, device=features.device)
        return masked_mean(features, attention_mask)

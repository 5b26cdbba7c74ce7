"""The one interface every encoder follows, so heads, objectives and losses never care which encoder it is."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import torch
from torch import nn
from transformers import AutoConfig, AutoModel

# How a text encoder turns token states into one vector (`InSubConfig.pooling`)
POOLINGS = ("cls", "mean")
# Set while a saved InSub checkpoint loads: its own weights replace a backbone's pretrained ones, so a timm encoder
# configured with `pretrained=True` is built without fetching them (the file or Hub cache may be gone).
LOADING_A_CHECKPOINT: ContextVar[bool] = ContextVar("LOADING_A_CHECKPOINT", default=False)


@dataclass
class EncoderOutput:
    """What `Encoder.encode` gives.

    Attributes:
        pooled: `(B, d)` the representation (what `forward` returns).
        last_hidden_state: the states it was pooled from, where the encoder has them: `(B, T, d)` tokens or DNA
            windows (BERT, ViT, the genomic encoder), `(B, C, h, w)` a convolutional feature map (transformers CNNs,
            the CIFAR ResNet); None for timm models.
        hidden_states: every layer's states, when asked for (transformers encoders only).
        attentions: every layer's attention weights `(B, heads, T, T)`, when asked for (encoders with attention:
            ViT, BERT-style).
    """

    pooled: torch.Tensor
    last_hidden_state: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


class Encoder(nn.Module):
    """Maps one modality's inputs to a representation `(B, d)`.

    `forward(**inputs)` is `pool(forward_features(**inputs), **inputs)` for encoders with token-level features (text,
    DNA); image encoders override `forward` and may have no token level. Nothing outside `encoders/` reaches into the
    wrapped model (`self.model`): what objectives and tools need from it is here.

    Attributes:
        output_dim: d.
        main_input_name: the input key the encoder reads (`pixel_values`, `input_ids`, `dna_one_hot`).
        input_names: every input key it accepts (a view of a batch holds a subset of them).
        repeats_input_for_second_view: two passes over the same input already differ (dropout on token ids), so a
            pretraining batch may omit the second view.
        vocab_size: the token vocabulary of a text encoder (None for other modalities).
    """

    output_dim: int
    main_input_name: str
    input_names: tuple[str, ...]
    repeats_input_for_second_view: bool = False
    vocab_size: int | None = None

    @classmethod
    def from_model(cls, model: nn.Module, config) -> Encoder:
        """The adapter around a built transformers `model`, with what it needs of the `InSubConfig` `config`."""
        return cls(model)

    def forward_features(self, **inputs: torch.Tensor) -> torch.Tensor:
        """Token-level features `(B, T, d)` (per token, per DNA window)."""
        raise ValueError(
            f"{type(self).__name__} gives no token-level features; this needs an encoder with a sequence of them "
            "(a BERT-style text model or the genomic encoder)."
        )

    def pool(self, features: torch.Tensor, **inputs: torch.Tensor) -> torch.Tensor:
        """Token-level features `(B, T, d)` -> representation `(B, d)`; `inputs` give masks where needed."""
        raise ValueError(f"{type(self).__name__} gives no token-level features to pool.")

    def forward(self, **inputs: torch.Tensor) -> torch.Tensor:
        return self.pool(self.forward_features(**inputs), **inputs)

    def encode(self, output_hidden_states: bool = False, output_attentions: bool = False,
               **inputs: torch.Tensor) -> EncoderOutput:
        """The representation with the states behind it (`EncoderOutput`). Default: an encoder with token-level
        features gives them as `last_hidden_state`, any other its representation alone; neither has per-layer
        states or attention, so both are refused by name (the transformers adapters override this and pass them on)."""
        refuse_outputs(self, output_hidden_states, output_attentions, has_layers=False, has_attention=False)
        if type(self).forward is not Encoder.forward:  # pooled by its own forward: no token level
            return EncoderOutput(self(**inputs))
        features = self.forward_features(**inputs)
        return EncoderOutput(self.pool(features, **inputs), features)

    def input_embeddings(self) -> nn.Module | None:
        """The module that embeds the encoder's inputs (a text model's token embeddings, a ViT's patch embeddings);
        None where the encoder has none."""
        model = getattr(self, "model", None)
        try:
            return model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
        except NotImplementedError:  # a transformers model without input embeddings (a CNN)
            return None

    def resize_vocabulary(self, vocab_size: int) -> None:
        """After `resize_token_embeddings`: a text encoder follows the new vocabulary; others have none."""
        raise ValueError(f"resize_token_embeddings: this model's encoder ({type(self).__name__}) reads no tokens.")

    def set_input_embeddings(self, embeddings: nn.Module) -> None:
        """Replaces the input embeddings (after `resize_token_embeddings`); refused for an encoder without them."""
        if self.input_embeddings() is None:
            raise ValueError(f"set_input_embeddings: this model's encoder ({type(self).__name__}) has no input embeddings.")
        self.model.set_input_embeddings(embeddings)

    def transformers_backbone(self) -> nn.Module:
        """The wrapped transformers model, for loading pretrained backbone weights; raises for other encoders."""
        model = getattr(self, "model", None)
        if not isinstance(model, nn.Module) or not hasattr(model, "config"):
            raise ValueError(
                f"load_encoder_weights loads transformers backbones; this model's encoder is a {type(self).__name__} "
                "(timm models load weights with timm; BatchEnsemble layers have no pretrained counterpart)."
            )
        return model

    def load_backbone_state_dict(self, state: dict[str, torch.Tensor], source: str) -> None:
        """Copies a pretrained transformers backbone's weights (`state`, read from `source`) into the wrapped model.

        The backbone's extra weights that the encoder does not build (a pooler) are ignored; a backbone that lacks any
        of the encoder's weights, or has other shapes, is refused with the names.
        """
        try:
            result = self.transformers_backbone().load_state_dict(state, strict=False)
        except RuntimeError as error:
            raise ValueError(
                f"the backbone at {source} does not fit InSubConfig.encoder_config (build the config with "
                f"encoder_config_from_pretrained): {error}"
            ) from None
        if result.missing_keys:
            raise ValueError(
                f"the backbone at {source} lacks {len(result.missing_keys)} weights of the encoder, e.g. "
                f"{result.missing_keys[:3]}; build InSubConfig.encoder_config with encoder_config_from_pretrained."
            )


def refuse_outputs(encoder: nn.Module, output_hidden_states: bool, output_attentions: bool, has_layers: bool,
                   has_attention: bool) -> None:
    """Refuses `output_hidden_states` / `output_attentions`, by name, where the encoder has no such outputs."""
    if output_hidden_states and not has_layers:
        raise ValueError(
            f"output_hidden_states: this model's encoder ({type(encoder).__name__}) gives no per-layer hidden states; "
            "transformers encoders (ViT, BERT, ResNet, the CIFAR ResNet) do."
        )
    if output_attentions and not has_attention:
        raise ValueError(
            f"output_attentions: this model's encoder ({type(encoder).__name__}) has no attention weights to give; "
            "attention encoders (ViT, BERT-style) do."
        )


# Set while InSubTrainer runs a training forward: it checks the loss and inputs itself without a host sync
# (`InSubTrainer.check_batch` keeps each step's flags on the device until a logging step reads them).
INPUT_CHECKS_DEFERRED: ContextVar[bool] = ContextVar("INPUT_CHECKS_DEFERRED", default=False)


@contextmanager
def deferred_input_checks() -> Iterator[None]:
    """Inside the block `check_finite` reads nothing (`INPUT_CHECKS_DEFERRED`)."""
    token = INPUT_CHECKS_DEFERRED.set(True)
    try:
        yield
    finally:
        INPUT_CHECKS_DEFERRED.reset(token)


def check_finite(name: str, tensor: torch.Tensor) -> None:
    """Raises ValueError when a float input holds NaN or inf (they would silently poison every loss).

    Skipped inside `torch.compile` and `deferred_input_checks`: a check that reads the data splits the graph and waits
    for the device at every call (the training loop checks the loss and inputs instead, `InSubTrainer.check_batch`)."""
    if torch.compiler.is_compiling() or INPUT_CHECKS_DEFERRED.get():
        return
    if tensor.is_floating_point() and not torch.isfinite(tensor).all():
        raise ValueError(f"{name} contains NaN or inf values; inputs must be finite numbers.")


def check_rank(name: str, tensor: torch.Tensor, rank: int, layout: str) -> None:
    if tensor.dim() != rank:
        raise ValueError(f"{name} must have shape {layout}, got {tuple(tensor.shape)}.")


def register_own_encoders(pairs) -> None:
    """Registers the package's own encoder `(config class, model class)` pairs with `AutoConfig` and `AutoModel`, so
    that an `InSubConfig` naming one resolves wherever it loads (the installed package or a repo's remote code)."""
    for config_class, model_class in pairs:
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        AutoModel.register(config_class, model_class, exist_ok=True)


def set_dropout(module: nn.Module, enabled: bool) -> None:
    """Puts every submodule except normalisation layers in train mode (dropout on) or all in eval mode.

    BatchNorm stays in eval mode so that MC-dropout passes sample dropout masks only, not batch statistics.
    """
    module.eval()
    if enabled:
        for sub in module.modules():
            if not isinstance(sub, nn.modules.batchnorm._BatchNorm):
                sub.training = True  # per module: .train() would recurse into the BatchNorm children

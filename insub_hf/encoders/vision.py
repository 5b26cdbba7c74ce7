"""Image encoders: transformers vision models (ViT, ResNet, ...) and timm models by name."""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from .base import (
    LOADING_A_CHECKPOINT, Encoder, EncoderOutput, check_finite, check_rank, refuse_outputs,
)


def _check_pixels(pixel_values: torch.Tensor, num_channels: int) -> None:
    check_rank("pixel_values", pixel_values, 4, "(batch, channels, height, width)")
    if not pixel_values.is_floating_point():
        raise ValueError(
            f"pixel_values has dtype {pixel_values.dtype}; the encoder reads float images, normalised as in training "
            "(e.g. an image processor's output, or uint8 / 255 then Normalize(mean, std))."
        )
    if pixel_values.shape[1] != num_channels:
        raise ValueError(
            f"pixel_values has {pixel_values.shape[1]} channels but the encoder expects num_channels={num_channels}; "
            "convert the images (e.g. PIL .convert('RGB') or 'L') or set the encoder's num_channels."
        )
    check_finite("pixel_values", pixel_values)


class TransformersVisionEncoder(Encoder):
    """A transformers vision backbone. ViT-like models give their CLS token, CNNs their pooled features.

    Shapes: pixel_values `(B, C, H, W)` -> `(B, d)`.
    """

    main_input_name = "pixel_values"
    input_names = ("pixel_values",)

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        config = model.config
        self.num_channels = getattr(config, "num_channels", 3)
        sizes = getattr(config, "hidden_sizes", None)
        self.output_dim = sizes[-1] if sizes else config.hidden_size
        self.image_size = getattr(config, "image_size", None)
        self.interpolates = "interpolate_pos_encoding" in inspect.signature(model.forward).parameters

    def forward(self, pixel_values: torch.Tensor, interpolate_pos_encoding: bool = False) -> torch.Tensor:
        """`interpolate_pos_encoding`: accept images of another size than the config's `image_size` (DINO's local
        crops): a ViT resizes its position embeddings, a CNN pools whatever size it gets. Without it, another size is
        refused."""
        return self._pooled(self._run(pixel_values, interpolate_pos_encoding))

    def encode(self, output_hidden_states: bool = False, output_attentions: bool = False,
               **inputs: torch.Tensor) -> EncoderOutput:
        """The representation, the model's last hidden state (`(B, T, d)` tokens of a ViT, `(B, C, h, w)` a CNN's
        feature map) and, when asked, every layer's states and (a ViT's) attention weights."""
        refuse_outputs(self, output_hidden_states, output_attentions, has_layers=True,
                       has_attention=hasattr(self.model.config, "num_attention_heads"))
        out = self._run(**inputs, output_hidden_states=output_hidden_states, output_attentions=output_attentions)
        return EncoderOutput(self._pooled(out), out.last_hidden_state,
                             out.hidden_states if output_hidden_states else None,
                             out.attentions if output_attentions else None)

    @staticmethod
    def _pooled(out) -> torch.Tensor:
        hidden = out.last_hidden_state
        if hidden.dim() == 3:  # (B, tokens, d): CLS token, after the final LayerNorm
            return hidden[:, 0]
        return out.pooler_output.flatten(1)  # (B, d, 1, 1) -> (B, d)

    def _run(self, pixel_values: torch.Tensor, interpolate_pos_encoding: bool = False,
             output_hidden_states: bool = False, output_attentions: bool = False):
        """The transformers model's output on checked images (see `forward`)."""
        _check_pixels(pixel_values, self.num_channels)
        kwargs = {}
        size = self.image_size
        if size is not None and tuple(pixel_values.shape[-2:]) != (size, size):
            if not interpolate_pos_encoding:
                raise ValueError(
                    f"pixel_values are {tuple(pixel_values.shape[-2:])} images but the encoder's config has "
                    f"image_size={size}: resize them to {size}x{size} (the image processor or eval transform does), "
                    "or pass interpolate_pos_encoding=True where other sizes are meant (multi-crop)."
                )
            if self.interpolates:
                kwargs["interpolate_pos_encoding"] = True
        if output_hidden_states:
            kwargs["output_hidden_states"] = True
        if output_attentions:
            kwargs["output_attentions"] = True
        return self.model(pixel_values=pixel_values, **kwargs)


class TimmEncoder(Encoder):
    """A timm model built by name with its classifier removed (`num_classes=0`).

    Shapes: pixel_values `(B, C, H, W)` -> `(B, model.num_features)`.
    """

    main_input_name = "pixel_values"
    input_names = ("pixel_values",)

    def __init__(self, model_name: str, timm_kwargs: dict[str, Any] | None = None):
        super().__init__()
        try:
            import timm
        except ImportError as error:
            raise ImportError(f"InSubConfig.timm_model_name={model_name!r} needs timm: pip install timm.") from error

        kwargs = dict(timm_kwargs or {})
        if not timm.is_model(model_name):
            raise ValueError(
                f"InSubConfig.timm_model_name={model_name!r} is not a timm model; see timm.list_models() for the "
                "allowed names."
            )
        # `pretrained=True` starts from timm's weights (the Hub cache, or a local file through
        # `pretrained_cfg_overlay={"file": path}`); a saved InSub checkpoint loads its own instead
        pretrained = kwargs.pop("pretrained", False) and not LOADING_A_CHECKPOINT.get()
        self.model = timm.create_model(model_name, pretrained=pretrained, num_classes=0, **kwargs)
        self.num_channels = kwargs.get("in_chans", 3)
        self.output_dim = self.model.num_features

    def forward(self, pixel_values: torch.Tensor, interpolate_pos_encoding: bool = False) -> torch.Tensor:
        """timm decides about other image sizes itself (a ViT built with `dynamic_img_size` accepts them, as
        `InSubConfig` sets for DINO); `interpolate_pos_encoding` is accepted for the common interface."""
        _check_pixels(pixel_values, self.num_channels)
        return self.model(pixel_values)

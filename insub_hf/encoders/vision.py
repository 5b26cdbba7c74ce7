"""Image encoders: transformers vision models (ViT, ResNet, ...) and timm models by name."""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from .base import Encoder, check_finite, check_rank


def _check_pixels(pixel_values: torch.Tensor, num_channels: int) -> None:
    check_rank("pixel_values", pixel_values, 4, "(batch, channels, height, width)")
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

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        _check_pixels(pixel_values, self.num_channels)
        kwargs = {}
        if self.interpolates and self.image_size is not None and tuple(pixel_values.shape[-2:]) != (
            self.image_size, self.image_size,
        ):
            kwargs["interpolate_pos_encoding"] = True  # e.g. DINO's local crops: position embeddings resized
        out = self.model(pixel_values=pixel_values, **kwargs)
        hidden = out.last_hidden_state
        if hidden.dim() == 3:  # (B, tokens, d): CLS token, after the final LayerNorm
            return hidden[:, 0]
        return out.pooler_output.flatten(1)  # (B, d, 1, 1) -> (B, d)


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
        self.model = timm.create_model(model_name, pretrained=False, num_classes=0, **kwargs)
        self.num_channels = kwargs.get("in_chans", 3)
        self.output_dim = self.model.num_features

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        _check_pixels(pixel_values, self.num_channels)
        return self.model(pixel_values)

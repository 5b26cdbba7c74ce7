"""Image encoders by short name (`--encoder NAME --width W` in every job and example) and the encoder an InSub
config builds when none is given: encoder configs as dicts for `InSubConfig.encoder_config`."""

from __future__ import annotations

from typing import Any

from ..validation import check_choice, check_range
from .configuration_resnet_cifar import RESNET_LAYOUTS, CifarResNetConfig


# ViT-tiny at CIFAR scale (32x32 images, 4x4 patches -> 64 tokens), used when no encoder is given.
DEFAULT_ENCODER = {
    "model_type": "vit",
    "image_size": 32,
    "patch_size": 4,
    "hidden_size": 192,
    "num_hidden_layers": 12,
    "num_attention_heads": 3,
    "intermediate_size": 768,
}


# ViT-S/16 at ImageNet scale (DINO's encoder; 384-d CLS token).
VIT_SMALL_16 = {
    "model_type": "vit",
    "image_size": 224,
    "patch_size": 16,
    "hidden_size": 384,
    "num_hidden_layers": 12,
    "num_attention_heads": 6,
    "intermediate_size": 1536,
}


def small_vit_encoder(
    image_size: int, num_channels: int, hidden_size: int, num_layers: int, patch_size: int = 4
) -> dict[str, Any]:
    """A ViT encoder config (as a dict) for small images: 4 attention heads, MLP width 2 x hidden_size."""
    return dict(
        model_type="vit", image_size=image_size, patch_size=patch_size, num_channels=num_channels,
        hidden_size=hidden_size, num_hidden_layers=num_layers, num_attention_heads=4, intermediate_size=2 * hidden_size,
    )


# Short names of the image encoders every job and example offers (`--encoder NAME --width W`).
NAMED_ENCODERS = (
    *(f"resnet{depth}_cifar" for depth in RESNET_LAYOUTS), "vit_tiny_32", "vit_small_16", "vit_mini",
)


def named_encoder(name: str, image_size: int = 32, num_channels: int = 3, width: float = 1.0) -> dict[str, Any]:
    """The encoder config (a dict for `InSubConfig.encoder_config`) of a short name.

    Args:
        name: `resnet10_cifar`, `resnet18_cifar`, `resnet34_cifar`, `resnet50_cifar` (CIFAR-stem ResNets,
            `CifarResNetConfig`),
            `vit_tiny_32` (ViT-tiny, 4x4 patches), `vit_small_16` (ViT-S/16) or `vit_mini` (width 128, depth 4,
            4x4 patches: a CPU-sized ViT).
        image_size, num_channels: the images it reads.
        width: the ResNets' `width_multiplier` (ViTs take 1 only).
    """
    check_choice("encoder", name, NAMED_ENCODERS)
    check_range("width", width, low=0.0, low_inclusive=False)
    if name.endswith("_cifar"):
        depth = int(name.removeprefix("resnet").removesuffix("_cifar"))
        return dict(
            model_type=CifarResNetConfig.model_type, depth=depth, width_multiplier=width, num_channels=num_channels,
            image_size=image_size,
        )
    if width != 1.0:
        raise ValueError(f"width={width} applies to the resnet*_cifar encoders; encoder={name!r} takes width 1.")
    if name == "vit_mini":
        return small_vit_encoder(image_size, num_channels, hidden_size=128, num_layers=4)
    base = DEFAULT_ENCODER if name == "vit_tiny_32" else VIT_SMALL_16
    return dict(base, image_size=image_size, num_channels=num_channels)

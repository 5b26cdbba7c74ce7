"""The one rule for float images on every path (the processors, the batched views, the trainer, the harness): floats
in [0, 1]."""

from __future__ import annotations

import math

import torch


def check_unit_images(images: torch.Tensor, name: str) -> None:
    """Raises unless `images` are floats in [0, 1], the one rule for float images on every path (this processor, the
    batched views, the harness): uint8 or 0..255 pixels and images already normalised to [-1, 1] or by a mean and
    std are named as such. Reads the values: call it on data up front, not inside a training step."""
    if not images.is_floating_point():
        raise ValueError(f"{name} must be float images in [0, 1], got dtype {images.dtype} (uint8 pixels: divide by 255).")
    if images.numel() == 0:
        return
    low, high = float(images.min()), float(images.max())
    if not (math.isfinite(low) and math.isfinite(high)) or low < 0 or high > 1:
        hint = ("non-finite values" if not (math.isfinite(low) and math.isfinite(high)) else
                "0..255 pixels: divide by 255" if high > 1.5 else "normalised images: pass them before normalisation")
        raise ValueError(f"{name} must be float images in [0, 1], got values in [{low:.4g}, {high:.4g}] ({hint}).")

"""What images and their normalisation must be on every path (the processors, the batched views, the trainer, the
harness): float pixels in [0, 1]; 1, 3 or 4 channels (grey, RGB, RGBA or four bands) with a finite mean and a positive
std per channel."""

from __future__ import annotations

import math

import torch

NUM_CHANNELS = (1, 3, 4)


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


def check_processor_fields(num_channels: int, mean, std, owner: str = "InSubImageProcessor") -> None:
    """Refuses a channel count other than 1, 3 or 4, a mean or std (a number or one per channel) of another length
    than the channels, and values no [0, 1] image has: a mean outside [0, 1] or a std outside (0, 1] (0..255 units
    are named as such), naming the field of `owner`."""
    if num_channels not in NUM_CHANNELS:
        raise ValueError(f"{owner}.num_channels must be one of {NUM_CHANNELS}, got {num_channels!r}.")
    fields = {name: [v] if isinstance(v, (int, float)) else list(v) for name, v in (("image_mean", mean),
                                                                                     ("image_std", std))}
    for name, values in fields.items():
        if len(values) != num_channels:
            raise ValueError(
                f"{owner}.{name} must give one value per channel (num_channels={num_channels}), got {values}."
            )
        if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
            raise ValueError(f"{owner}.{name} must be finite numbers, got {values}.")
        low_ok = all(v >= 0 for v in values) if name == "image_mean" else all(v > 0 for v in values)
        if not low_ok or any(v > 1 for v in values):
            unit = " (0..255 units? the images are in [0, 1]: divide by 255)" if any(v > 1 for v in values) else ""
            allowed = "in [0, 1]" if name == "image_mean" else "in (0, 1]"
            raise ValueError(f"{owner}.{name} must be {allowed} for pixels in [0, 1], got {values}{unit}.")


def normalize_images(images: torch.Tensor, mean, std) -> torch.Tensor:
    """`(images - mean) / std` per channel: the one image normalisation of the package (this processor, the
    per-sample and per-batch views and the evaluation harness apply it).

    Args:
        images: `(..., C, H, W)` floats in [0, 1] (one image or a batch).
        mean, std: one value per channel.

    Returns:
        A new tensor of the same shape and dtype.
    """
    mean_t = torch.as_tensor(mean, dtype=images.dtype, device=images.device).view(-1, 1, 1)
    std_t = torch.as_tensor(std, dtype=images.dtype, device=images.device).view(-1, 1, 1)
    return (images - mean_t) / std_t

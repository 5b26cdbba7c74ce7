"""Per-channel image normalisation: the one implementation that the image processor, the views (per sample and per
batch) and the evaluation harness apply."""

from __future__ import annotations

from typing import Any

import torch
from torchvision import tv_tensors
from torchvision.transforms import v2


def normalize_images(images: torch.Tensor, mean, std) -> torch.Tensor:
    """`(images - mean) / std` per channel.

    Args:
        images: `(..., C, H, W)` floats in [0, 1] (one image or a batch).
        mean, std: one value per channel.

    Returns:
        A new tensor of the same shape and dtype.
    """
    mean_t = torch.as_tensor(mean, dtype=images.dtype, device=images.device).view(-1, 1, 1)
    std_t = torch.as_tensor(std, dtype=images.dtype, device=images.device).view(-1, 1, 1)
    return (images - mean_t) / std_t


class NormalizeImages(v2.Transform):
    """`normalize_images` as a torchvision v2 step (the per-sample views and the test transform); an image stays a
    `tv_tensors.Image`."""

    def __init__(self, mean, std):
        super().__init__()
        self.mean, self.std = tuple(mean), tuple(std)

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        out = normalize_images(inpt.as_subclass(torch.Tensor), self.mean, self.std)
        return tv_tensors.wrap(out, like=inpt) if isinstance(inpt, tv_tensors.TVTensor) else out

"""Image views with torchvision.transforms.v2: SimCLR's CIFAR augmentations and the plain test transform."""

from __future__ import annotations

from typing import Any

import torch
from torchvision.transforms import v2

from .columns import batch_column

# Per-channel normalisation of the data sets the package knows (METHOD.md; Fashion-MNIST from its training set).
IMAGE_STATS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)),
    "cifar100": ((0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761)),
    "svhn": ((0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970)),
    "fashion_mnist": ((0.2860,), (0.3530,)),
}


def _to_float_image(num_channels: int, column: str) -> list[v2.Transform]:
    return [v2.ToImage(), _CheckChannels(num_channels, column), v2.ToDtype(torch.float32, scale=True)]


class _CheckChannels(v2.Transform):
    """Fails with a clear message when an image has another channel count than the encoder expects."""

    def __init__(self, num_channels: int, column: str):
        super().__init__()
        self.num_channels = num_channels
        self.column = column

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        if inpt.shape[-3] != self.num_channels:
            raise ValueError(
                f"column {self.column!r} holds {inpt.shape[-3]}-channel images but num_channels={self.num_channels}; "
                "convert the images (PIL .convert('RGB') / .convert('L')) or set num_channels to match."
            )
        return inpt


def simclr_augmentation(
    image_size: int, mean: tuple[float, ...], std: tuple[float, ...], num_channels: int = 3, column: str = "image"
) -> v2.Compose:
    """SimCLR's CIFAR augmentations: RandomResizedCrop(scale 0.2-1), flip, colour jitter (p 0.8), grey (p 0.2).

    For 1-channel images, the colour jitter keeps brightness and contrast and the grayscale step is dropped
    (saturation and hue do not exist there). Output: float `(C, image_size, image_size)`, normalised.
    """
    if num_channels == 3:
        colour = [v2.RandomApply([v2.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8), v2.RandomGrayscale(p=0.2)]
    else:
        colour = [v2.RandomApply([v2.ColorJitter(0.4, 0.4)], p=0.8)]
    return v2.Compose(
        [
            *_to_float_image(num_channels, column),
            v2.RandomResizedCrop(image_size, scale=(0.2, 1.0), ratio=(3 / 4, 4 / 3), antialias=True),
            v2.RandomHorizontalFlip(p=0.5),
            *colour,
            v2.Normalize(mean, std),
        ]
    )


def unit_image_transform(image_size: int, num_channels: int = 3, column: str = "image") -> v2.Compose:
    """Resize and centre crop to float `(C, image_size, image_size)` in [0, 1], not normalised (what OOD noise and
    corruptions are applied to before normalisation)."""
    return v2.Compose(
        [*_to_float_image(num_channels, column), v2.Resize(image_size, antialias=True), v2.CenterCrop(image_size)]
    )


def eval_image_transform(
    image_size: int, mean: tuple[float, ...], std: tuple[float, ...], num_channels: int = 3, column: str = "image"
) -> v2.Compose:
    """Test-time transform: resize, centre crop, normalise. Output: float `(C, image_size, image_size)`."""
    return v2.Compose([unit_image_transform(image_size, num_channels, column), v2.Normalize(mean, std)])


class ImageViews:
    """A `Dataset.set_transform` function giving two independently augmented views of every image.

    Each image is augmented on its own (v2 would draw one set of random parameters for a whole batch tensor).
    Output columns: `pixel_values`, `pixel_values_2`, each a list of `(C, H, W)` tensors.
    """

    def __init__(self, augment: v2.Transform, image_column: str = "image"):
        self.augment = augment
        self.image_column = image_column

    def __call__(self, batch: dict[str, list]) -> dict[str, list[torch.Tensor]]:
        images = batch_column(batch, self.image_column, "image_column")
        return {
            "pixel_values": [self.augment(im) for im in images],
            "pixel_values_2": [self.augment(im) for im in images],
        }


class ImageWithLabel:
    """A `Dataset.set_transform` function for evaluation: `pixel_values` (test transform) and `labels`."""

    def __init__(self, transform: v2.Transform, image_column: str = "image", label_column: str = "label"):
        self.transform = transform
        self.image_column = image_column
        self.label_column = label_column

    def __call__(self, batch: dict[str, list]) -> dict[str, list]:
        images = batch_column(batch, self.image_column, "image_column")
        out = {"pixel_values": [self.transform(im) for im in images]}
        if self.label_column in batch:
            out["labels"] = batch[self.label_column]
        return out

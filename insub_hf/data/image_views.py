"""Image views with torchvision.transforms.v2: SimCLR's CIFAR augmentations and the plain test transform."""

from __future__ import annotations

import math
from typing import Any

import torch
from torchvision import tv_tensors
from torchvision.transforms import v2

from ..processing.image_range import normalize_images
from .columns import batch_column

# Per-channel normalisation of the data sets the package knows (METHOD.md; Fashion-MNIST from its training set).
IMAGE_STATS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)),
    "cifar100": ((0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761)),
    "svhn": ((0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970)),
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}


class NormalizeImages(v2.Transform):
    """`normalize_images` as a torchvision v2 step (the per-sample views and the test transform); an image stays a
    `tv_tensors.Image`."""

    def __init__(self, mean, std):
        super().__init__()
        self.mean, self.std = tuple(mean), tuple(std)

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        out = normalize_images(inpt.as_subclass(torch.Tensor), self.mean, self.std)
        return tv_tensors.wrap(out, like=inpt) if isinstance(inpt, tv_tensors.TVTensor) else out


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
    return v2.Compose(
        [
            *_to_float_image(num_channels, column),
            v2.RandomResizedCrop(image_size, scale=(0.2, 1.0), ratio=(3 / 4, 4 / 3), antialias=True),
            v2.RandomHorizontalFlip(p=0.5),
            *_colour(num_channels, saturation=0.4),
            NormalizeImages(mean, std),
        ]
    )


def _colour(num_channels: int, saturation: float) -> list[v2.Transform]:
    """Colour jitter (p 0.8) and random grey (p 0.2); brightness and contrast only for 1-channel images."""
    if num_channels == 3:
        return [v2.RandomApply([v2.ColorJitter(0.4, 0.4, saturation, 0.1)], p=0.8), v2.RandomGrayscale(p=0.2)]
    return [v2.RandomApply([v2.ColorJitter(0.4, 0.4)], p=0.8)]


def check_scale(field: str, scale: tuple[float, float]) -> None:
    """Refuses a crop's area range other than (low, high) with 0 < low <= high <= 1, naming `field`."""
    low, high = scale
    if not 0 < low <= high <= 1:
        raise ValueError(f"{field} must be (low, high) with 0 < low <= high <= 1, got {(low, high)}.")


def default_local_crop_size(image_size: int) -> int:
    """DINO's local crop side for a global crop of `image_size`: 96/224 of it, rounded up to a multiple of 4
    (224 -> 96, 32 -> 16, 28 -> 12)."""
    return max(4, 4 * math.ceil(image_size * 96 / 224 / 4))


def blur_kernel_size(image_size: int) -> int:
    """DINO's blur kernel for a crop of `image_size`: about a tenth of it, odd, at least 3."""
    return max(3, int(0.1 * image_size) // 2 * 2 + 1)


def _blur(image_size: int, p: float) -> v2.Transform:
    """DINO's Gaussian blur (sigma 0.1-2 at 224 px), kernel and sigma scaled to the crop size."""
    kernel = blur_kernel_size(image_size)
    scale = image_size / 224
    return v2.RandomApply([v2.GaussianBlur(kernel, sigma=(max(0.1 * scale, 1e-3), max(2.0 * scale, 0.1)))], p=p)


def dino_augmentation(
    image_size: int,
    mean: tuple[float, ...],
    std: tuple[float, ...],
    num_channels: int = 3,
    local_size: int | None = None,
    global_scale: tuple[float, float] = (0.4, 1.0),
    local_scale: tuple[float, float] = (0.05, 0.4),
    column: str = "image",
) -> tuple[v2.Compose, v2.Compose, v2.Compose]:
    """DINO's multi-crop augmentations: (first global, second global, local) transforms.

    Global crops: RandomResizedCrop(image_size, global_scale), flip, colour jitter (0.4, 0.4, 0.2, 0.1) p 0.8,
    grey p 0.2; blur p 1.0 on the first, p 0.1 plus solarisation p 0.2 on the second. Local crops: the same at
    `local_size` (default `default_local_crop_size`) and `local_scale`, blur p 0.5. Outputs are normalised floats
    `(C, size, size)`.
    """
    local_size = default_local_crop_size(image_size) if local_size is None else local_size
    if local_size > image_size:
        raise ValueError(
            f"local crop size {local_size} is larger than the global crop size {image_size}; local crops must not "
            "exceed the global crop."
        )
    check_scale("global_scale", global_scale)
    check_scale("local_scale", local_scale)

    def crop(size: int, scale: tuple[float, float], blur: float, extra: list[v2.Transform] = ()) -> v2.Compose:
        return v2.Compose(
            [
                *_to_float_image(num_channels, column),
                v2.RandomResizedCrop(size, scale=scale, interpolation=v2.InterpolationMode.BICUBIC, antialias=True),
                v2.RandomHorizontalFlip(p=0.5),
                *_colour(num_channels, saturation=0.2),
                _blur(size, blur),
                *extra,
                NormalizeImages(mean, std),
            ]
        )

    solarize = [v2.RandomSolarize(threshold=0.5, p=0.2)]
    return (
        crop(image_size, global_scale, 1.0),
        crop(image_size, global_scale, 0.1, solarize),
        crop(local_size, local_scale, 0.5),
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
    return v2.Compose([unit_image_transform(image_size, num_channels, column), NormalizeImages(mean, std)])


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


class MultiCropViews:
    """A `Dataset.set_transform` function giving DINO's crops of every image, each augmented on its own.

    Output columns: `pixel_values` and `pixel_values_2` (the two global crops, `(C, H, W)` each) and, when
    `num_local_crops > 0`, `local_pixel_values` `(N, C, h, w)` per image.

    Args:
        transforms: (first global, second global, local) as returned by `dino_augmentation`.
        num_local_crops: N.
        image_column: the column holding images.
    """

    def __init__(self, transforms: tuple[v2.Transform, v2.Transform, v2.Transform], num_local_crops: int = 6,
                 image_column: str = "image"):
        if not isinstance(num_local_crops, int) or num_local_crops < 0:
            raise ValueError(f"num_local_crops must be an integer >= 0, got {num_local_crops!r}.")
        self.global_1, self.global_2, self.local = transforms
        self.num_local_crops = num_local_crops
        self.image_column = image_column

    def __call__(self, batch: dict[str, list]) -> dict[str, list[torch.Tensor]]:
        images = batch_column(batch, self.image_column, "image_column")
        out = {
            "pixel_values": [self.global_1(im) for im in images],
            "pixel_values_2": [self.global_2(im) for im in images],
        }
        if self.num_local_crops:
            out["local_pixel_values"] = [
                torch.stack([self.local(im) for _ in range(self.num_local_crops)]) for im in images
            ]
        return out

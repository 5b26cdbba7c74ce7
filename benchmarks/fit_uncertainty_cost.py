"""What fitting the calibrated `uncertainty` adds to the demo, measured side by side in one run: the demo's wall time
(pretraining both models, fitting each, scoring), then `InSubModel.fit_uncertainty` alone on 5,000 inputs (a bank
and held-out calibration inputs, as a job passes them) for the demo's InSub model, and their ratio.
Target: fitting 5,000 inputs adds at most 10 % to the demo's wall time.

    python benchmarks/fit_uncertainty_cost.py [--output_dir runs/bench_fit] [--rows 5000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import time

import torch

from insub_hf.data import IMAGE_DATASET_PRESETS, load_fashion_mnist
from insub_hf.jobs.arguments import training_arguments
from insub_hf.jobs.demo import TRAINING_DEFAULTS, DemoArguments, run_demo
from insub_hf.model.modeling_insub import InSubModel
from insub_hf.processing.image_range import normalize_images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", default="runs/bench_fit")
    parser.add_argument("--rows", type=int, default=5000, help="inputs the reading is fitted on (bank + calibration)")
    parser.add_argument("--rounds", type=int, default=3, help="fits timed; the median is reported")
    options = parser.parse_args()

    start = time.perf_counter()
    run_demo(DemoArguments(overwrite_output_dir=True),
             training_arguments(TRAINING_DEFAULTS, output_dir=options.output_dir))
    demo = time.perf_counter() - start

    preset = IMAGE_DATASET_PRESETS["fashion_mnist"]
    data = load_fashion_mnist("bundled")
    images, _ = preset.to_tensors(data["train"])
    images = torch.cat([images] * -(-options.rows // len(images)))[: options.rows]  # the bundled 5,000, as needed
    inputs = {"pixel_values": normalize_images(images, *preset.normalization())}
    held = options.rows // 5
    model = InSubModel.from_pretrained(f"{options.output_dir}/insub_m5/model").eval()
    times = []
    for _ in range(options.rounds):
        start = time.perf_counter()
        model.fit_uncertainty({"pixel_values": inputs["pixel_values"][held:]},
                              {"pixel_values": inputs["pixel_values"][:held]})
        times.append(time.perf_counter() - start)
    fit = sorted(times)[len(times) // 2]
    print(f"demo wall time (both models, each fitted once on its 4,000 + 1,000 images): {demo:.1f} s")
    print(f"fit_uncertainty on {options.rows} inputs ({options.rows - held} bank, {held} calibration), median of "
          f"{options.rounds}: {fit:.2f} s")
    print(f"ratio fit / demo: {fit / demo:.3f} (target <= 0.10)")


if __name__ == "__main__":
    main()

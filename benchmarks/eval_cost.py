"""Seconds of each part of the image evaluation harness (`MethodEvaluator`), side by side, at the demo's scale: the
bundled Fashion-MNIST (5,000 train / 1,000 test), MNIST digits, 8x8 digits and noise as OOD sets, every corruption,
the 1 % and 10 % label fractions, for a baseline (M=1) and an InSub (M=5) CIFAR ResNet-10 (width 0.25, seeded; the
weights are not trained: what the parts cost does not depend on them).

    python benchmarks/eval_cost.py                       # the table, and the numbers to runs/eval_cost/results.json
    python benchmarks/eval_cost.py --compare OLD.json    # also the largest difference of every number from OLD.json
    python benchmarks/eval_cost.py --scale full          # the full Fashion-MNIST (Debian's; 60,000 / 10,000)

The parts (`MethodEvaluator.seconds`): features (the training images), probe, detectors (k-NN banks and the head
spread's direction), test (features and scores of the test images), ts (temperature), knn_accuracy, ood (every OOD
set), retrieval (R-AUROC), crops, semi_supervised, corruptions.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
from transformers import set_seed

from insub_hf import InSubConfig, InSubForPreTraining
from insub_hf.data import IMAGE_DATASET_PRESETS, load_fashion_mnist
from insub_hf.encoders.presets import named_encoder
from insub_hf.evaluation.harness import HarnessArguments, MethodEvaluator
from insub_hf.evaluation.image_data import ImageEvaluationData
from insub_hf.evaluation.ood_sets import load_mnist_images, load_sklearn_digits, noise_ood_sets
from insub_hf.evaluation.probes import ProbeArguments


def evaluation_data(scale: str) -> ImageEvaluationData:
    preset = IMAGE_DATASET_PRESETS["fashion_mnist"]
    data = load_fashion_mnist("bundled" if scale == "demo" else "debian")
    train_images, train_labels = preset.to_tensors(data["train"])
    test_images, test_labels = preset.to_tensors(data["test"])
    shape = tuple(test_images.shape[1:])
    ood = noise_ood_sets(1000, shape, seed=1)
    ood["mnist"] = load_mnist_images(1000, seed=3)
    ood["digits8x8"] = load_sklearn_digits(1000, shape, seed=4)
    return ImageEvaluationData(train_images, train_labels, test_images, test_labels, ood, *preset.normalization(), 10)


def model(num_heads: int, device: torch.device) -> InSubForPreTraining:
    set_seed(0)
    config = InSubConfig(encoder_config=named_encoder("resnet10_cifar", 28, 1, 0.25), num_heads=num_heads,
                         head_hidden_sizes=[128], head_output_size=64)
    return InSubForPreTraining(config).to(device).eval()


def flatten(value, prefix: str = "") -> dict[str, float]:
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in flatten(item, f"{prefix}{key}.").items()}
    if isinstance(value, (list, tuple)):
        return {k: v for i, item in enumerate(value) for k, v in flatten(item, f"{prefix}{i}.").items()}
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {prefix.rstrip("."): float(value)}
    return {}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", choices=("demo", "full"), default="demo")
    parser.add_argument("--out", default="runs/eval_cost")
    parser.add_argument("--compare", default=None, help="results.json of another run: the largest differences.")
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data = evaluation_data(args.scale)
    harness = HarnessArguments()
    rows, numbers = {}, {}
    for name, heads in (("baseline", 1), ("insub", 5)):
        evaluator = MethodEvaluator([model(heads, device)], data, ProbeArguments(), harness)
        start = time.perf_counter()
        results, _ = evaluator.run()
        total = time.perf_counter() - start
        rows[name] = {**getattr(evaluator, "seconds", {}), "total": total}
        numbers[name] = flatten(results.to_dict())
    parts = list(dict.fromkeys(part for row in rows.values() for part in row))
    print(f"# Evaluation cost ({args.scale}: {len(data.train_images)} train / {len(data.test_images)} test, "
          f"{device}, torch {torch.__version__}, {torch.get_num_threads()} threads)\n")
    print("| part | " + " | ".join(f"{name} (s)" for name in rows) + " |")
    print("|---|" + "---:|" * len(rows))
    for part in parts:
        print(f"| {part} | " + " | ".join(f"{row.get(part, float('nan')):.2f}" for row in rows.values()) + " |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"seconds": rows, "numbers": numbers}, indent=1))
    if args.compare:
        old = json.loads(Path(args.compare).read_text())["numbers"]
        print("\n| model | numbers | largest difference | where |\n|---|---:|---:|---|")
        for name, values in numbers.items():
            shared = [k for k in values if k in old.get(name, {}) and not k.startswith("cost")]
            gaps = [(abs(values[k] - old[name][k]), k) for k in shared
                    if not (math.isnan(values[k]) and math.isnan(old[name][k]))]
            gap, where = max(gaps) if gaps else (0.0, "")
            print(f"| {name} | {len(shared)} | {gap:.2e} | {where} |")


if __name__ == "__main__":
    main()

"""What the comparison protocol (`insub-hf compare`) costs per method and per seed, measured side by side in one run.

For every method it times a pretraining step of the protocol's model (views made per batch (BatchTwoViews), AdamW, weights
in channels_last where InSubTrainer keeps them so),
in interleaved rounds so that every method sees the same machine load, and the feature extraction of the harness;
then it prints seconds per step, the ratio to the baseline, and the projected wall time per seed: pretraining
(steps x members x s/step) plus extraction of the train, test and OOD images. With `--results` it also prints the
wall times a real `insub-hf compare` run recorded per (method, seed) in its results.json.

    python benchmarks/protocol_cost.py [--encoder resnet10_cifar] [--width 0.25] [--batch_size 240] [--rounds 3] \
        [--results runs/compare/results.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from insub_hf import InSubForPreTraining
from insub_hf.data import IMAGE_DATASET_PRESETS
from insub_hf.evaluation.cost import device_description
from insub_hf.evaluation.features import extract_features
from insub_hf.training.memory_format import training_memory_format
from insub_hf.jobs.compare import TRAINING_DEFAULTS, ComparisonArguments
from insub_hf.jobs.methods import method_config

MEMBERS = {"baseline": 1, "ssl_ensemble": 5, "mc_dropout": 1, "batch_ensemble": 1, "insub": 1}


def step_fn(model, views, images, learning_rate):
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)

    def step():
        first, second = views(images)
        loss = model(pixel_values=first, pixel_values_2=second).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--encoder", default=ComparisonArguments.encoder)
    parser.add_argument("--width", type=float, default=ComparisonArguments.width)
    parser.add_argument("--batch_size", type=int, default=TRAINING_DEFAULTS["per_device_train_batch_size"])
    parser.add_argument("--epochs", type=float, default=TRAINING_DEFAULTS["num_train_epochs"])
    parser.add_argument("--train_images", type=int, default=60000)
    parser.add_argument("--eval_images", type=int, default=60000 + 10000 + 3 * 1000, help="train + test + OOD")
    parser.add_argument("--steps", type=int, default=3, help="Timed steps per method and round.")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--results", type=Path, default=None, help="A compare run's results.json to summarise.")
    options = parser.parse_args()

    args = ComparisonArguments(encoder=options.encoder, width=options.width)
    preset = IMAGE_DATASET_PRESETS[args.dataset]
    views = args.make_batch_views(preset)
    images = torch.rand(options.batch_size, preset.num_channels, preset.image_size, preset.image_size)
    torch.manual_seed(0)
    models = {
        method: InSubForPreTraining(method_config(args, "baseline" if method == "ssl_ensemble" else method, 5))
        .train().to(memory_format=training_memory_format(on_cpu=True))
        for method in MEMBERS
    }
    steps = {method: step_fn(model, views, images, TRAINING_DEFAULTS["learning_rate"]) for method, model in models.items()}
    for step in steps.values():
        step()  # warm-up
    times = {method: [] for method in MEMBERS}
    for _ in range(options.rounds):
        for method, step in steps.items():
            start = time.perf_counter()
            for _ in range(options.steps):
                step()
            times[method].append((time.perf_counter() - start) / options.steps)
    extraction = {}
    for method, model in models.items():
        batch = {"pixel_values": torch.rand(500, preset.num_channels, preset.image_size, preset.image_size)}
        passes = 5 if method == "mc_dropout" else 0
        start = time.perf_counter()
        extract_features(model, batch, 500, passes)
        extraction[method] = (time.perf_counter() - start) / 500
    total_steps = int(options.train_images // options.batch_size * options.epochs)
    print(f"device: {device_description()}; {options.encoder} width {options.width}, batch "
          f"{options.batch_size}, {total_steps} steps per model; median of {options.rounds} rounds x {options.steps} steps")
    print(f"{'method':<16} {'s/step':>7} {'vs baseline':>11} {'members':>7} {'pretrain min/seed':>17} {'extract min/seed':>16}")
    base = sorted(times["baseline"])[len(times["baseline"]) // 2]
    for method in MEMBERS:
        median = sorted(times[method])[len(times[method]) // 2]
        members = MEMBERS[method]
        pretrain = total_steps * members * median / 60
        extract = options.eval_images * members * extraction[method] / 60
        print(f"{method:<16} {median:7.3f} {median / base:10.2f}x {members:7d} {pretrain:17.1f} {extract:16.1f}")
    if options.results is not None:
        results = json.loads(options.results.read_text())
        print(f"\nmeasured in {options.results} ({results['device']}, {results['data'].get('source', '')}):")
        print(f"{'row':<24} {'seed':>4} {'pretraining s':>13} {'evaluation s':>12}")
        for row in results["rows"]:
            cost = row["cost"]
            print(f"{row['name']:<24} {row['seed']:>4} {cost.get('pretraining_seconds', float('nan')):13.0f} "
                  f"{cost.get('evaluation_seconds', float('nan')):12.0f}")


if __name__ == "__main__":
    main()

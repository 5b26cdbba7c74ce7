"""Acting on the calibrated uncertainty, measured on the demo's InSub model: outliers selected at a false discovery
rate, and a drift monitor over a stream.

The model's uncertainty is fitted again as in `calibration_seeds.py --calibrate_from test` (its bank the demo's
pretraining images, its calibration rows drawn from the test split), so that the remaining test images are
exchangeable with the calibration rows, the case the guarantees are stated for. Then, on p-values computed once
per image (`insub_hf.model_pvalues`):

- FDR: `--draws` draws of 500 in-distribution images mixed with 50 outliers of one kind (uniform noise, MNIST
  digits, Gaussian-noise-corrupted test images): the realised false discovery proportion of `outliers_among` at
  `fdr=0.1` (its mean, with its Monte-Carlo error) and the power per kind; and draws of 500 in-distribution images
  alone: the share of draws that flag anything (Benjamini-Hochberg holds it at 0.1 there).
- Drift: `--streams` seeded streams of 50 batches of 32 in-distribution images (the share that ever raises the
  alarm at 100), and streams that switch to one kind at batch 25 (the share alarmed within 5 batches of the
  switch, and the median delay).

    python benchmarks/acting_on_uncertainty.py RUN_DIR [--draws 200] [--streams 100] [--output FILE.json]

RUN_DIR: an `insub-hf demo` output folder. About 2 minutes on a quiet 2-core machine (the p-values; the draws and
streams are arithmetic on them).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibration_seeds import test_images  # noqa: E402

from insub_hf import DriftMonitor, InSubModel, model_pvalues, outliers_among  # noqa: E402
from insub_hf.data import load_fashion_mnist  # noqa: E402
from insub_hf.evaluation.corruptions import corrupt  # noqa: E402
from insub_hf.evaluation.ood_sets import load_mnist_images, noise_images  # noqa: E402
from insub_hf.jobs.demo import DemoArguments, demo_evaluation_data  # noqa: E402
from insub_hf.jobs.experiment import calibration_split  # noqa: E402

# The calibration rows a fit ranks against at most (`fitting.CALIBRATION_ROWS`). Benjamini-Hochberg at 550 inputs and
# fdr 0.1 flags the k smallest p-values only where the k-th is below 0.1 k / 550, and no conformal p-value is below
# 1 / (n + 1): with n = 2,000 it takes 3 outliers at the smallest p-value before any is flagged
CALIBRATION_ROWS, MIXED_IN, MIXED_OUT, BATCHES, BATCH, SWITCH, WITHIN = 2000, 500, 50, 50, 32, 25, 5


def fdr_draws(p_in: np.ndarray, p_out: dict[str, np.ndarray], draws: int, fdr: float) -> dict:
    rng = np.random.default_rng(0)
    found = {}
    for kind, outliers in p_out.items():
        proportions, powers = [], []
        for _ in range(draws):
            p = np.concatenate([rng.choice(p_in, MIXED_IN, replace=False), rng.choice(outliers, MIXED_OUT, replace=False)])
            flagged = outliers_among(p, fdr)
            false = int(flagged[:MIXED_IN].sum())
            proportions.append(false / max(int(flagged.sum()), 1))
            powers.append(float(flagged[MIXED_IN:].mean()))
        mean, error = statistics.mean(proportions), statistics.stdev(proportions) / np.sqrt(draws)
        found[kind] = dict(fdr_mean=mean, fdr_mc_error=error, power_mean=statistics.mean(powers),
                           verdict="met" if mean <= fdr + 2 * error else "missed")
        print(f"[acting] {kind}: realised FDR {mean:.4f} (+- {error:.4f}) at fdr={fdr}, power "
              f"{100 * found[kind]['power_mean']:.1f} % over {draws} draws: {found[kind]['verdict']}", flush=True)
    anything = [bool(outliers_among(rng.choice(p_in, MIXED_IN, replace=False), fdr).any()) for _ in range(draws)]
    share = statistics.mean(anything)
    found["in_distribution_only"] = dict(share_flagging_anything=share, verdict="met" if share <= fdr else "missed")
    print(f"[acting] in-distribution only: {100 * share:.1f} % of {draws} draws flag anything (target <= "
          f"{100 * fdr:g} %)", flush=True)
    return found


def streams(p_in: np.ndarray, p_out: dict[str, np.ndarray], count: int) -> tuple[dict, dict]:
    """(the numbers, the log10 martingale of the first stream of each kind, for the picture)."""
    found, traces = {}, {}
    alarms = []
    for seed in range(count):
        rng, monitor = np.random.default_rng(1000 + seed), DriftMonitor()
        for batch in rng.choice(p_in, (BATCHES, BATCH), replace=False):
            monitor.update(pvalues=batch)
        alarms.append(monitor.alarm)
        if seed == 0:
            traces["in-distribution"] = list(monitor.history)
    share = statistics.mean(alarms)
    found["in_distribution"] = dict(share_alarmed=share, verdict="met" if share <= 0.05 else "missed")
    print(f"[acting] drift, in-distribution streams: {100 * share:.1f} % of {count} raise the alarm (target <= 5 %)",
          flush=True)
    for kind, outliers in p_out.items():
        delays = []
        for seed in range(count):
            rng, monitor = np.random.default_rng(2000 + seed), DriftMonitor()
            before = rng.choice(p_in, (SWITCH, BATCH), replace=False)
            after = rng.choice(outliers, (BATCHES - SWITCH, BATCH), replace=len(outliers) < (BATCHES - SWITCH) * BATCH)
            for batch in np.concatenate([before, after]):
                monitor.update(pvalues=batch)
            delays.append(None if monitor.alarm_batch is None else monitor.alarm_batch - SWITCH)
            if seed == 0:
                traces[kind] = list(monitor.history)
        early = [d is not None and d < 0 for d in delays]
        soon = [d is not None and 0 <= d < WITHIN for d in delays]
        found[kind] = dict(share_within=statistics.mean(soon), share_before_switch=statistics.mean(early),
                           median_delay=statistics.median([d for d in delays if d is not None] or [float("nan")]),
                           verdict="met" if statistics.mean(soon) >= 0.9 else "missed")
        print(f"[acting] drift to {kind} at batch {SWITCH}: alarmed within {WITHIN} batches in "
              f"{100 * found[kind]['share_within']:.0f} % of {count} streams (target >= 90 %), median delay "
              f"{found[kind]['median_delay']} batches; before the switch in {100 * found[kind]['share_before_switch']:.0f} %",
              flush=True)
    return found, traces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--fdr", type=float, default=0.1)
    parser.add_argument("--output", type=Path, default=None, help="a JSON file for the numbers and the traces")
    options = parser.parse_args()

    saved = json.loads((options.run / "run_arguments.json").read_text())
    args = DemoArguments(**{k: v for k, v in saved.items() if k in DemoArguments.__dataclass_fields__})
    data = load_fashion_mnist(args.data_source, args.train_per_class, args.test_per_class, seed=saved["seed"])
    evaluation, _ = demo_evaluation_data(data, args)
    kept, _ = calibration_split(len(evaluation.train_images), args.calibration_fraction, saved["seed"])
    note: list[str] = []
    test = test_images(evaluation, note)["pixel_values"]
    order = torch.randperm(len(test), generator=torch.Generator().manual_seed(0))
    calibration, pool = test[order[:CALIBRATION_ROWS]], test[order[CALIBRATION_ROWS:]]
    model = InSubModel.from_pretrained(options.run / "insub_m5" / "model").eval()
    print(f"[acting] {options.run}: bank {len(kept)} pretraining images, calibration {CALIBRATION_ROWS} of "
          f"{note[0]}, the other {len(pool)} in-distribution", flush=True)
    model.fit_uncertainty(evaluation.inputs(evaluation.train_images[kept]), {"pixel_values": calibration},
                          show_progress=False)
    raw = {  # in [0, 1], the demo's geometry, normalised as its inputs
        "uniform noise": noise_images("uniform", 2000, tuple(evaluation.test_images.shape[1:]), seed=1),
        "MNIST digits": load_mnist_images(5000, seed=3),
        "corrupted (gaussian noise, severity 3)": corrupt(evaluation.test_images[:2000], "gaussian_noise", 3, seed=2),
    }
    print("[acting] p-values of the in-distribution pool and of each outlier kind", flush=True)
    p_in = model_pvalues(model, {"pixel_values": pool})
    p_out = {kind: model_pvalues(model, evaluation.inputs(images)) for kind, images in raw.items()}
    found = {"fdr": fdr_draws(p_in, p_out, options.draws, options.fdr)}
    found["drift"], traces = streams(p_in, p_out, options.streams)
    found.update(run=str(options.run), test_images=note[0], calibration_rows=CALIBRATION_ROWS, draws=options.draws,
                 streams=options.streams, threshold=DriftMonitor().threshold, traces=traces)
    if options.output:
        options.output.write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()

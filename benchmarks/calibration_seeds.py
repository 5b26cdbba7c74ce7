"""The calibrated `uncertainty`'s promise measured, not only constructed: each model of an `insub-hf demo` run fitted
again on 20 calibration seeds (each seed draws its bank from the demo's pretraining images and its calibration rows
from the images the demo held out of pretraining), then the share of Fashion-MNIST test images above 0.95 per seed:
its mean and spread beside what the rank's theory gives for that many calibration and test images
(`expected_flag_band`: beta-binomial). Target: every model's mean within 5.0 +- 0.5 points.

Two designs (`--calibrate_from`): `held_out` (default) is the demo as shipped: calibration rows from the training
images held out of pretraining, flag rate on the test split; one pool of held-out images and one test set per
model, so the seeds share both and their mean carries the pool's own error (and any train/test shift). `test` draws
each seed's calibration rows from the test split itself and measures the rest: the exchangeable case the rank's
guarantee is stated for, where the mean over seeds estimates the marginal flag rate.

    python benchmarks/calibration_seeds.py RUN_DIR [RUN_DIR ...] [--seeds 20] [--calibration_rows 500]
        [--calibrate_from held_out|test]

RUN_DIR: an `insub-hf demo` output folder (its arguments say which images it held out). Test images: Debian's full
10,000 (`dataset-fashion-mnist`) where installed, else the demo's own. About 1 minute per model on a quiet 2-core
machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from insub_hf import InSubModel
from insub_hf.data import load_fashion_mnist
from insub_hf.evaluation.flagging import FLAG_THRESHOLD, expected_flag_band, flag_count_distribution
from insub_hf.jobs.demo import DemoArguments, demo_evaluation_data
from insub_hf.jobs.experiment import calibration_split


def test_images(evaluation, fallback_note: list[str]):
    """The test images the flag rate is measured on, normalised as the demo's: Debian's 10,000 where installed."""
    try:
        full = load_fashion_mnist("debian")
    except (FileNotFoundError, OSError, ValueError) as error:
        fallback_note.append(f"Debian's Fashion-MNIST is not installed ({type(error).__name__}): the demo's own "
                             f"{len(evaluation.test_images)} test images")
        return evaluation.inputs(evaluation.test_images)
    from insub_hf.data import IMAGE_DATASET_PRESETS

    images, _ = IMAGE_DATASET_PRESETS["fashion_mnist"].to_tensors(full["test"])
    fallback_note.append(f"Debian's full test split ({len(images)} images)")
    return evaluation.inputs(images)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--calibration_rows", type=int, default=500, help="drawn per seed from the held-out images")
    parser.add_argument("--calibrate_from", choices=("held_out", "test"), default="held_out",
                        help="where each seed's calibration rows come from (see the module's docstring)")
    parser.add_argument("--output", type=Path, default=None, help="a JSON file for the numbers")
    options = parser.parse_args()

    measured = {}
    for run in options.runs:
        saved = json.loads((run / "run_arguments.json").read_text())
        args = DemoArguments(**{k: v for k, v in saved.items() if k in DemoArguments.__dataclass_fields__})
        data = load_fashion_mnist(args.data_source, args.train_per_class, args.test_per_class, seed=saved["seed"])
        evaluation, _ = demo_evaluation_data(data, args)
        kept, held = calibration_split(len(evaluation.train_images), args.calibration_fraction, saved["seed"])
        note: list[str] = []
        test = test_images(evaluation, note)
        from_test = options.calibrate_from == "test"
        total = test["pixel_values"].shape[0]
        n = options.calibration_rows if from_test else min(options.calibration_rows, len(held))
        rows = total - n if from_test else total
        expected, low, high = expected_flag_band(n, rows)
        theory_sd = float(flag_count_distribution(n, rows).std()) / rows
        source = f"{n} of {note[0]}, the rest measured" if from_test else \
            f"{n} of the {len(held)} held-out images, flag rate on {note[0]}"
        print(f"[seeds] {run}: bank {len(kept)} pretraining images; per seed {source}", flush=True)
        for name in ("baseline", "insub_m5"):
            model = InSubModel.from_pretrained(run / name / "model").eval()
            rates = []
            for seed in range(options.seeds):
                generator = torch.Generator().manual_seed(seed)
                if from_test:
                    order = torch.randperm(total, generator=generator)
                    calibration = {"pixel_values": test["pixel_values"][order[:n]]}
                    measured_images = test["pixel_values"][order[n:]]
                else:
                    chosen = held[torch.randperm(len(held), generator=generator)[:n]]
                    calibration = evaluation.inputs(evaluation.train_images[chosen])
                    measured_images = test["pixel_values"]
                model.fit_uncertainty(evaluation.inputs(evaluation.train_images[kept]), calibration, seed=seed,
                                      show_progress=False)
                with torch.no_grad():
                    served = torch.cat([model(pixel_values=measured_images[i:i + 1000]).uncertainty
                                        for i in range(0, rows, 1000)])
                rates.append(float((served > FLAG_THRESHOLD).float().mean()))
                print(f"[seeds] {run.name}/{name} seed {seed}: {100 * rates[-1]:.2f} % above {FLAG_THRESHOLD}",
                      flush=True)
            mean, sd = statistics.mean(rates), statistics.stdev(rates)
            verdict = "met" if abs(100 * mean - 5.0) <= 0.5 else "missed"
            measured[f"{run.name}/{name}"] = dict(mean=mean, sd=sd, rates=rates, theory_mean=expected,
                                                  theory_sd=theory_sd, theory_band=[low, high], calibration_rows=n,
                                                  test_images=rows, verdict=verdict,
                                                  calibrate_from=options.calibrate_from)
            print(f"[seeds] {run.name}/{name}: mean {100 * mean:.2f} % (sd {100 * sd:.2f}) over {options.seeds} "
                  f"seeds; theory {100 * expected:.2f} % (sd {100 * theory_sd:.2f}, 95 % band "
                  f"{100 * low:.1f}-{100 * high:.1f}); target 5.0 +- 0.5: {verdict}", flush=True)
    if options.output:
        options.output.write_text(json.dumps(measured, indent=1))


if __name__ == "__main__":
    main()

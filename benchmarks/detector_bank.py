"""What a smaller bank costs: a released image model's bank (what its `InSubOODDetector` reads) set to the first N
training images (N = 1,500 fits the Hub folder in git; 10,000 is the release's default), side by side in
one run, each scoring the test images against the release's OOD sets (its comparison's data). Prints each label-free
score's AUROC per bank size and the difference to the largest bank.

    python benchmarks/detector_bank.py --model runs/release/image/hub --banks 1500 10000

The data are the release's (`insub-hf compare`'s arguments saved in `--run_arguments`), so the numbers are the ones
its card's `knn` rows would give.
"""

from __future__ import annotations

import argparse
import json

from insub_hf import InSubModel, InSubOODDetector
from insub_hf.evaluation.metrics import ood_auroc
from insub_hf.evaluation.ood_detector import calibration_noise
from insub_hf.jobs.compare import ComparisonArguments
from insub_hf.jobs.comparison import load_protocol_data


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="runs/release/image/hub")
    parser.add_argument("--run_arguments", default="runs/release/image/run_arguments.json")
    parser.add_argument("--banks", type=int, nargs="+", default=[1500, 10000])
    args = parser.parse_args(argv)
    saved = json.loads(open(args.run_arguments).read())
    fields = ComparisonArguments.__dataclass_fields__
    protocol = ComparisonArguments(**{k: v for k, v in saved.items() if k in fields})
    data = load_protocol_data(protocol).evaluation
    model = InSubModel.from_pretrained(args.model).eval()
    test = data.inputs(data.test_images)
    rows = {}
    for size in sorted(args.banks):
        images = data.train_images[:size]
        detector = InSubOODDetector.fit(model, data.inputs(images), calibration_inputs=data.inputs(
            calibration_noise(images)))
        seen = detector.score(test)
        rows[size] = {f"{score} vs {name}": ood_auroc(seen[score], detector.score(data.inputs(ood))[score],
                                                       higher_is_in=False)
                      for name, ood in data.ood_images.items() for score in ("knn", "head_spread")}
    largest = max(rows)
    print(f"{'AUROC':<24}" + "".join(f"{f'bank {n}':>12}" for n in rows) + f"{'difference':>14}")
    for key in rows[largest]:
        values = [rows[n][key] for n in rows]
        print(f"{key:<24}" + "".join(f"{100 * v:>11.2f}%" for v in values)
              + f"{100 * (values[0] - values[-1]):>+13.2f}")


if __name__ == "__main__":
    main()

"""The demo's models on Fashion-MNIST's whole test split: how many of its 10,000 images (and of the 9,000 the bundled
subset does not hold) each model's `uncertainty` flags above 0.95, through `insub-hf score` (the command a user runs).

    python docs/runs/demo_flag_rate_full_test.py OUT RUN_DIR [RUN_DIR ...]

RUN_DIR: an `insub-hf demo` output folder (its `baseline/model` and `insub_m5/model` are scored). Needs Debian's
`dataset-fashion-mnist`. Writes OUT/<run>_<model>_<test set>/results.json and prints one JSON object: per run and
model, the share flagged, its expected band and the OOD AUROCs, for "all 10,000" and "the other 9,000".
"""

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
from datasets import DatasetDict

from insub_hf.data import load_fashion_mnist
from insub_hf.jobs.score import ScoreArguments, score


def image_keys(split) -> list[str]:
    return [hashlib.sha1(np.asarray(image).tobytes()).hexdigest() for image in split["image"]]


def main(out: Path, runs: list[Path]) -> dict:
    bundled, full = load_fashion_mnist("bundled"), load_fashion_mnist("debian")
    shipped = set(image_keys(bundled["test"]))
    others = [i for i, key in enumerate(image_keys(full["test"])) if key not in shipped]
    assert len(others) == len(full["test"]) - len(bundled["test"]), "the bundled test images are Debian's"
    sets = {"all 10,000": full["test"], "the other 9,000": full["test"].select(others)}
    folders = {}
    for name, test in sets.items():  # the demo's training images (probe, k-NN bank) beside the test images
        folders[name] = out / "data" / name.replace(" ", "_").replace(",", "")
        DatasetDict(train=bundled["train"], test=test).save_to_disk(str(folders[name]))
    measured = {}
    for run in runs:
        for model in ("baseline", "insub_m5"):
            for name, folder in folders.items():
                results = score(ScoreArguments(
                    model=str(run / model / "model"), dataset=str(folder), max_test=len(sets[name]),
                    output_dir=str(out / f"{run.name}_{model}_{folder.name}")))
                measured.setdefault(f"{run.name}/{model}", {})[name] = {
                    "flag_rate": results["flag_rate"], "ood_auroc_vs_uniform_noise": results["ood"]}
    return measured


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]]), indent=1))

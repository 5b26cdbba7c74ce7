"""What a release ships of its trained model: the model a results row measured (`measured_model`), the run record of
a folder made before (`reused_run`, for `--reuse`) and the model's calibrated `uncertainty` fitted on its own data
(`fit_shipped`)."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import torch

from ..jobs.cards import RunRecord
from ..uncertainty.fitting import CALIBRATION_ROWS, rows_also_in
from ..uncertainty.knn import encoder_and_heads_fingerprint

# Rows a detector's bank needs at least, and held-out rows beyond it before they calibrate apart from it
MIN_DETECTOR_BANK = 16


def fit_shipped(model, inputs: dict[str, torch.Tensor], bank: int):
    """The released model's calibrated `uncertainty` (`InSubModel.fit_uncertainty`, as every job fits it): its k-NN
    bank the first `bank` rows of `inputs` (in-distribution encoder inputs, `(N, ...)` each), ranked against up to
    `CALIBRATION_ROWS` rows after them, none of them in the bank; where `inputs` has no rows beyond `bank`, half of
    them calibrate and the rest are the bank. Returns the `FittedUncertainty`."""
    inner = getattr(model, "insub", model)
    rows = len(next(iter(inputs.values())))
    if rows - bank >= MIN_DETECTOR_BANK:
        banked = {name: value[:bank] for name, value in inputs.items()}
        held = {name: value[bank:bank + CALIBRATION_ROWS] for name, value in inputs.items()}
        main = inner.encoder.main_input_name
        again = rows_also_in(banked[main], held[main])  # e.g. a window of a sequence the genome holds twice
        if again.any():
            print(f"[release] {int(again.sum())} of the {len(again)} calibration rows are also bank rows (the same "
                  "input twice in the data): left out of the calibration", flush=True)
            held = {name: value[~again] for name, value in held.items()}
        fitted = inner.fit_uncertainty(banked, held)
    else:
        fitted = inner.fit_uncertainty(inputs)
    print(f"[release] the calibrated uncertainty: a bank of {fitted.bank_size} rows (k = {fitted.k}), "
          f"{fitted.calibration_size[1]} held-out rows to rank against, the readings {fitted.components} (the "
          f"spread's AUROC against shuffled inputs {100 * fitted.spread_auroc:.1f} %, the served reading's "
          f"{100 * fitted.auroc:.1f} %)", flush=True)
    return fitted


def measured_model(out: Path, fingerprints: list[str]):
    """The trained model under `out` (a run folder's `model/`, the run cache's, or a released folder) whose weights a
    results row measured (`fingerprints`, one model), in eval mode."""
    from ..model.modeling_insub import InSubForPreTraining

    for config in sorted([*out.glob("config.json"), *out.glob("*/model/config.json"),
                          *out.glob("cache/*/model/config.json")]):
        model = InSubForPreTraining.from_pretrained(config.parent)
        if [encoder_and_heads_fingerprint(model)] == fingerprints:
            return model.eval()
    raise FileNotFoundError(f"no trained model under {out} has the weights {fingerprints} its results measured.")


def reused_run(folder: Path, out: Path, args):
    """For `--reuse`: the run record of the released `folder` (evaluation/results.json and results.md) copied into
    the run folder `out`, and `args` with the data settings that run used (its record's), so that the bank and the
    card's k-NN rows read the same images."""
    record = folder / "evaluation" / "results.json"
    if not record.is_file():
        raise FileNotFoundError(f"ReleaseArguments.reuse={str(folder)!r} holds no evaluation/results.json: give a folder "
                                "that `insub-hf release image` published.")
    out.mkdir(parents=True, exist_ok=True)
    for name in ("results.json", "results.md"):
        shutil.copyfile(folder / "evaluation" / name, out / name)
    recorded = RunRecord.read(out / "results.json").args
    return replace(args, **{name: recorded[name] for name in args.__dataclass_fields__ if name in recorded})

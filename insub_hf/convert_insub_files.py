"""Rewrites, once and in place, the files earlier insub-hf versions wrote into today's format; the library reads only
today's, and names this converter when it meets an old file.

    python -m insub_hf.convert_insub_files FOLDER [FOLDER ...] [--dry_run]

Every folder is walked recursively:
- `config.json` of an InSub model: each objective's flat fields of before 2026-11-23 (`temperature`, `dino_out_dim`,
  ...) move into `objective_config` (the other objectives' are dropped); a config without `diversity_reduction` was
  written before the authors' objective became the default and gets the loss it was trained with
  (`UNSCALED_SUM_LOSS`).
- The weights beside such a config (`model.safetensors` or its shards; checkpoints too): names of before the
  objectives moved under `objective.` (DINO's teacher, prototypes and centre; Self-GenomeNet's projections) are
  renamed (`OLD_WEIGHT_NAMES`), and the checksums rewritten. The tensors are not touched.
- Results (`results.json` and any JSON holding harness results): OOD score names of before 2026-11-23 (`neg_knn`,
  higher = in-distribution) become today's (`knn`, higher = OOD; the AUROCs are the same numbers), a corruption's
  `auroc` becomes `auroc_msp`.
Each file is written through a temporary sibling and renamed, so an interrupted conversion leaves it old or new.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from typing import Any

from safetensors.torch import save_file

from .checkpointing import write_json
from .checksums import INDEX_FILE, checksum_metadata, model_weight_files, read_verified
from .configuration_insub import FLAT_OBJECTIVE_FIELDS

MODEL_TYPE = "insub"
# The loss a config.json without `diversity_reduction` was trained with: unscaled NT-Xent, hinge summed over views.
UNSCALED_SUM_LOSS = {"base_temperature": None, "diversity_reduction": "sum"}
# Weight names of before the objectives owned their state, per objective: `{regex: replacement}`, applied in turn.
OLD_WEIGHT_NAMES = {
    "dino": {
        r"^insub\.prototypes\.": "objective.prototypes.",
        r"^teacher\.prototypes\.": "objective.teacher_prototypes.",
        r"^teacher\.": "objective.teacher.",
        r"^dino_loss\.": "objective.loss.",
    },
    "genomenet": {r"^genomenet_projections\.": "objective.projections."},
}


def convert_config(config: dict[str, Any]) -> dict[str, Any]:
    """Today's form of an InSub config.json dict (an unchanged copy when it is already today's)."""
    config = dict(config)
    if "diversity_reduction" not in config:
        config = {**UNSCALED_SUM_LOSS, **config}
    present = sorted(set(config) & set(FLAT_OBJECTIVE_FIELDS))
    if present:
        objective = config.get("objective", "simclr")
        moved = {FLAT_OBJECTIVE_FIELDS[name][1]: config.pop(name) for name in present
                 if FLAT_OBJECTIVE_FIELDS[name][0] == objective}
        for name in present:
            config.pop(name, None)
        config["objective_config"] = {**moved, **(config.get("objective_config") or {})}
    return config


def convert_weight_name(name: str, objective: str) -> str:
    for pattern, replacement in OLD_WEIGHT_NAMES.get(objective, {}).items():
        name = re.sub(pattern, replacement, name, count=1)
    return name


def convert_results(data: Any) -> Any:
    """`data` (parsed JSON) with every harness result in it (a dict with `test` and `ood`) under today's names."""
    if isinstance(data, list):
        return [convert_results(item) for item in data]
    if not isinstance(data, dict):
        return data
    data = {key: convert_results(value) for key, value in data.items()}
    if "test" in data and isinstance(data.get("ood"), dict):
        data["ood"] = {name: {k.removeprefix("neg_"): v for k, v in scores.items()} for name, scores in data["ood"].items()}

        def corruption(m: dict) -> dict:
            return {("auroc_msp" if k == "auroc" else k): v for k, v in m.items()}

        if isinstance(data.get("corruptions"), dict):
            data["corruptions"] = {n: {s: corruption(m) for s, m in per.items()} for n, per in data["corruptions"].items()}
        if isinstance(data.get("corruption_mean"), dict):
            data["corruption_mean"] = {s: corruption(m) for s, m in data["corruption_mean"].items()}
    return data


def _convert_weights(folder: Path, objective: str, dry_run: bool) -> list[Path]:
    """Renames the old weight names of the model files in `folder`; returns the files that had any."""
    changed = []
    renames = {}
    for path in model_weight_files(folder):
        tensors, _ = read_verified(path)  # a damaged file is refused before anything is rewritten
        renamed = {convert_weight_name(name, objective): tensor for name, tensor in tensors.items()}
        if set(renamed) == set(tensors):
            continue
        renames.update({name: convert_weight_name(name, objective) for name in tensors})
        changed.append(path)
        if not dry_run:
            tmp = path.with_name(f".{path.name}.converting")
            save_file(renamed, str(tmp), metadata={"format": "pt", **checksum_metadata(renamed)})
            os.replace(tmp, path)
    index = folder / INDEX_FILE
    if changed and index.is_file():
        data = json.loads(index.read_text())
        data["weight_map"] = {renames.get(k, k): v for k, v in data["weight_map"].items()}
        changed.append(index)
        if not dry_run:
            write_json(index, data)
    return changed


def convert_folder(folder: str | Path, dry_run: bool = False) -> list[Path]:
    """Converts every old file under `folder` (see the module note); returns the files rewritten (with `dry_run`:
    the files that would be)."""
    changed = []
    for path in sorted(Path(folder).rglob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, OSError) as error:
            raise ValueError(f"{path} is not readable JSON ({error}); nothing after it was converted.") from None
        if path.name == "config.json" and isinstance(data, dict) and data.get("model_type") == MODEL_TYPE:
            new = convert_config(data)
            changed += _convert_weights(path.parent, new.get("objective", "simclr"), dry_run)
        else:
            new = convert_results(data)
        if new != data:
            changed.append(path)
            if not dry_run:
                write_json(path, new, sort_keys=path.name == "config.json")
    return changed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m insub_hf.convert_insub_files", allow_abbrev=False,
        description="Rewrite the configs, weights and results earlier insub-hf versions wrote into today's format.",
    )
    parser.add_argument("folders", nargs="+", type=Path, help="Folders to convert, recursively (run folders, caches).")
    parser.add_argument("--dry_run", action="store_true", help="List the files that would change; write nothing.")
    args = parser.parse_args(argv)
    for folder in args.folders:
        if not folder.is_dir():
            parser.error(f"{folder}: no such folder")
    for folder in args.folders:
        for path in convert_folder(folder, args.dry_run):
            print(f"{'would convert' if args.dry_run else 'converted'} {path}")


if __name__ == "__main__":
    main()

"""Finished harness evaluations of a comparison, cached beside its pretrained runs: a longer table (more seeds, more
methods) evaluates only what is new. An entry is keyed by the runs it evaluated, the method, the evaluation data and
settings, and the evaluation code itself, so a change to any of them evaluates again."""

from __future__ import annotations

import functools
import hashlib
import json
import time
from dataclasses import asdict, fields
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..checksums import checksum_metadata, read_verified
from ..evaluation.metrics.ece import ReliabilityBins
from ..evaluation.results import MethodResults
from .experiment import short_hash, write_json

EVALUATION_CODE = Path(__file__).parents[1] / "evaluation"
# outside the evaluation package, what it computes with: the k-NN distance every path serves
EVALUATION_HELPERS = (Path(__file__).parents[1] / "uncertainty" / "knn.py",
                      Path(__file__).parents[1] / "uncertainty" / "length.py")


@functools.cache
def evaluation_code_hash() -> str:
    """A short hash of the evaluation package's source files and `EVALUATION_HELPERS` (what computed the numbers);
    read once per process."""
    digest = hashlib.sha1()
    for path in [*sorted(EVALUATION_CODE.rglob("*.py")), *EVALUATION_HELPERS]:
        digest.update(str(path.relative_to(EVALUATION_CODE.parent)).encode() + path.read_bytes())
    return digest.hexdigest()[:12]


def _flatten(arrays: dict, prefix: str = "") -> dict[str, torch.Tensor]:
    """`{"reliability": ReliabilityBins, "scores": {split: {score: (N,)}}}` -> `{"scores/in/msp": tensor, ...}`."""
    flat = {}
    for key, value in arrays.items():
        name = f"{prefix}{key}"
        if isinstance(value, ReliabilityBins):
            flat.update({f"{name}/{f.name}": torch.as_tensor(getattr(value, f.name)) for f in fields(value)})
        elif isinstance(value, dict):
            flat.update(_flatten(value, f"{name}/"))
        else:
            flat[name] = torch.as_tensor(value).contiguous()
    return flat


def _unflatten(flat: dict[str, torch.Tensor]) -> dict:
    arrays: dict = {}
    for name, tensor in flat.items():
        *parents, leaf = name.split("/")
        node = arrays
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = tensor
    if "reliability" in arrays:
        arrays["reliability"] = ReliabilityBins(**arrays["reliability"])
    return arrays


def numbers_checksum(numbers: dict) -> str:
    """sha256 of an entry's numbers (its `checksum` key left out), as canonical JSON: an edited value, NaN included,
    changes it."""
    body = {key: value for key, value in numbers.items() if key != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, allow_nan=True).encode()).hexdigest()


class EvaluationCache:
    """`folder/<key>/numbers.json` and `arrays.safetensors` per finished evaluation; the numbers carry their checksum
    and the arrays one per tensor (as model files do), so a damaged file is refused, not read as other numbers, and an
    entry without checksums is evaluated again."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    @staticmethod
    def key(run_keys: list[str], method: str, evaluation_data: dict, probe_args, harness_args) -> str:
        """The entry of `method` evaluated on the pretrained runs `run_keys` with these data and settings."""
        return short_hash({"runs": run_keys, "method": method, "data": evaluation_data, "probe": asdict(probe_args),
                           "harness": asdict(harness_args), "code": evaluation_code_hash()})

    def load(self, key: str) -> tuple[MethodResults, dict, float] | None:
        """(results, arrays, evaluation seconds) of a finished evaluation, or None (also for arrays written without
        checksums, which cannot be trusted: evaluated again). Damaged arrays raise ValueError naming the file."""
        entry = self.folder / key
        if not (entry / "numbers.json").exists() or not (entry / "arrays.safetensors").exists():
            return None
        damaged = f"Remove the cache entry {entry} to evaluate it again."
        try:
            numbers = json.loads((entry / "numbers.json").read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ValueError(f"{entry / 'numbers.json'} is not whole JSON (cut or edited after it was written). "
                             f"{damaged}") from None
        if not isinstance(numbers, dict) or "checksum" not in numbers:
            return None  # written without a checksum (or emptied to one): nothing to verify it by, evaluated again
        if numbers["checksum"] != numbers_checksum(numbers):
            raise ValueError(f"{entry / 'numbers.json'} does not match its checksum (edited after it was written). "
                             f"{damaged}")
        try:
            flat, checked = read_verified(entry / "arrays.safetensors")
        except ValueError as error:
            raise ValueError(f"{error} {damaged}") from None
        if not checked:
            return None
        return MethodResults.from_dict(numbers["results"]), _unflatten(flat), numbers["evaluation_seconds"]

    def store(self, key: str, results: MethodResults, arrays: dict, seconds: float) -> None:
        """Writes the arrays, then the numbers (whose presence marks the entry finished)."""
        entry = self.folder / key
        entry.mkdir(parents=True, exist_ok=True)
        flat = _flatten(arrays)
        save_file(flat, str(entry / "arrays.safetensors"), metadata=checksum_metadata(flat))
        numbers = {"results": results.to_dict(), "evaluation_seconds": seconds}
        write_json(entry / "numbers.json", {**numbers, "checksum": numbers_checksum(numbers)})

    def get(self, key: str, evaluate) -> tuple[MethodResults, dict, float]:
        """(results, arrays, evaluation seconds) of entry `key`: loaded when finished, else `evaluate()` (which
        returns results and arrays) run, timed and stored."""
        stored = self.load(key)
        if stored is not None:
            return stored
        start = time.time()
        results, arrays = evaluate()
        seconds = round(time.time() - start, 1)
        self.store(key, results, arrays, seconds)
        return results, arrays, seconds

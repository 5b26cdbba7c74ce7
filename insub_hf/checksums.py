"""A checksum of every tensor in a safetensors file's metadata, and of the config saved beside it, written on save
and verified on load.

safetensors itself checks the header, not the data: bytes overwritten inside a file load as whatever they now
encode (NaN weights, silently). And transformers writes config.json before the weights, so a save killed between the
two leaves one model's config (its labels, say) beside another model's weights of the same shapes. Files saved
without these records (other tools, transformers alone) still load.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

METADATA_KEY = "insub_hf_sha256"
CONFIG_KEY = "insub_hf_config_sha256"
CONFIG_FILE = "config.json"
# What a config.json records of the software that wrote it (and the remote code's `auto_map` and
# `custom_pipelines`, written after the weights), not of the model: left out of its digest, as are keys starting
# with "_" (`_name_or_path`, which publishing removes)
NOT_THE_MODEL = ("transformers_version", "auto_map", "custom_pipelines")
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


def tensor_checksum(tensor: torch.Tensor) -> str:
    """SHA-256 (hex) of a tensor's bytes as stored (row-major, its own dtype)."""
    data = tensor.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy()
    return hashlib.sha256(data.tobytes()).hexdigest()


def read_safetensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(tensors, metadata) of a safetensors file; an unreadable one raises ValueError naming it."""
    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = dict(handle.metadata() or {})
            return {name: handle.get_tensor(name) for name in handle.keys()}, metadata
    except (SafetensorError, OSError, RuntimeError, ValueError) as error:
        raise ValueError(
            f"{path} is not a readable safetensors file (truncated, overwritten or not safetensors at all): {error}"
        ) from None


def checksum_metadata(tensors: dict[str, torch.Tensor]) -> dict[str, str]:
    """The safetensors metadata entry that `verify_checksums` reads: a checksum of each tensor."""
    return {METADATA_KEY: json.dumps({name: tensor_checksum(t) for name, t in tensors.items()}, sort_keys=True)}


def weights_fingerprint(module: torch.nn.Module, leave_out: str | None = None, dtype: torch.dtype | None = None) -> str:
    """SHA-256 (hex) over a module's state dict (names, dtypes, shapes and bytes): which trained weights these are.
    `leave_out`: a name prefix whose entries do not count (a bank made from the weights, not part of them); `dtype`:
    the floating tensors read as cast to it (what they were before a cast that kept their values)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        if leave_out is not None and name.startswith(leave_out):
            continue
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}:{tensor_checksum(tensor)};".encode())
    return digest.hexdigest()


def model_weight_files(folder: str | Path) -> list[Path]:
    """The files transformers loads a model from: the shards its `model.safetensors.index.json` names, else
    `model.safetensors` (none: []). Other safetensors files beside them (`model_backup.safetensors`, a detector) are
    not the model's. A damaged index raises ValueError naming it."""
    folder = Path(folder)
    index = folder / INDEX_FILE
    if not index.exists():
        return [folder / SINGLE_FILE] if (folder / SINGLE_FILE).exists() else []
    try:
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(
            f"{index} is not a readable shard index (truncated or edited; it needs a 'weight_map' of tensor name -> "
            f"shard file): {type(error).__name__}: {error}"
        ) from None
    missing = [name for name in shards if not (folder / name).is_file()]
    if missing:
        raise ValueError(f"{index} names shard files that are not in {folder}: {missing}.")
    return [folder / name for name in shards]


def _model_part(data):
    if isinstance(data, dict):
        return {k: _model_part(v) for k, v in data.items() if not k.startswith("_") and k not in NOT_THE_MODEL}
    return [_model_part(item) for item in data] if isinstance(data, list) else data


def config_digest(folder: str | Path) -> str | None:
    """SHA-256 (hex) of what `folder/config.json` says about the model (`NOT_THE_MODEL` left out; key order and
    formatting do not count); None where the folder has no config.json. A damaged one raises ValueError naming it."""
    path = Path(folder) / CONFIG_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise ValueError(f"{path} is not readable JSON (truncated or edited): {error}") from None
    return hashlib.sha256(json.dumps(_model_part(data), sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def add_checksums(folder: str | Path) -> list[Path]:
    """Rewrites the model weight files in `folder` (`model_weight_files`) with a checksum of each tensor and the
    `config_digest` of the folder's config.json in their metadata (the tensors and the other metadata unchanged);
    returns the files. Run it again after the package edits a saved config.json."""
    files = model_weight_files(folder)
    config = config_digest(folder)
    for path in files:
        tensors, metadata = read_safetensors(path)
        recorded = {**metadata, **checksum_metadata(tensors), **({CONFIG_KEY: config} if config is not None else {})}
        if recorded != metadata:  # a file that already records all this is left as it is (its time stamp too)
            save_file(tensors, str(path), metadata=recorded)
    return files


def weights_digest(folder: str | Path) -> str | None:
    """SHA-256 (hex) over the tensor checksums recorded in a folder's model weight files: which weights the folder
    holds (the value a text model's k-NN bank records as `weights_sha256`). None where the folder has no weights, or
    a file without checksums or unreadable (its weights cannot be told apart from others)."""
    try:
        files = model_weight_files(folder)
    except ValueError:  # a damaged shard index
        return None
    digest = hashlib.sha256()
    for path in files:
        try:
            with safe_open(str(path), framework="pt") as handle:
                recorded = (handle.metadata() or {}).get(METADATA_KEY)
        except (SafetensorError, OSError):
            return None
        if recorded is None:
            return None
        digest.update(recorded.encode() + b";")
    return digest.hexdigest() if files else None


def check_config_pairing(folder: str | Path) -> None:
    """Refuses a folder whose config.json is not the one its weights were saved with (`CONFIG_KEY` in their
    metadata), naming both files and the way out. Weights without that record are not checked."""
    folder = Path(folder)
    found = config_digest(folder)
    for path in model_weight_files(folder):
        with safe_open(str(path), framework="pt") as handle:
            expected = (handle.metadata() or {}).get(CONFIG_KEY)
        if expected is not None and expected != found:
            raise ValueError(
                f"{folder / CONFIG_FILE} is not the config {path.name} was saved with (weights saved beside config "
                f"{expected[:12]}, this config.json is {str(found)[:12]}): a save killed between config.json (written "
                "first) and the weights, or a config.json copied or edited by hand. Save the model again; to load "
                "these weights with this config on purpose, pass check_config_pairing=False."
            )


def read_verified(path: str | Path) -> tuple[dict[str, torch.Tensor], int]:
    """(tensors, how many were checked) of one safetensors file, each tensor compared with the checksum in its
    metadata (0 checked for a file saved without checksums). Raises ValueError naming the file and the first tensor
    that differs, or the file when it cannot be read."""
    tensors, metadata = read_safetensors(Path(path))
    if METADATA_KEY not in metadata:
        return tensors, 0
    expected = json.loads(metadata[METADATA_KEY])
    for name in sorted(expected):
        if name not in tensors:
            raise ValueError(f"{path}: the tensor {name!r} listed in its checksums is missing; the file is damaged.")
        if tensor_checksum(tensors[name]) != expected[name]:
            raise ValueError(
                f"{path}: the tensor {name!r} does not match its checksum; the file was changed or damaged after "
                "it was saved (restore it from a good copy)."
            )
    return tensors, len(expected)


def verify_checksums(path: str | Path, config: bool = True) -> int:
    """Reads a safetensors file (or a folder's model weight files) and compares each tensor with the checksum in its
    metadata (`read_verified`), and for a folder, when `config`, its config.json with the one the weights were saved
    with (`check_config_pairing`). Returns how many tensors were checked (0 for files saved without checksums)."""
    path = Path(path)
    files = model_weight_files(path) if path.is_dir() else [path]
    checked = sum(read_verified(file)[1] for file in files)
    if config and path.is_dir():
        check_config_pairing(path)
    return checked

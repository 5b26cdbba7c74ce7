"""A checksum of every tensor in a safetensors file's metadata, written on save and verified on load.

safetensors itself checks the header, not the data: bytes overwritten inside a file load as whatever they now
encode (NaN weights, silently). Files saved without checksums (earlier releases, other tools) still load.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

METADATA_KEY = "insub_hf_sha256"
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


def weights_fingerprint(module: torch.nn.Module) -> str:
    """SHA-256 (hex) over a module's state dict (names, dtypes, shapes and bytes): which trained weights these are."""
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
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


def add_checksums(folder: str | Path) -> list[Path]:
    """Rewrites the model weight files in `folder` (`model_weight_files`) with a checksum of each tensor in their metadata
    (the tensors and the other metadata unchanged); returns the files."""
    files = model_weight_files(folder)
    for path in files:
        tensors, metadata = read_safetensors(path)
        metadata.update(checksum_metadata(tensors))
        save_file(tensors, str(path), metadata=metadata)
    return files


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


def verify_checksums(path: str | Path) -> int:
    """Reads a safetensors file (or a folder's model weight files) and compares each tensor with the checksum in its
    metadata (`read_verified`). Returns how many tensors were checked (0 for files saved without checksums)."""
    path = Path(path)
    files = model_weight_files(path) if path.is_dir() else [path]
    return sum(read_verified(file)[1] for file in files)

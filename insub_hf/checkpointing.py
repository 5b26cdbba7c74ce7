"""Saving that never leaves a good checkpoint half-overwritten."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path


def save_pretrained_atomic(model, path: str | os.PathLike, **save_kwargs) -> Path:
    """`model.save_pretrained(path)` written to a sibling temporary folder first, then swapped in.

    If saving fails (disk full, interrupt, an exception in the model), `path` keeps whatever checkpoint it held
    and the temporary folder is removed. Returns the final path.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        model.save_pretrained(tmp, **save_kwargs)
        if not any(tmp.glob("*.safetensors")):
            raise RuntimeError(f"save_pretrained wrote no safetensors file into {tmp}.")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = path.with_name(f".{path.name}.old-{uuid.uuid4().hex[:8]}")
    if path.exists():
        path.rename(old)
    tmp.rename(path)
    shutil.rmtree(old, ignore_errors=True)
    return path

"""Saving that never leaves a good checkpoint half-overwritten, and resuming only from complete checkpoints."""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

logger = logging.getLogger(__name__)


@contextmanager
def atomic_folder(path: str | os.PathLike) -> Iterator[Path]:
    """Yields a sibling temporary folder to write into; on success it replaces `path`, on any failure it is removed
    and `path` keeps whatever it held."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(
            f"{str(path)!r} is an existing file, not a folder: a model folder would replace it; choose another path."
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_interrupted_saves(path)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = path.with_name(f".{path.name}.old-{uuid.uuid4().hex[:8]}")
    if path.exists():
        path.rename(old)
    tmp.rename(path)
    shutil.rmtree(old, ignore_errors=True)


def clean_interrupted_saves(path: str | os.PathLike) -> list[Path]:
    """Removes what a save into `path` killed half-way left beside it (`.<name>.tmp-*`, `.<name>.old-*`); a process
    killed between moving the old folder aside and moving the new one in left `path` missing: the old folder is put
    back (the new one may be incomplete). Returns the folders removed."""
    path = Path(path)
    removed = []
    for old in sorted(path.parent.glob(f".{path.name}.old-*")):
        if not path.exists():
            old.rename(path)
            logger.warning("Restored %s from %s, which an interrupted save had moved aside.", path, old.name)
            continue
        shutil.rmtree(old, ignore_errors=True)
        removed.append(old)
    for tmp in sorted(path.parent.glob(f".{path.name}.tmp-*")):
        shutil.rmtree(tmp, ignore_errors=True)
        removed.append(tmp)
    if removed:
        logger.warning("Removed %d folder(s) an interrupted save left beside %s: %s", len(removed), path,
                       [p.name for p in removed])
    return removed


def save_pretrained_atomic(model, path: str | os.PathLike, processor=None, **save_kwargs) -> Path:
    """`model.save_pretrained(path)` (and `processor.save_pretrained(path)`: an image processor or tokenizer, so that
    the folder loads with `AutoImageProcessor` / `AutoTokenizer` and `pipeline()`) written to a sibling temporary
    folder first, then swapped in.

    If saving fails (disk full, interrupt, an exception in the model), `path` keeps whatever checkpoint it held
    and the temporary folder is removed. Returns the final path.
    """
    with atomic_folder(path) as tmp:
        if processor is not None:  # first: the model's remote code (if written) covers an InSub image processor
            processor.save_pretrained(tmp)
        model.save_pretrained(tmp, **save_kwargs)
        if not any(tmp.glob("*.safetensors")):
            raise RuntimeError(f"save_pretrained wrote no safetensors file into {tmp}.")
    return Path(path)


def checkpoint_problems(path: str | os.PathLike) -> list[str]:
    """What a Trainer checkpoint folder lacks to be resumed from (empty when complete).

    The Trainer writes `trainer_state.json` last, so a save interrupted half-way leaves a folder without it (or with
    it cut short); the weights must be safetensors with every shard of their index present.
    """
    path = Path(path)
    if not path.is_dir():
        return [f"{path} is not a folder"]
    problems = []
    try:
        json.loads((path / "trainer_state.json").read_text())
    except (OSError, ValueError):
        problems.append("trainer_state.json (written last) is missing or cut short")
    if not (path / "config.json").is_file():
        problems.append("config.json is missing")
    index = path / "model.safetensors.index.json"
    if index.is_file():
        shards = set(json.loads(index.read_text())["weight_map"].values())
        if any(not (path / shard).is_file() for shard in shards):
            problems.append("weight shards are missing")
    elif not (path / "model.safetensors").is_file():
        problems.append("model.safetensors is missing")
    return problems


def last_complete_checkpoint(output_dir: str | os.PathLike) -> str | None:
    """The highest-step `checkpoint-*` folder under `output_dir` that `checkpoint_problems` finds complete."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return None
    steps = sorted(
        (int(p.name.split("-")[-1]), p) for p in output_dir.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()
    )
    for step, path in reversed(steps):
        problems = checkpoint_problems(path)
        if not problems:
            return str(path)
        logger.warning("Skipping the incomplete checkpoint %s: %s.", path, "; ".join(problems))
    return None

"""Saving that never leaves a good checkpoint half-overwritten, and resuming only from complete checkpoints."""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .checksums import model_weight_files, weights_digest
from .compat import FORMER_DERIVED_FILES, warn_former

logger = logging.getLogger(__name__)


# The weights of a model save: a save that writes weights replaces these, stale shards and index included (as
# transformers' save_pretrained removes them), so that an old index never names another save's shards.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "model-*-of-*.safetensors")


def _link_or_copy(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """A hard link of `source` at `target` (no data copied), or a copy where the file system has none."""
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError:
        shutil.copy2(source, target, follow_symlinks=False)


REBUILD = "fit the detector on the model (InSubOODDetector.fit(model, inputs)), whose bank save_pretrained keeps"


def derived_entries(folder: Path) -> list[str]:
    """The names of the files of `folder` made from its weights (`compat.FORMER_DERIVED_FILES`)."""
    return [name for name in FORMER_DERIVED_FILES if (folder / name).exists()]


def holds_weights(folder: Path) -> bool:
    """Whether `folder` holds model weight files (a damaged shard index counts as holding some)."""
    try:
        return bool(model_weight_files(folder))
    except ValueError:
        return True


def weights_replaced(before: str | None, folder: Path, had_weights: bool) -> bool:
    """Whether a save put other weights into `folder` than the ones of digest `before` (which it held when
    `had_weights`): what was derived from them no longer belongs."""
    return had_weights and (before is None or before != weights_digest(folder))


def forget_derived(folder: Path, names: list[str]) -> None:
    """Removes the derived files `names`, which the save left out or removes now, and says what went and how to
    rebuild it."""
    for name in names:
        (folder / name).unlink(missing_ok=True)
    if names:
        logger.warning("Removed %s from %s: made from the weights this save replaced. To have them again, %s.",
                       ", ".join(names), folder, REBUILD)
        warn_former(f"A separate OOD detector file ({', '.join(names)})", "the k-NN bank in the model's weights")


def keep_what_the_save_did_not_write(old: Path, new: Path) -> None:
    """Puts into `new` every entry of `old` that `new` does not hold (hard links: `old` stays whole until the swap),
    except stale weight files (`WEIGHT_FILES`) when `new` holds weights, and what was made from the old weights
    (`derived_entries`) when the new ones differ."""
    wrote_weights = any(any(new.glob(pattern)) for pattern in WEIGHT_FILES)
    stale = []
    if wrote_weights and weights_replaced(weights_digest(old), new, holds_weights(old)):
        stale = [name for name in derived_entries(old) if not (new / name).exists()]
    for entry in old.iterdir():
        target = new / entry.name
        if target.exists() or target.is_symlink() or entry.name in stale:
            continue
        if wrote_weights and any(fnmatch.fnmatch(entry.name, pattern) for pattern in WEIGHT_FILES):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, target, symlinks=True, copy_function=_link_or_copy)
        else:
            _link_or_copy(entry, target)
    if stale:
        both = all((folder / "modules.json").is_file() for folder in (old, new))
        if both and os.path.samefile(new / "modules.json", old / "modules.json"):
            (new / "modules.json").unlink()  # a link to the old folder's file: rewritten, not edited in place
            shutil.copyfile(old / "modules.json", new / "modules.json")
        forget_derived(new, stale)


def write_json(path: str | os.PathLike, data, sort_keys: bool = False) -> None:
    """Writes `data` as indented JSON through a temporary sibling file, so `path` is never left half-written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=sort_keys))
    os.replace(tmp, path)


@contextmanager
def atomic_folder(path: str | os.PathLike) -> Iterator[Path]:
    """Yields a sibling temporary folder to write into; on success it replaces `path`, keeping whatever `path` held
    that the save did not write (`keep_what_the_save_did_not_write`); on any failure it is removed and `path` keeps
    whatever it held."""
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
        if path.exists():
            keep_what_the_save_did_not_write(path, tmp)
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
    folder first, then swapped in. What `path` held that this save does not write (notes, results, a detector, other
    runs) stays, as with transformers' `save_pretrained`; stale weight shards go.

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

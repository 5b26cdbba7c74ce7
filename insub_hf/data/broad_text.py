"""Broad natural English for a text model's k-NN bank: a pinned pool of sentences of five registers (messages: the
bundled pretraining tweets; a dictionary's definitions and examples: WordNet; quotations, jokes and literature:
fortunes; software documentation: Debian package descriptions; licence text), `bundled/broad_english.csv.gz`, built
once by `bundled/build_broad_text.py` beside it. Every machine draws the same bank from it; the release's card
names the file's SHA-256 (`pool_digest`)."""

from __future__ import annotations

import csv
import gzip
import hashlib
from pathlib import Path

import numpy as np

from ..validation import check_range

POOL = Path(__file__).with_name("bundled") / "broad_english.csv.gz"
# The SHA-256 of the pool every release draws from: a packaged pool with another digest is refused
PINNED_DIGEST = "dbaaef2ef59f15092fca67921a454e14c55d84dc777bd683165cbb48466755c4"
# The registers of the pool, in its order, and its columns
REGISTERS = ("messages", "dictionary", "quotations", "documentation", "licences")
COLUMNS = ["source", "sentence"]
_WAY_OUT = ("reinstall insub-hf (pip install --force-reinstall insub-hf), or build the pool again with "
            "python insub_hf/data/bundled/build_broad_text.py")


def pool_digest(path: Path = POOL) -> str:
    """The SHA-256 of the pool file: what a card records, so that a bank can be rebuilt exactly."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"broad_english: the pool {path} is missing: {_WAY_OUT}.")
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_pool(path: Path = POOL) -> dict[str, list[str]]:
    """The pool's sentences by register, in the file's order; the packaged pool only with its pinned digest, and
    any pool only whole: every register, its columns, readable to the end."""
    digest = pool_digest(path)
    if Path(path) == POOL and digest != PINNED_DIGEST:
        raise ValueError(f"broad_english: the pool {path} has SHA-256 {digest[:12]}..., not the pinned "
                         f"{PINNED_DIGEST[:12]}... every release draws from (the file was changed or damaged): "
                         f"{_WAY_OUT}.")
    out = {name: [] for name in REGISTERS}
    try:
        with gzip.open(path, "rt", encoding="utf-8") as file:
            reader = csv.DictReader(file)
            if reader.fieldnames != COLUMNS:
                raise ValueError(f"broad_english: the pool {path} has the columns {reader.fieldnames}; a pool has "
                                 f"{COLUMNS}: {_WAY_OUT}.")
            for row in reader:
                out.setdefault(row["source"], []).append(row["sentence"])
    except (OSError, EOFError, UnicodeDecodeError, csv.Error) as error:  # cut, emptied or not gzip
        raise ValueError(f"broad_english: the pool {path} cannot be read to its end ({type(error).__name__}: "
                         f"{error}): {_WAY_OUT}.") from None
    if missing := [name for name in REGISTERS if not out[name]]:
        raise ValueError(f"broad_english: the pool {path} has no sentences of the register(s) {missing} (a pool "
                         f"holds all of {list(REGISTERS)}): {_WAY_OUT}.")
    return out


def shares(available: dict[str, int], count: int) -> dict[str, int]:
    """How many of `count` sentences each source gives: equal parts, a source with fewer than its part giving all it
    has and the others sharing the rest equally (earlier sources take the remainder's odd ones)."""
    out, left, open_ = {}, count, sorted(available, key=lambda name: available[name])
    while open_:
        part = left // len(open_)
        name = open_[0]
        if available[name] >= part:  # every source left has enough: equal parts of what is left
            for i, name in enumerate(sorted(open_, key=list(available).index)):
                out[name] = part + (i < left % len(open_))
            return {name: out[name] for name in available}
        out[name], left = available[name], left - available[name]
        open_.pop(0)
    raise ValueError(f"broad_english: the pool gives {sum(available.values())} sentences, fewer than count={count}.")


def broad_english(count: int, seed: int = 0, path: Path = POOL) -> dict[str, list[str]]:
    """`count` distinct sentences of the pool at `path`, in equal parts where each register has enough (`shares`),
    a seeded draw of each one's sentences, by register."""
    check_range("broad_english: count", count, low=len(REGISTERS), integer=True)
    found = read_pool(path)
    rng = np.random.default_rng(seed)
    wanted = shares({name: len(items) for name, items in found.items()}, count)
    return {name: [items[i] for i in rng.permutation(len(items))[:wanted[name]]] for name, items in found.items()}

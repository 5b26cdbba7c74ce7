"""Broad natural English for a text model's k-NN bank, from what this package and Debian's packages carry offline:
messages (the bundled pretraining tweets), a dictionary's definitions and examples (WordNet, `wordnet-base`),
quotations, jokes and literature (`fortunes`), software documentation (the descriptions of the installed Debian
packages) and licence text (`/usr/share/common-licenses`), drawn in equal parts. The standard library's docstrings
stay out: they are the domain a release measures its bank on."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ..validation import check_range
from .text_corpus import load_tweet_sentiment

WORDNET_DIR = Path("/usr/share/wordnet")
FORTUNES_DIR = Path("/usr/share/games/fortunes")
LICENSES_DIR = Path("/usr/share/common-licenses")
DPKG_STATUS = Path("/var/lib/dpkg/status")
# A sentence of the bank: 20 to 200 characters, at least 4 words, mostly letters
SHORTEST, LONGEST, FEWEST_WORDS = 20, 200, 4


def split_sentences(text: str) -> list[str]:
    """The sentences of `text`: split after `.`, `!` or `?` and white space, each with its white space collapsed."""
    return [" ".join(s.split()) for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]


def is_sentence(text: str) -> bool:
    """Whether `text` reads as one sentence of prose: `SHORTEST` to `LONGEST` characters, `FEWEST_WORDS` words or
    more, at least 70 % of them letters or spaces."""
    letters = sum(c.isalpha() or c == " " for c in text)
    return (SHORTEST <= len(text) <= LONGEST and len(text.split()) >= FEWEST_WORDS
            and letters >= 0.7 * len(text))


def message_sentences() -> list[str]:
    """The bundled pretraining tweets."""
    return [t for t in load_tweet_sentiment("pretrain")["text"] if is_sentence(t)]


def dictionary_sentences(folder: Path = WORDNET_DIR) -> list[str]:
    """WordNet's glosses: each definition and each quoted example of `folder/data.{noun,verb,adj,adv}`."""
    out = []
    for part in ("noun", "verb", "adj", "adv"):
        for line in (folder / f"data.{part}").read_text(errors="ignore").splitlines():
            if " | " not in line:
                continue  # the licence header
            for piece in line.split(" | ", 1)[1].split(";"):
                piece = piece.strip().strip('"').strip()
                if is_sentence(piece):
                    out.append(piece)
    return out


def quotation_sentences(folder: Path = FORTUNES_DIR) -> list[str]:
    """The sentences of the fortune cookies in `folder` (each file without an extension: entries between `%` lines)."""
    out = []
    for path in sorted(p for p in folder.iterdir() if p.is_file() and not p.suffix):
        for entry in path.read_text(errors="ignore").split("\n%\n"):
            out.extend(s for s in split_sentences(entry) if is_sentence(s))
    return out


def licence_sentences(folder: Path = LICENSES_DIR) -> list[str]:
    """The sentences of the licence texts in `folder`."""
    out = []
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        out.extend(s for s in split_sentences(path.read_text(errors="ignore")) if is_sentence(s))
    return out


def documentation_sentences(status: Path = DPKG_STATUS) -> list[str]:
    """The sentences of the long descriptions of the Debian packages `status` (dpkg's database) lists."""
    out = []
    for entry in status.read_text(errors="ignore").split("\n\n"):
        lines = entry.splitlines()
        start = next((i for i, line in enumerate(lines) if line.startswith("Description:")), None)
        if start is None:
            continue
        body = []
        for line in lines[start + 1:]:
            if not line.startswith(" "):
                break
            body.append("" if line.strip() == "." else line.strip())  # " ." separates paragraphs
        for paragraph in "\n".join(body).split("\n\n"):
            out.extend(s for s in split_sentences(paragraph) if is_sentence(s))
    return out


# Each register of the bank, the sentences it gives, and the Debian package that carries it (None: the package's own)
BROAD_SOURCES = {
    "messages": (message_sentences, None),
    "dictionary": (dictionary_sentences, "wordnet-base"),
    "quotations": (quotation_sentences, "fortunes"),
    "documentation": (documentation_sentences, "dpkg"),
    "licences": (licence_sentences, "base-files"),
}


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
    raise ValueError(f"broad_english: the sources give {sum(available.values())} sentences, fewer than count={count}.")


def broad_english(count: int, seed: int = 0) -> dict[str, list[str]]:
    """`count` distinct sentences from `BROAD_SOURCES`, in equal parts where each source has enough (`shares`), a
    seeded draw of each one's distinct sentences, by source. Raises, naming the Debian packages to install, where a
    source is missing."""
    check_range("broad_english: count", count, low=len(BROAD_SOURCES), integer=True)
    found, missing = {}, []
    for name, (sentences, package) in BROAD_SOURCES.items():
        try:
            found[name] = sorted(set(sentences()))
        except OSError:
            missing.append(package)
    if missing:
        raise FileNotFoundError(f"broad_english needs Debian's {missing}: `apt-get install {' '.join(missing)}`.")
    rng = np.random.default_rng(seed)
    wanted = shares({name: len(items) for name, items in found.items()}, count)
    return {name: [items[i] for i in rng.permutation(len(items))[:wanted[name]]] for name, items in found.items()}

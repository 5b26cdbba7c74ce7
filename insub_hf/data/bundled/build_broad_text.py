"""Builds `broad_english.csv.gz` beside this file: the pool of broad natural English that a text model's k-NN bank is
drawn from (`insub_hf.data.broad_text`). Run once, on a Debian machine with `wordnet-base` and `fortunes`
installed: `python insub_hf/data/bundled/build_broad_text.py`. It reads the bundled pretraining tweets (messages),
WordNet's glosses (dictionary), the fortune cookies (quotations), the installed Debian packages' descriptions
(documentation) and Debian's licence texts (licences); every sentence of the small sources, a seeded draw of
`PER_SOURCE` of the large ones. The library reads only the file it writes, so every machine draws the same bank;
the file's SHA-256 goes on the text release's card. The standard library's docstrings stay out: they are the domain
a release measures its bank on.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import re
import sys
from pathlib import Path

import numpy as np

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


def message_sentences() -> list[str]:
    """The bundled pretraining tweets."""
    from insub_hf.data.text_corpus import load_tweet_sentiment

    return [t for t in load_tweet_sentiment("pretrain")["text"] if is_sentence(t)]


# Each register, the sentences it gives and the Debian package that carries it (None: insub-hf's own data)
SOURCES = {
    "messages": (message_sentences, None),
    "dictionary": (dictionary_sentences, "wordnet-base"),
    "quotations": (quotation_sentences, "fortunes"),
    "documentation": (documentation_sentences, "dpkg"),
    "licences": (licence_sentences, "base-files"),
}
# The most sentences a source keeps (a seeded draw above it): enough for equal parts of a 10,000-sentence bank
PER_SOURCE = 3000
OUTPUT = Path(__file__).with_name("broad_english.csv.gz")


def build(output: Path = OUTPUT, seed: int = 0) -> str:
    """Writes the pool (columns `source`, `sentence`; gzip without a time stamp or file name, so that the same
    sentences give the same bytes) and returns its SHA-256."""
    rows = []
    for name, (sentences, package) in SOURCES.items():
        try:
            found = sorted(set(sentences()))
        except OSError as error:
            sys.exit(f"build_broad_text: {name} needs Debian's {package} ({error}): apt-get install {package}")
        kept = found if len(found) <= PER_SOURCE else [
            found[i] for i in sorted(np.random.default_rng(seed).permutation(len(found))[:PER_SOURCE])]
        rows += [(name, sentence) for sentence in kept]
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(("source", "sentence"))
    writer.writerows(rows)
    with open(output, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as file:
        file.write(text.getvalue().encode("utf-8"))
    return hashlib.sha256(output.read_bytes()).hexdigest()


if __name__ == "__main__":
    print(f"wrote {OUTPUT} (sha256 {build()})")

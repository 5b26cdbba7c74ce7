"""Out-of-distribution text made from what ships offline: other kinds of text (shuffled words, Python code, DNA,
numeric tables, other languages) and near-domain English prose, for a model pretrained on English tweets.

Each maker returns `count` strings drawn with `seed`; `text_ood_sets` gathers them.
"""

from __future__ import annotations

import gettext
import gzip
import inspect
import io
import re
import sysconfig
import tokenize
from pathlib import Path

import numpy as np

from ..validation import check_range

# gettext catalogs of these languages (system translations of program messages: real sentences, not English)
OTHER_LANGUAGES = ("de", "fr", "es", "it", "pt", "nl", "pl", "sv", "fi", "tr", "cs", "hu")
LOCALE_DIR = Path("/usr/share/locale")


def _draw(items: list[str], count: int, seed: int, what: str) -> list[str]:
    check_range("count", count, low=1, integer=True)
    if len(items) < count:
        raise ValueError(f"{what}: {len(items)} strings were found, fewer than count={count}.")
    order = np.random.default_rng(seed).permutation(len(items))[:count]
    return [items[i] for i in order]


def shuffled_words(sentences: list[str], seed: int) -> list[str]:
    """Each sentence with its words in a seeded random order: the same words, no longer English."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.permutation(sentence.split())) for sentence in sentences]


def _stdlib_modules(limit: int = 400) -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.glob("*.py") if not p.name.startswith("_"))[:limit]


def _code_only(source: str) -> list[str]:
    """The lines of `source` outside multi-line strings (docstrings) and comments."""
    prose = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.STRING and token.end[0] > token.start[0]:
                prose.update(range(token.start[0], token.end[0] + 1))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return []
    return [line for number, line in enumerate(source.splitlines(), 1) if number not in prose]


def code_lines(count: int, seed: int = 0) -> list[str]:
    """Lines of Python source from the standard library (20 to 120 characters holding an operator or bracket;
    comments, docstrings and other strings spanning lines left out)."""
    lines = []
    for path in _stdlib_modules():
        for line in _code_only(path.read_text(errors="ignore")):
            line = line.strip()
            if 20 <= len(line) <= 120 and not line.startswith(("#", '"', "'")) and re.search(r"[=()\[\]:]", line):
                lines.append(line)
    return _draw(sorted(set(lines)), count, seed, "code_lines")


def english_prose(count: int, seed: int = 0) -> list[str]:
    """Near-domain text: English sentences that are not tweets, from the docstrings of the standard library's
    modules (prose of 30 to 200 characters, sentences without code)."""
    sentences = []
    for path in _stdlib_modules():
        for doc in re.findall(r'"""(.*?)"""', path.read_text(errors="ignore"), flags=re.S):
            for sentence in re.split(r"(?<=[.!?])\s+", inspect.cleandoc(doc).replace("\n", " ")):
                if 30 <= len(sentence) <= 200 and re.fullmatch(r"[A-Z][A-Za-z ,;:'()-]+[.!?]", sentence):
                    sentences.append(sentence)
    return _draw(sorted(set(sentences)), count, seed, "english_prose")


def dna_text(count: int, seed: int = 0, length: int = 80) -> list[str]:
    """Windows of `length` nucleotides from the bundled Drosophila upstream regions, as plain letters."""
    from ..data import bundled_upstream_path

    text = gzip.open(bundled_upstream_path(), "rt").read()
    sequences = ["".join(block.splitlines()[1:]) for block in text.split(">")[1:]]
    windows = [s[i : i + length] for s in sequences for i in range(0, len(s) - length + 1, length)]
    return _draw(windows, count, seed, "dna_text")


def table_rows(count: int, seed: int = 0) -> list[str]:
    """Rows of real numeric tables (scikit-learn's diabetes, wine and breast-cancer data) as comma-separated text."""
    from sklearn.datasets import load_breast_cancer, load_diabetes, load_wine

    rows = []
    for load in (load_diabetes, load_wine, load_breast_cancer):
        for row in load().data:
            rows.append(", ".join(f"{v:.4g}" for v in row[:12]))
    return _draw(rows, count, seed, "table_rows")


def other_languages(count: int, seed: int = 0, locale_dir: str | Path = LOCALE_DIR) -> list[str]:
    """Translated program messages (gettext catalogs of `OTHER_LANGUAGES` under `locale_dir`, 30 to 200 characters,
    without format fields). Raises FileNotFoundError where the system ships too few (a minimal container)."""
    sentences = []
    for language in OTHER_LANGUAGES:
        for path in sorted((Path(locale_dir) / language / "LC_MESSAGES").glob("*.mo")):
            try:
                with path.open("rb") as file:
                    catalog = gettext.GNUTranslations(file)._catalog
            except (OSError, UnicodeDecodeError):  # a catalog gettext cannot read (bad magic number, encoding)
                continue
            for key, value in catalog.items():
                if isinstance(value, str) and key and 30 <= len(value) <= 200 and "%" not in value and "{" not in value:
                    sentences.append(" ".join(value.split()))
    if len(set(sentences)) < count:
        raise FileNotFoundError(
            f"other_languages: {len(set(sentences))} translated messages under {locale_dir}, fewer than {count}; "
            "a system with gettext catalogs (e.g. Debian's) has thousands."
        )
    return _draw(sorted(set(sentences)), count, seed, "other_languages")


# name -> maker(count, seed); "shuffled" is made from the in-distribution sentences themselves
TEXT_OOD_MAKERS = {"code": code_lines, "dna": dna_text, "table": table_rows, "other_languages": other_languages,
                   "english_prose": english_prose}
NEAR_DOMAIN = ("english_prose",)


def text_ood_sets(in_sentences: list[str], count: int, seed: int = 0) -> dict[str, list[str]]:
    """`count` strings of each kind: `"shuffled"` (the words of `in_sentences[:count]` in a seeded order) and every
    maker of `TEXT_OOD_MAKERS` that this machine can feed (other languages need gettext catalogs)."""
    sets = {"shuffled": shuffled_words(list(in_sentences[:count]), seed)}
    for name, make in TEXT_OOD_MAKERS.items():
        try:
            sets[name] = make(count, seed)
        except FileNotFoundError as error:
            print(f"text_ood_sets: {name} left out ({error})")
    return sets

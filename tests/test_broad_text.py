"""The broad natural English of a text model's bank: the build script's parsers of each source, the pinned pool
(the same bytes on every build, the digest on the card), the equal parts and the seeded draw."""

import csv
import gzip
import hashlib
import importlib.util
import io

import pytest

from insub_hf.data import broad_text
from insub_hf.data.broad_text import POOL, REGISTERS, broad_english, pool_digest, read_pool, shares

SCRIPT = broad_text.POOL.with_name("build_broad_text.py")


def build_script():
    """The build script beside the pool, as a module (it is a script, not a module of the package)."""
    spec = importlib.util.spec_from_file_location("build_broad_text", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


WORDNET_LINES = """  1 This software and database is being provided to you, the LICENSEE, by
00005930 03 n 01 dwarf 0 001 @ 00004475 n 0000 | a plant or animal that is atypically small
00006024 03 n 01 heterotroph 0 002 @ 00004475 n 0000 | an organism that depends on complex organic substances for nutrition; "the cat is a heterotroph of some renown"
00006150 03 n 01 parent 0 002 @ 00004475 n 0000 | an organism (plant or animal); "x"
"""


def test_each_source_gives_the_sentences_of_its_files(tmp_path):
    script = build_script()
    dictionary_sentences, quotation_sentences = script.dictionary_sentences, script.quotation_sentences
    licence_sentences, documentation_sentences = script.licence_sentences, script.documentation_sentences
    split_sentences = script.split_sentences
    wordnet = tmp_path / "wordnet"
    wordnet.mkdir()
    for part in ("noun", "verb", "adj", "adv"):
        (wordnet / f"data.{part}").write_text(WORDNET_LINES if part == "noun" else "")
    assert dictionary_sentences(wordnet) == [  # definitions and quoted examples; the header and short pieces left out
        "a plant or animal that is atypically small",
        "an organism that depends on complex organic substances for nutrition",
        "the cat is a heterotroph of some renown",
        "an organism (plant or animal)",
    ]
    fortunes = tmp_path / "fortunes"
    fortunes.mkdir()
    (fortunes / "wisdom").write_text("A fool and his money are soon\nparted. So it goes, they say.\n%\n42 42 42 42 42 42\n%\n")
    (fortunes / "wisdom.dat").write_bytes(b"\x00\x01 not text")
    assert quotation_sentences(fortunes) == ["A fool and his money are soon parted.", "So it goes, they say."]
    licences = tmp_path / "licences"
    licences.mkdir()
    (licences / "MIT").write_text("Permission is hereby granted, free of charge. THE SOFTWARE IS PROVIDED AS IS.")
    assert licence_sentences(licences) == ["Permission is hereby granted, free of charge.",
                                           "THE SOFTWARE IS PROVIDED AS IS."]
    status = tmp_path / "status"
    status.write_text("Package: a\nDescription: short synopsis\n This package provides a small library.\n .\n It "
                      "also ships the manual pages for it.\nHomepage: x\n\nPackage: b\nVersion: 1\n")
    assert documentation_sentences(status) == ["This package provides a small library.",
                                               "It also ships the manual pages for it."]
    assert split_sentences("One.  Two?\nThree!") == ["One.", "Two?", "Three!"]


def test_the_parts_are_equal_where_each_source_has_enough():
    assert shares({"a": 10, "b": 10}, 7) == {"a": 4, "b": 3}
    assert shares({"a": 10, "b": 3, "c": 100}, 30) == {"a": 10, "b": 3, "c": 17}  # b all it has, a too, c the rest
    with pytest.raises(ValueError, match="the pool gives 13 sentences, fewer than count=30"):
        shares({"a": 10, "b": 3}, 30)


def fake_pool(path, per_register: int = 50):
    """A pool file of `per_register` sentences per register (and duplicates of none), written as the script does."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(("source", "sentence"))
    writer.writerows((name, f"{name} sentence number {i} of the fake pool.") for name in REGISTERS
                     for i in range(per_register))
    with gzip.GzipFile(path, "wb", mtime=0) as file:
        file.write(text.getvalue().encode())
    return path


def test_the_bank_is_a_seeded_draw_of_distinct_sentences_in_equal_parts(tmp_path):
    pool = fake_pool(tmp_path / "pool.csv.gz")
    drawn = broad_english(41, seed=3, path=pool)
    assert {name: len(part) for name, part in drawn.items()} == {"messages": 9, "dictionary": 8, "quotations": 8,
                                                                 "documentation": 8, "licences": 8}
    assert all(len(set(part)) == len(part) and all(s.startswith(name) for s in part) for name, part in drawn.items())
    assert broad_english(41, seed=3, path=pool) == drawn and broad_english(41, seed=4, path=pool) != drawn
    with pytest.raises(ValueError, match="the pool gives 250 sentences, fewer than count=300"):
        broad_english(300, path=pool)


def test_the_pinned_pool_is_what_the_card_names_and_every_machine_draws_the_same_bank():
    assert pool_digest() == hashlib.sha256(POOL.read_bytes()).hexdigest()
    pool = read_pool()
    assert list(pool) == list(REGISTERS) and all(len(set(part)) == len(part) > 500 for part in pool.values())
    first, second = broad_english(10_000, seed=0), broad_english(10_000, seed=0)  # two builds of one commit
    assert first == second and sum(map(len, first.values())) == 10_000


def test_the_library_reads_no_debian_file():
    source = broad_text.__file__
    text = open(source).read()
    assert "/var/lib/dpkg" not in text and "/usr/share" not in text


def test_the_build_script_writes_the_same_bytes_twice(tmp_path, monkeypatch):
    script = build_script()
    fake = {name: (lambda name=name: [f"{name} one of the sentences here.", f"{name} two of the sentences here."],
                   None) for name in REGISTERS}
    monkeypatch.setattr(script, "SOURCES", fake)
    digests = [script.build(tmp_path / f"pool{i}.csv.gz") for i in range(2)]
    assert digests[0] == digests[1] == pool_digest(tmp_path / "pool0.csv.gz")
    assert read_pool(tmp_path / "pool0.csv.gz")["licences"] == ["licences one of the sentences here.",
                                                                 "licences two of the sentences here."]


def write_pool(path, rows, header=("source", "sentence")):
    with gzip.open(path, "wt", encoding="utf-8", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(header)
        writer.writerows(rows)
    return path


WAY_OUT = r"reinstall insub-hf \(pip install --force-reinstall insub-hf\), or build the pool again"


def test_a_packaged_pool_with_another_digest_is_refused_naming_both(tmp_path, monkeypatch):
    rows = [(name, sentence) for name, sentences in read_pool().items() for sentence in sentences]
    rows[0] = (rows[0][0], rows[0][1] + " (changed)")  # one sentence
    changed = write_pool(tmp_path / "broad_english.csv.gz", rows)
    monkeypatch.setattr(broad_text, "POOL", changed)
    with pytest.raises(ValueError, match=rf"the pool {changed} has SHA-256 {pool_digest(changed)[:12]}\.\.\., not the "
                                         rf"pinned {broad_text.PINNED_DIGEST[:12]}\.\.\. every release draws from .*"
                                         rf"{WAY_OUT}"):
        read_pool(changed)
    assert pool_digest(POOL) == broad_text.PINNED_DIGEST  # the one installed is the pinned one


@pytest.mark.parametrize("damage", ["register removed", "another header", "missing", "half", "header only", "empty"])
def test_a_damaged_pool_is_refused_naming_the_file_and_the_way_out(tmp_path, damage):
    rows = [(name, f"sentence {i} of {name}") for name in REGISTERS for i in range(3)]
    path = tmp_path / "pool.csv.gz"
    if damage == "register removed":
        write_pool(path, [row for row in rows if row[0] != "licences"])
        expected = r"has no sentences of the register\(s\) \['licences'\]"
    elif damage == "another header":
        write_pool(path, rows, header=("register", "text"))
        expected = r"has the columns \['register', 'text'\]; a pool has \['source', 'sentence'\]"
    elif damage == "missing":
        expected = r"is missing"
    elif damage == "half":
        data = write_pool(tmp_path / "whole.csv.gz", rows * 200).read_bytes()
        path.write_bytes(data[:len(data) // 2])
        expected = r"cannot be read to its end \((EOFError|BadGzipFile|OSError)"
    elif damage == "header only":
        write_pool(path, [])
        expected = r"has no sentences of the register\(s\) \['messages', "
    else:
        path.write_bytes(b"")
        expected = r"has the columns None"
    error = FileNotFoundError if damage == "missing" else ValueError
    with pytest.raises(error, match=rf"broad_english: the pool {path} {expected}.*{WAY_OUT}"):
        broad_english(10, path=path)

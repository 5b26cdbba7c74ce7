"""The broad natural English of a text model's bank: each source parsed from its files, the equal parts, the seeded
draw, and a missing Debian package named before any training."""

import pytest

from insub_hf.data import broad_text
from insub_hf.data.broad_text import (
    broad_english, dictionary_sentences, documentation_sentences, licence_sentences, quotation_sentences, shares,
    split_sentences,
)

from .conftest import cli_error

WORDNET_LINES = """  1 This software and database is being provided to you, the LICENSEE, by
00005930 03 n 01 dwarf 0 001 @ 00004475 n 0000 | a plant or animal that is atypically small
00006024 03 n 01 heterotroph 0 002 @ 00004475 n 0000 | an organism that depends on complex organic substances for nutrition; "the cat is a heterotroph of some renown"
00006150 03 n 01 parent 0 002 @ 00004475 n 0000 | an organism (plant or animal); "x"
"""


def test_each_source_gives_the_sentences_of_its_files(tmp_path):
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
    with pytest.raises(ValueError, match="the sources give 13 sentences, fewer than count=30"):
        shares({"a": 10, "b": 3}, 30)


def fake_sources(monkeypatch, missing: str | None = None):
    def source(name):
        def sentences():
            if name == missing:
                raise FileNotFoundError(name)
            return [f"{name} sentence number {i} of the fake source." for i in range(50)] + [f"{name} duplicate one."] * 5
        return sentences

    monkeypatch.setattr(broad_text, "BROAD_SOURCES", {name: (source(name), package) for name, (_, package)
                                                      in broad_text.BROAD_SOURCES.items()})


def test_the_bank_is_a_seeded_draw_of_distinct_sentences_in_equal_parts(monkeypatch):
    fake_sources(monkeypatch)
    drawn = broad_english(41, seed=3)
    assert {name: len(part) for name, part in drawn.items()} == {"messages": 9, "dictionary": 8, "quotations": 8,
                                                                 "documentation": 8, "licences": 8}
    assert all(len(set(part)) == len(part) and all(s.startswith(name) for s in part) for name, part in drawn.items())
    assert broad_english(41, seed=3) == drawn and broad_english(41, seed=4) != drawn


def test_a_missing_source_is_named_with_its_debian_package(monkeypatch):
    fake_sources(monkeypatch, missing="quotations")
    with pytest.raises(FileNotFoundError, match=r"broad_english needs Debian's \['fortunes'\]: `apt-get install fortunes`"):
        broad_english(40)


@pytest.mark.slow
def test_the_text_release_refuses_a_missing_source_before_any_training(monkeypatch, tmp_path, capsys):
    fake_sources(monkeypatch, missing="dictionary")
    error = cli_error(["release", "text", "--output_dir", str(tmp_path / "out"), "--model_cards",
                       str(tmp_path / "cards")], capsys)
    assert "broad_english needs Debian's ['wordnet-base']: `apt-get install wordnet-base`" in error
    assert not (tmp_path / "out").exists()

"""The OOD text sets: real strings of each kind, seeded, and a clear word where the system lacks one."""

import re

import pytest

from insub_hf.evaluation.text_ood_sets import (
    TEXT_OOD_MAKERS,
    code_lines,
    dna_text,
    english_prose,
    other_languages,
    shuffled_words,
    table_rows,
    text_ood_sets,
)


@pytest.mark.parametrize("make", [code_lines, dna_text, table_rows, english_prose], ids=lambda f: f.__name__)
def test_each_maker_draws_distinct_strings_by_its_seed(make):
    first, again, other = make(50, seed=0), make(50, seed=0), make(50, seed=1)
    assert len(first) == len(set(first)) == 50 and all(isinstance(s, str) and s.strip() for s in first)
    assert first == again and first != other


def test_the_sets_are_what_they_say():
    assert all(re.fullmatch(r"[acgtn]{80}", s.lower()) for s in dna_text(20))
    assert all(re.fullmatch(r"-?[\d.e+-]+(, -?[\d.e+-]+)+", s) for s in table_rows(20))
    assert all(s[0].isupper() and s[-1] in ".!?" and "(" not in s[:1] for s in english_prose(20))
    assert sum(any(k in s for k in ("=", "(", "self", "return", "import", ":")) for s in code_lines(50)) >= 45


def test_shuffled_words_keep_the_words_in_another_order():
    sentences = ["the cat sat on the warm mat today", "one two three four five six"]
    shuffled = shuffled_words(sentences, seed=0)
    assert [sorted(s.split()) for s in shuffled] == [sorted(s.split()) for s in sentences]
    assert shuffled != sentences and shuffled == shuffled_words(sentences, seed=0)


def test_other_languages_need_gettext_catalogs_and_the_sets_leave_them_out_without(tmp_path, monkeypatch, capsys):
    with pytest.raises(FileNotFoundError, match=r"other_languages: 0 translated messages under .*, fewer than 10"):
        other_languages(10, locale_dir=tmp_path)
    monkeypatch.setitem(TEXT_OOD_MAKERS, "other_languages",
                        lambda count, seed: other_languages(count, seed, locale_dir=tmp_path))
    sets = text_ood_sets(["a b c", "d e f", "g h i"], count=3)
    assert "other_languages" not in sets and "other_languages left out" in capsys.readouterr().out
    assert set(sets) == {"shuffled", "code", "dna", "table", "english_prose"} and all(len(v) == 3 for v in sets.values())


def test_a_count_larger_than_the_source_is_refused():
    with pytest.raises(ValueError, match=r"table_rows: 1189 strings were found, fewer than count=5000"):
        table_rows(5000)

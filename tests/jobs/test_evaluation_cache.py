"""The comparison's evaluation cache: entries round-trip exactly, damaged arrays are refused naming the file."""

import pytest
import torch

from insub_hf.evaluation.metrics.ece import ReliabilityBins
from insub_hf.evaluation.results import MethodResults, Metrics
from insub_hf.jobs.evaluation_cache import EvaluationCache


def entry():
    results = MethodResults(members=1, test=Metrics(accuracy=0.8, nll=0.5, ece=0.03, tace=0.02, brier=0.3))
    bins = ReliabilityBins(**{name: torch.rand(15) for name in ReliabilityBins.__dataclass_fields__})
    arrays = {"reliability": bins, "scores": {"in": {"msp": torch.rand(50)}, "uniform": {"msp": torch.rand(20)}}}
    return results, arrays


def test_an_entry_round_trips_and_damaged_arrays_are_refused(tmp_path):
    cache = EvaluationCache(tmp_path)
    results, arrays = entry()
    cache.store("k", results, arrays, 1.5)
    loaded, again, seconds = cache.load("k")
    assert loaded == results and seconds == 1.5
    torch.testing.assert_close(again["scores"]["in"]["msp"], arrays["scores"]["in"]["msp"], rtol=0, atol=0)
    path = tmp_path / "k" / "arrays.safetensors"
    data = bytearray(path.read_bytes())
    data[-8:] = b"\x00\x00\xc0\x7f" * 2  # the last scores overwritten with NaN: the header still parses
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"arrays.safetensors: the tensor .* does not match its checksum.*Remove the "
                                         r"cache entry"):
        cache.load("k")


def test_arrays_without_checksums_are_evaluated_again(tmp_path):
    from safetensors.torch import save_file

    cache = EvaluationCache(tmp_path)
    results, arrays = entry()
    cache.store("k", results, arrays, 1.0)
    save_file({"scores/in/msp": torch.rand(50)}, str(tmp_path / "k" / "arrays.safetensors"))  # no checksums
    calls = []
    cache.get("k", lambda: calls.append(1) or (results, arrays))
    assert calls == [1] and cache.load("k") is not None


@pytest.mark.parametrize("damage, message", [
    (lambda text: text[: len(text) // 2], r"numbers.json is not whole JSON \(cut or edited after it was written\)"),
    (lambda text: text.replace('"accuracy": 0.8', '"accuracy": NaN'),
     r"numbers.json does not match its checksum \(edited after it was written\)"),
])
def test_numbers_cut_or_edited_are_refused_naming_the_entry(tmp_path, damage, message):
    cache = EvaluationCache(tmp_path)
    cache.store("k", *entry(), 1.0)
    path = tmp_path / "k" / "numbers.json"
    edited = damage(path.read_text())
    assert edited != path.read_text()
    path.write_text(edited)
    with pytest.raises(ValueError, match=message + f".*Remove the cache entry {tmp_path / 'k'} to evaluate it again"):
        cache.get("k", lambda: pytest.fail("a damaged entry is refused, not evaluated over"))


def test_numbers_emptied_or_without_a_checksum_are_evaluated_again(tmp_path):
    import json

    cache = EvaluationCache(tmp_path)
    results, arrays = entry()
    for written in ({}, {"results": results.to_dict(), "evaluation_seconds": 1.0}):  # emptied; an older entry
        cache.store("k", results, arrays, 1.0)
        (tmp_path / "k" / "numbers.json").write_text(json.dumps(written))
        calls = []
        cache.get("k", lambda: calls.append(1) or (results, arrays))
        assert calls == [1] and cache.load("k")[0] == results

import pytest
import torch

from insub_hf import InSubForPreTraining
from insub_hf.checkpointing import save_pretrained_atomic

from .conftest import tiny_config


def test_atomic_save_replaces_a_checkpoint_only_when_the_new_one_is_complete(tmp_path, monkeypatch):
    target = tmp_path / "model"
    good = InSubForPreTraining(tiny_config())
    save_pretrained_atomic(good, target)
    saved = (target / "model.safetensors").read_bytes()

    other = InSubForPreTraining(tiny_config())

    def broken_save(path, **kwargs):
        path.mkdir(parents=True)
        (path / "model.safetensors").write_bytes(b"half-written")
        raise OSError("disk full")

    monkeypatch.setattr(other, "save_pretrained", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_pretrained_atomic(other, target)
    assert (target / "model.safetensors").read_bytes() == saved
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temporary folder left behind
    reloaded = InSubForPreTraining.from_pretrained(target)
    for a, b in zip(reloaded.state_dict().values(), good.state_dict().values()):
        assert torch.equal(a, b)

    monkeypatch.undo()
    save_pretrained_atomic(other, target)
    assert (target / "model.safetensors").read_bytes() != saved
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_atomic_save_refuses_a_path_that_is_a_file_and_leaves_it_alone(tmp_path):
    target = tmp_path / "model"
    target.write_bytes(b"a file the user keeps")
    with pytest.raises(NotADirectoryError, match=f"{str(target)!r} is an existing file, not a folder"):
        save_pretrained_atomic(InSubForPreTraining(tiny_config()), target)
    assert target.read_bytes() == b"a file the user keeps"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no temporary folder left

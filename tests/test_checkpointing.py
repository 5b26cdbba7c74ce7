from pathlib import Path

import pytest
import torch

from insub_hf import InSubForPreTraining
from insub_hf.checkpointing import clean_interrupted_saves, save_pretrained_atomic

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


def test_the_next_save_cleans_up_what_a_killed_save_left_and_restores_a_model_moved_aside(tmp_path):
    target = tmp_path / "model"
    first = InSubForPreTraining(tiny_config())
    save_pretrained_atomic(first, target)
    saved = (target / "model.safetensors").read_bytes()
    # killed while writing (SIGKILL runs no cleanup): a hidden half-written folder stays beside the model
    (tmp_path / ".model.tmp-deadbeef").mkdir()
    (tmp_path / ".model.tmp-deadbeef" / "model.safetensors").write_bytes(b"half")
    # killed between moving the good model aside and moving the new one in: the model folder is missing
    target.rename(tmp_path / ".model.old-cafef00d")
    assert clean_interrupted_saves(target) == [tmp_path / ".model.tmp-deadbeef"]
    assert (target / "model.safetensors").read_bytes() == saved  # the good model is back
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    (tmp_path / ".model.tmp-0badc0de").mkdir()
    save_pretrained_atomic(InSubForPreTraining(tiny_config()), target)  # saving cleans up too
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_a_save_keeps_what_it_did_not_write_and_drops_stale_shards(tmp_path, monkeypatch):
    target = tmp_path / "run"
    (target / "models" / "baseline").mkdir(parents=True)
    (target / "notes.txt").write_text("kept")
    (target / "results.json").write_text('{"rows": []}')
    (target / "models" / "baseline" / "config.json").write_text("{}")
    # an earlier sharded save of another model: its index and shards would be stale beside the new weights
    (target / "model.safetensors.index.json").write_text('{"weight_map": {"x": "model-00001-of-00002.safetensors"}}')
    (target / "model-00001-of-00002.safetensors").write_bytes(b"old shard")
    model = InSubForPreTraining(tiny_config())
    save_pretrained_atomic(model, target)
    assert (target / "notes.txt").read_text() == "kept" and (target / "results.json").read_text() == '{"rows": []}'
    assert (target / "models" / "baseline" / "config.json").read_text() == "{}"
    assert not (target / "model.safetensors.index.json").exists()
    assert not (target / "model-00001-of-00002.safetensors").exists()
    reloaded = InSubForPreTraining.from_pretrained(target)
    for key, value in model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[key], value), key
    # a failed save changes nothing, the files it did not write included
    other = InSubForPreTraining(tiny_config())
    monkeypatch.setattr(other, "save_pretrained", lambda path, **kwargs: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError, match="disk full"):
        save_pretrained_atomic(other, target)
    assert (target / "notes.txt").read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


@pytest.mark.parametrize("atomic", [True, False])
def test_a_detector_beside_weights_goes_when_other_weights_are_saved_over_them(tmp_path, atomic):
    from insub_hf import InSubModel
    from insub_hf.checkpointing import save_pretrained_atomic

    from .conftest import tiny_config

    def save(model, folder):
        return save_pretrained_atomic(model, folder) if atomic else model.save_pretrained(folder)

    folder = tmp_path / "model"
    torch.manual_seed(0)
    first = InSubModel(tiny_config(num_heads=2))
    save(first, folder)
    for name in ("ood_detector.json", "ood_detector.safetensors", "notes.txt"):
        (folder / name).write_text(name)
    save(first, folder)  # the same weights: what was made from them stays
    assert {"ood_detector.json", "ood_detector.safetensors", "notes.txt"} <= {p.name for p in folder.iterdir()}
    torch.manual_seed(1)
    save(InSubModel(tiny_config(num_heads=2)), folder)
    names = {p.name for p in folder.iterdir()}
    assert "notes.txt" in names and not names & {"ood_detector.json", "ood_detector.safetensors"}



@pytest.mark.parametrize("atomic", [True, False])
def test_a_folder_of_1f927d4_loaded_and_saved_into_itself_keeps_its_detector_files(tmp_path, atomic):
    """`fixtures/folder_of_1f927d4`: a tiny model and its `InSubOODDetector` saved by insub-hf at 1f927d4
    (`ood_detector.*` beside the weights, config keys of that version). Loaded with from_pretrained and saved back
    into the same folder, its weights are the ones the detector was made from, so its files stay, byte for byte,
    and the folder loads to the same tensors."""
    import shutil

    import insub_hf.compat as compat
    from insub_hf import InSubModel
    from insub_hf.checkpointing import save_pretrained_atomic

    folder = tmp_path / "model"
    shutil.copytree(Path(__file__).parent / "fixtures" / "folder_of_1f927d4", folder)
    former = {name: (folder / name).read_bytes() for name in ("ood_detector.json", "ood_detector.safetensors")}
    compat._warned.clear()  # each former key warns once a process
    with pytest.warns(FutureWarning, match="the former form stops working in insub-hf"):
        loaded = InSubModel.from_pretrained(folder)
    save_pretrained_atomic(loaded, folder) if atomic else loaded.save_pretrained(folder)
    assert {name: (folder / name).read_bytes() for name in former} == former
    again = InSubModel.from_pretrained(folder)
    assert again.state_dict().keys() == loaded.state_dict().keys()
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, again.state_dict()[name]), name

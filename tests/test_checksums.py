"""Weights carry a checksum of every tensor; a changed, truncated or garbage file is refused, naming it."""

import hashlib
import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from insub_hf import InSubForPreTraining
from insub_hf.checksums import METADATA_KEY, tensor_checksum, verify_checksums

from .conftest import tiny_config


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(0)
    model = InSubForPreTraining(tiny_config(num_heads=2))
    model.save_pretrained(tmp_path / "model")
    return model, tmp_path / "model"


def test_every_tensor_has_its_checksum_and_the_model_loads_bit_exactly(saved):
    model, folder = saved
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        sums = json.loads(f.metadata()[METADATA_KEY])
        assert f.metadata()["format"] == "pt"  # the metadata transformers writes is kept
        assert set(sums) == set(f.keys())
        weight = f.get_tensor(sorted(f.keys())[0])
    assert sums[sorted(sums)[0]] == hashlib.sha256(weight.numpy().tobytes()).hexdigest()  # independent hash
    assert verify_checksums(folder) == len(sums)
    loaded = InSubForPreTraining.from_pretrained(folder)
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


def test_bytes_changed_inside_the_weights_are_refused_naming_file_and_tensor(saved):
    _, folder = saved
    path = folder / "model.safetensors"
    data = bytearray(path.read_bytes())
    header = 8 + int.from_bytes(data[:8], "little")
    with safe_open(str(path), framework="pt") as f:
        offsets = json.loads(bytes(data[8:header]))
    name = max((k for k in offsets if k != "__metadata__"), key=lambda k: offsets[k]["data_offsets"][0])
    start = header + offsets[name]["data_offsets"][0]
    data[start:start + 4] = b"\xff\xff\xff\xff"  # a NaN where a float32 weight was
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=f"{path}: the tensor '{name}' does not match its checksum"):
        InSubForPreTraining.from_pretrained(folder)


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_truncated_or_garbage_weights_file_is_refused_naming_it(saved, damage):
    _, folder = saved
    path = folder / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"not a safetensors file at all" * 10)
    with pytest.raises(ValueError, match=f"{path} is not a readable safetensors file"):
        InSubForPreTraining.from_pretrained(folder)


def test_weights_saved_without_checksums_still_load(saved):
    model, folder = saved
    path = folder / "model.safetensors"
    save_file(load_file(str(path)), str(path), metadata={"format": "pt"})  # as an earlier release wrote it
    assert verify_checksums(folder) == 0
    loaded = InSubForPreTraining.from_pretrained(folder)
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


def test_tensor_checksum_reads_the_stored_bytes():
    t = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)
    assert tensor_checksum(t) == hashlib.sha256(t.view(torch.int16).numpy().tobytes()).hexdigest()
    assert tensor_checksum(t.t()) != tensor_checksum(t)  # another layout of the values is another tensor


def test_a_missing_local_folder_is_named_as_such(tmp_path):
    missing = tmp_path / "runs" / "demo" / "model"
    with pytest.raises(FileNotFoundError, match=f"from_pretrained\\('{missing}'\\): no such local folder"):
        InSubForPreTraining.from_pretrained(str(missing))


def test_resuming_from_a_checkpoint_whose_weights_changed_is_refused(tmp_path):
    from insub_hf.training.trainer import InSubTrainer

    from .test_trainer import args, fixed_views

    dataset, _ = fixed_views(8)
    config = tiny_config(num_heads=2)
    InSubTrainer(model=InSubForPreTraining(config), args=args(tmp_path, max_steps=2, save_strategy="steps", save_steps=2),
                 train_dataset=dataset).train()
    weights = tmp_path / "checkpoint-2" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-8:] = b"\x00\x00\xc0\x7f" * 2  # two NaNs over the last weight's last values
    weights.write_bytes(bytes(data))
    trainer = InSubTrainer(model=InSubForPreTraining(config), args=args(tmp_path, max_steps=4), train_dataset=dataset)
    with pytest.raises(ValueError, match=f"{weights}: the tensor '.*' does not match its checksum"):
        trainer.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))


def test_a_safetensors_file_beside_the_model_is_not_part_of_it(saved):
    model, folder = saved
    backup = folder / "model_backup.safetensors"
    backup.write_bytes(b"an old copy, damaged" * 4)
    loaded = InSubForPreTraining.from_pretrained(folder)  # neither verified nor loaded as the model's
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in model.state_dict().items())
    loaded.save_pretrained(folder)  # nor rewritten with checksums on save
    assert backup.read_bytes() == b"an old copy, damaged" * 4


def _sharded(model, folder):
    model.save_pretrained(folder, max_shard_size="20KB")
    index = folder / "model.safetensors.index.json"
    assert len(set(json.loads(index.read_text())["weight_map"].values())) > 1
    return index


@pytest.mark.parametrize("damage", ["truncated", "no weight_map", "missing shard"])
def test_a_damaged_shard_index_is_refused_naming_it(tmp_path, damage):
    torch.manual_seed(0)
    model = InSubForPreTraining(tiny_config(num_heads=2))
    index = _sharded(model, tmp_path / "sharded")
    assert InSubForPreTraining.from_pretrained(tmp_path / "sharded").config.num_heads == 2
    text = index.read_text()
    if damage == "truncated":
        index.write_text(text[: len(text) // 2])
        expected = f"{index} is not a readable shard index"
    elif damage == "no weight_map":
        index.write_text(json.dumps({"metadata": {}}))
        expected = f"{index} is not a readable shard index .*KeyError: 'weight_map'"
    else:
        shard = sorted(set(json.loads(text)["weight_map"].values()))[-1]
        (tmp_path / "sharded" / shard).unlink()
        expected = f"{index} names shard files that are not in .*{shard}"
    with pytest.raises(ValueError, match=expected):
        InSubForPreTraining.from_pretrained(tmp_path / "sharded")


def _classifier(labels: list[str], seed: int):
    from insub_hf import InSubForImageClassification

    torch.manual_seed(seed)
    config = tiny_config(num_heads=2, num_labels=len(labels), id2label=dict(enumerate(labels)),
                         label2id={name: i for i, name in enumerate(labels)})
    return InSubForImageClassification(config)


def test_a_stock_trainer_save_killed_between_config_and_weights_is_refused_not_relabelled(tmp_path, monkeypatch):
    from transformers import Trainer, TrainingArguments

    from insub_hf import InSubForImageClassification

    folder = tmp_path / "classifier"
    _classifier(["cat", "dog"], 0).save_pretrained(folder)  # model A
    b = _classifier(["car", "bus"], 1)  # model B: same shapes, other labels and weights

    def killed(*args, **kwargs):  # the process dies after config.json, before the weights
        raise KeyboardInterrupt

    monkeypatch.setattr("transformers.modeling_utils.safe_save_file", killed)
    trainer = Trainer(model=b, args=TrainingArguments(output_dir=str(tmp_path / "run"), report_to="none", use_cpu=True))
    with pytest.raises(KeyboardInterrupt):
        trainer.save_model(str(folder))
    monkeypatch.undo()
    assert json.loads((folder / "config.json").read_text())["id2label"] == {"0": "car", "1": "bus"}
    with pytest.raises(ValueError, match=r"config\.json is not the config model\.safetensors was saved with .*a save "
                                         r"killed between config\.json \(written first\) and the weights"):
        InSubForImageClassification.from_pretrained(folder)
    # every loading path checks: an Auto class (which passes config=) and a config passed in refuse the pair too
    from transformers import AutoConfig, AutoModelForImageClassification

    for load in (lambda **kw: AutoModelForImageClassification.from_pretrained(folder, **kw),
                 lambda **kw: InSubForImageClassification.from_pretrained(folder, config=AutoConfig.from_pretrained(
                     folder), **kw)):
        with pytest.raises(ValueError, match=r"is not the config model\.safetensors was saved with .*pass "
                                             r"check_config_pairing=False"):
            load()
    # the way out the message names, on purpose
    model = AutoModelForImageClassification.from_pretrained(folder, check_config_pairing=False)
    assert model.config.id2label == {0: "car", 1: "bus"}
    # saved again whole, the pair loads
    trainer.save_model(str(folder))
    reloaded = InSubForImageClassification.from_pretrained(folder)
    for name, tensor in b.state_dict().items():
        assert torch.equal(reloaded.state_dict()[name], tensor), name


def test_the_config_digest_ignores_formatting_and_the_software_but_not_a_label(saved):
    from insub_hf.checksums import CONFIG_KEY, config_digest

    _, folder = saved
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        assert f.metadata()[CONFIG_KEY] == config_digest(folder)
    config = json.loads((folder / "config.json").read_text())
    before = config_digest(folder)
    config.update(transformers_version="0.0.1", auto_map={"AutoModel": "x.Y"}, _name_or_path="/home/me/run")
    (folder / "config.json").write_text(json.dumps(dict(reversed(list(config.items()))), indent=7))
    assert config_digest(folder) == before
    assert verify_checksums(folder) > 0
    config["uncertainty"]["direction"] = -1 if config["uncertainty"]["direction"] != -1 else 1
    (folder / "config.json").write_text(json.dumps(config))
    assert config_digest(folder) != before
    with pytest.raises(ValueError, match="is not the config model.safetensors was saved with"):
        verify_checksums(folder)
    assert verify_checksums(folder, config=False) > 0


def test_the_package_pairs_again_after_editing_a_saved_config(saved):
    from insub_hf.jobs.experiment import record_direction

    model, folder = saved
    record_direction(folder, -1)
    loaded = InSubForPreTraining.from_pretrained(folder)
    assert loaded.config.uncertainty["direction"] == -1

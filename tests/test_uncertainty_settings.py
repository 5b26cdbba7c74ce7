"""The uncertainty block of the config: its checks, and the one path by which a folder written before it (the six
flat keys of insub-hf up to commit aff1b3a) loads."""

import json

import pytest
import torch

from insub_hf import InSubConfig, InSubModel
from insub_hf.checksums import add_checksums
from insub_hf.compat import FORMER_CONFIG_KEYS as FORMER_KEYS
from insub_hf.uncertainty.settings import DEFAULT_K, UncertaintyConfig

from .conftest import tiny_config


def flattened(folder, k_without_bank: int | None = None) -> dict:
    """Rewrites `folder`'s config.json as insub-hf wrote it before the block (its checksums too); returns the block."""
    path = folder / "config.json"
    config = json.loads(path.read_text())
    block = config.pop("uncertainty")
    config.update({former: block[new] for former, new in FORMER_KEYS.items()})
    if k_without_bank is not None:
        config["knn_k"] = k_without_bank
    path.write_text(json.dumps(config))
    add_checksums(folder)
    return block


def test_the_block_has_one_default_k_and_is_checked_as_a_whole():
    config = InSubConfig(**tiny_config().to_dict())
    assert config.uncertainty == UncertaintyConfig().to_dict() and config.uncertainty["k"] == DEFAULT_K == 50
    with pytest.raises(ValueError, match=r"InSubConfig.uncertainty has no keys \['knn_k'\]; its keys are \['reading', "):
        InSubConfig(uncertainty={"knn_k": 3})
    with pytest.raises(ValueError, match=r"InSubConfig.uncertainty\['k'\] must be an integer >= 1 and <= 3, got 10"):
        InSubConfig(uncertainty={"reading": "knn", "k": 10, "bank_size": 3})
    with pytest.raises(ValueError, match=r"InSubConfig got the flat keys \['knn_bank_size', 'knn_k'\] of a former config beside `uncertainty`"):
        InSubConfig(uncertainty={"direction": 1}, knn_k=3, knn_bank_size=3)
    with pytest.raises(ValueError, match=r"must be a dict of UncertaintyConfig fields"):
        InSubConfig(uncertainty="knn")
    with pytest.raises(ValueError, match=r"uncertainty\['direction'\] must be one of \[1, -1, None\], got 0"):
        InSubConfig().set_uncertainty(direction=0)


def test_a_folder_written_before_the_block_loads_with_its_bank_k_and_direction(tmp_path):
    torch.manual_seed(0)
    model = InSubModel(tiny_config(num_heads=3, uncertainty={"direction": -1})).eval()
    train = torch.randn(10, 3, 32, 32)
    with torch.no_grad():
        model.set_bank(model(pixel_values=train).representation, k=4)
    model.save_pretrained(tmp_path)
    block = flattened(tmp_path)
    assert "uncertainty" not in json.loads((tmp_path / "config.json").read_text())
    loaded = InSubModel.from_pretrained(tmp_path).eval()
    assert loaded.config.uncertainty == block == {**block, "reading": "knn", "k": 4, "bank_size": 10, "direction": -1}
    test = torch.randn(5, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(loaded(pixel_values=test).uncertainty, model(pixel_values=test).uncertainty,
                                   rtol=0, atol=0)
    loaded.save_pretrained(tmp_path / "again")  # saved again: the block, no flat key
    saved = json.loads((tmp_path / "again" / "config.json").read_text())
    assert saved["uncertainty"] == block and not set(FORMER_KEYS) & set(saved)


def test_a_former_folder_without_a_bank_keeps_its_k_and_a_given_k_is_kept(tmp_path):
    InSubModel(tiny_config(num_heads=2, uncertainty={"direction": 1})).save_pretrained(tmp_path)
    flattened(tmp_path, k_without_bank=10)  # what every such folder said, for a bank it did not have
    loaded = InSubModel.from_pretrained(tmp_path)
    assert loaded.config.uncertainty["k"] == 10 and loaded.config.uncertainty["direction"] == 1
    assert InSubConfig(knn_k=7).uncertainty["k"] == 7  # given to a constructor: kept, never the default

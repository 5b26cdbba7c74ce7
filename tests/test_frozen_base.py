"""A checkpoint that leaves out its frozen base (`insub_hf/encoders/frozen_base.py`): saved without the base's tensors,
loaded back with the same outputs (by the package, and by repo id through a Hub on 127.0.0.1 in a fresh process
without it); a base with other weights refused; an encoder moved from its base saved whole; the field checked."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import BertConfig, BertModel

from insub_hf import InSubConfig, InSubModel, load_encoder_weights
from insub_hf.encoders.pretrained import MINILM_HUB_ID, hub_repo_of, packaged_minilm_path
from insub_hf.encoders.frozen_base import name_frozen_base

from .hub_server import LocalHub

TINY_BERT = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                 max_position_embeddings=64)
TOKENS = {"input_ids": torch.randint(1, 100, (4, 9), generator=torch.Generator().manual_seed(3)),
          "attention_mask": torch.ones(4, 9, dtype=torch.long)}


def save_base(folder: Path, seed: int) -> Path:
    torch.manual_seed(seed)
    BertModel(BertConfig(**TINY_BERT)).save_pretrained(folder)
    return folder


def model_over(base: Path, repo_id: str | None = None) -> InSubModel:
    """Three heads over the frozen `base`, which the config names as `repo_id` (default: the folder)."""
    torch.manual_seed(0)
    config = InSubConfig(encoder_config=BertConfig(**TINY_BERT).to_dict(), objective="scd", num_heads=3,
                         head_hidden_sizes=[16], head_output_size=8, pooling="mean", normalize_heads=False,
                         freeze_encoder=True)
    model = InSubModel(config).eval()
    load_encoder_weights(model, base)
    name_frozen_base(model, repo_id or str(base))
    return model


def outputs(model) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        out = model(**TOKENS)
    return {"representation": out.representation, "head_embeddings": out.head_embeddings}


def saved_keys(folder: Path) -> set[str]:
    with safe_open(folder / "model.safetensors", "pt") as f:
        return set(f.keys())


def test_a_save_leaves_the_base_out_and_loads_it_back(tmp_path):
    base = save_base(tmp_path / "base", seed=1)
    model = model_over(base)
    model.save_pretrained(tmp_path / "model")
    keys = saved_keys(tmp_path / "model")
    assert not [k for k in keys if k.startswith("encoder.model.")]
    assert {k for k in model.state_dict() if not k.startswith("encoder.model.")} <= keys  # heads and the rest
    loaded = InSubModel.from_pretrained(tmp_path / "model").eval()
    assert loaded.config.frozen_base == model.config.frozen_base
    for key, expected in outputs(model).items():
        assert torch.equal(outputs(loaded)[key], expected), key
    reference = BertModel.from_pretrained(base).state_dict()
    for key, tensor in loaded.encoder.model.state_dict().items():
        assert torch.equal(tensor, reference[key]), key


def test_a_base_with_other_weights_is_refused(tmp_path):
    base = save_base(tmp_path / "base", seed=1)
    model_over(base).save_pretrained(tmp_path / "model")
    save_base(base, seed=2)  # the repo's weights changed since the heads were trained
    with pytest.raises(ValueError, match=r"the weights of its frozen base .* are not the ones its heads were trained "
                                         r"on .*load the base's revision"):
        InSubModel.from_pretrained(tmp_path / "model")


def test_an_encoder_moved_from_its_base_is_saved_whole(tmp_path):
    model = model_over(save_base(tmp_path / "base", seed=1))
    recorded = dict(model.config.frozen_base)
    with torch.no_grad():
        model.encoder.model.embeddings.word_embeddings.weight.add_(0.5)  # e.g. fine-tuned
    model.save_pretrained(tmp_path / "model")
    assert {k for k in model.state_dict()} <= saved_keys(tmp_path / "model")
    assert json.loads((tmp_path / "model" / "config.json").read_text())["frozen_base"] is None
    assert model.config.frozen_base == recorded  # the model in memory keeps its record
    loaded = InSubModel.from_pretrained(tmp_path / "model").eval()
    for key, expected in outputs(model).items():
        assert torch.equal(outputs(loaded)[key], expected), key


def test_an_unreachable_base_is_named(tmp_path, monkeypatch):
    model_over(save_base(tmp_path / "base", seed=1), repo_id="nobody/no-such-base").save_pretrained(tmp_path / "model")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    with pytest.raises(OSError, match=r"its frozen base 'nobody/no-such-base' \(config.frozen_base"):
        InSubModel.from_pretrained(tmp_path / "model")


@pytest.mark.parametrize("value", [{"repo_id": "a/b"}, {"repo_id": "", "sha256": "0" * 64},
                                   {"repo_id": "a/b", "sha256": "xyz"}, "a/b"])
def test_the_field_is_checked_on_every_door(value):
    with pytest.raises(ValueError, match=r"InSubConfig.frozen_base must be None or \{'repo_id'"):
        InSubConfig(frozen_base=value)
    config = InSubConfig()
    with pytest.raises(ValueError, match=r"InSubConfig.frozen_base must be None"):
        config.frozen_base = value


def test_the_packaged_base_is_named_by_its_repo(tmp_path):
    assert hub_repo_of(packaged_minilm_path()) == MINILM_HUB_ID
    assert hub_repo_of(tmp_path) is None  # a folder of one's own: no repo to load it from, so saved whole
    assert hub_repo_of("org/base") == "org/base"


LOAD = """
import sys
sys.modules["insub_hf"] = None  # a user without insub-hf, loading by repo id
import torch
from transformers import AutoModel

expected = torch.load(sys.argv[1])
model = AutoModel.from_pretrained("someone/heads-only", trust_remote_code=True).eval()
assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
with torch.no_grad():
    out = model(**expected["tokens"])
for key in ("representation", "head_embeddings"):
    assert torch.equal(getattr(out, key), expected[key]), key
print("loaded")
"""


def folder_files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_by_repo_id_over_http_without_the_package(tmp_path):
    base = save_base(tmp_path / "base", seed=1)
    model = model_over(base, repo_id="someone/tiny-base")
    model.save_pretrained(tmp_path / "model", remote_code=True)
    torch.save({"tokens": TOKENS, **outputs(model)}, tmp_path / "expected.pt")
    with LocalHub() as hub:
        hub.repos["someone/tiny-base"] = ("a" * 40, folder_files(base))
        hub.repos["someone/heads-only"] = ("b" * 40, folder_files(tmp_path / "model"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        env.update(HF_ENDPOINT=hub.endpoint, HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_TELEMETRY="1",
                   HF_HUB_DISABLE_XET="1")
        run = subprocess.run([sys.executable, "-c", LOAD, str(tmp_path / "expected.pt")], env=env,
                             capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert "loaded" in run.stdout, run.stderr[-4000:]
        # the base came from its own repo, over HTTP
        assert any(method == "GET" and "/someone/tiny-base/resolve/" in path for method, path in hub.requests)

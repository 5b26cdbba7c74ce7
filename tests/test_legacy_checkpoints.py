"""Checkpoints saved before the objectives moved into `objective.*` (commit 171e067) still load: weights exactly,
outputs within float32 rounding (they were recorded on another machine, whose kernels round differently).

`fixtures/legacy` holds a tiny DINO and a tiny Self-GenomeNet checkpoint written by that code (teacher and centre
moved away from the student first, so a teacher that fails to load shows), the inputs, and the outputs that code
computed on them in eval mode.
"""

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from transformers import AutoModel

from insub_hf import InSubConfig, InSubForPreTraining, InSubModel
from insub_hf.configuration_insub import LEGACY_LOSS_FIELDS, objective_config_to_flat, small_vit_encoder
from insub_hf.objectives import DINOConfig

pytestmark = pytest.mark.numeric

LEGACY = Path(__file__).resolve().parent / "fixtures" / "legacy"


@pytest.fixture(scope="module")
def recorded():
    return load_file(LEGACY / "inputs_and_outputs.safetensors")


def old_keys(folder: str | Path) -> set[str]:
    with safe_open(LEGACY / folder / "model.safetensors", framework="pt") as f:
        return set(f.keys())


def test_an_old_dino_checkpoint_loads_every_weight_into_its_new_place(recorded, tmp_path):
    keys = old_keys("dino")
    assert {"teacher.prototypes.weight", "insub.prototypes.weight", "dino_loss.center"} <= keys  # the old layout
    model, info = InSubForPreTraining.from_pretrained(LEGACY / "dino", output_loading_info=True)
    assert not info["missing_keys"], info
    assert not info["unexpected_keys"], info
    dino = model.objective
    with safe_open(LEGACY / "dino" / "model.safetensors", framework="pt") as f:
        assert torch.equal(dino.loss.center, f.get_tensor("dino_loss.center"))
        assert torch.equal(dino.prototypes.weight, f.get_tensor("insub.prototypes.weight"))
        assert torch.equal(dino.teacher_prototypes.weight, f.get_tensor("teacher.prototypes.weight"))
        assert torch.equal(dino.teacher.heads.weights[0], f.get_tensor("teacher.heads.weights.0"))
    assert not torch.equal(dino.teacher.heads.weights[0], model.insub.heads.weights[0])  # not re-copied from the student
    model.eval()
    with torch.no_grad():
        out = model(recorded["pixel_values"], recorded["pixel_values_2"],
                    local_pixel_values=recorded["local_pixel_values"])
    # recorded on another machine: other kernels round differently
    torch.testing.assert_close(out.loss, recorded["dino_loss"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.head_embeddings, recorded["dino_head_embeddings"], rtol=1e-5, atol=1e-5)

    model.save_pretrained(tmp_path / "resaved")  # today's names, not the legacy ones
    resaved = old_keys(tmp_path / "resaved")
    assert {"objective.teacher_prototypes.weight", "objective.prototypes.weight", "objective.loss.center"} <= resaved
    assert not any(k.startswith(("teacher.", "dino_loss.")) or k == "insub.prototypes.weight" for k in resaved)
    again = InSubForPreTraining.from_pretrained(tmp_path / "resaved")
    for key, value in model.state_dict().items():
        assert torch.equal(again.state_dict()[key], value), key

    base = AutoModel.from_pretrained(LEGACY / "dino")  # the bare model: encoder and heads, no objective
    assert isinstance(base, InSubModel) and not hasattr(base, "prototypes")
    assert torch.equal(base.heads.weights[0], model.insub.heads.weights[0])


def test_an_old_genomenet_checkpoint_loads_its_projections(recorded):
    assert "genomenet_projections.weight" in old_keys("genomenet")
    model, info = InSubForPreTraining.from_pretrained(LEGACY / "genomenet", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    with safe_open(LEGACY / "genomenet" / "model.safetensors", framework="pt") as f:
        assert torch.equal(model.objective.projections.weight, f.get_tensor("genomenet_projections.weight"))
    with torch.no_grad():
        out = model.eval()(dna_one_hot=recorded["dna_one_hot"])
    # recorded on another machine: other kernels round differently
    torch.testing.assert_close(out.loss, recorded["genomenet_loss"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.head_embeddings, recorded["genomenet_head_embeddings"], rtol=1e-5, atol=1e-5)


def test_an_old_config_keeps_the_loss_it_was_trained_with(tmp_path):
    # the DINO fixture was written before the authors' objective became the default: no `diversity_reduction`
    old = json.loads((LEGACY / "dino" / "config.json").read_text())
    assert "diversity_reduction" not in old and "base_temperature" not in old
    config = InSubConfig.from_pretrained(LEGACY / "dino")
    assert config.diversity_reduction == "sum" and config.objective == "dino"
    # its flat dino_* fields became its objective_config; the other objectives' flat fields were dropped
    assert config.objective_config == {**DINOConfig(out_dim=old["dino_out_dim"]).to_dict(), **{
        field: old[flat] for flat, field in DINOConfig.legacy_fields.items()}}
    assert not any(hasattr(config, flat) for flat in ("dino_out_dim", "temperature", "scd_dropout"))
    # a SimCLR folder as that code wrote it (every field of the time, flat; normalize_mean was always written)
    model = InSubForPreTraining(InSubConfig(
        encoder_config=small_vit_encoder(8, 1, hidden_size=8, num_layers=1), num_heads=3, head_output_size=4,
        head_hidden_sizes=[8], objective_config={"normalize_mean": True, "base_temperature": None},
        diversity_reduction="sum", diversity_weight=1.5, diversity_alpha=0.5,
    ))
    model.save_pretrained(tmp_path / "old")
    saved = json.loads((tmp_path / "old" / "config.json").read_text())
    assert saved["objective_config"] == {"temperature": 0.5, "base_temperature": None, "normalize_mean": True}
    saved = objective_config_to_flat(saved)  # the flat fields of the time
    assert (saved["normalize_mean"], saved["base_temperature"], saved["dino_out_dim"]) == (True, None, 256)
    for key in LEGACY_LOSS_FIELDS:
        del saved[key]
    (tmp_path / "old" / "config.json").write_text(json.dumps(saved))
    loaded = InSubForPreTraining.from_pretrained(tmp_path / "old")
    assert loaded.config.objective_config == {"temperature": 0.5, "base_temperature": None, "normalize_mean": True}
    assert loaded.config.diversity_reduction == "sum"
    x1, x2 = torch.randn(4, 1, 8, 8), torch.randn(4, 1, 8, 8)
    model.eval(), loaded.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(x1, x2).loss, model(x1, x2).loss)
    # a config written today records the loss it trains with, and loads with it
    InSubForPreTraining(InSubConfig(**{**model.config.to_dict(), "diversity_reduction": "mean"})).save_pretrained(
        tmp_path / "new"
    )
    assert InSubConfig.from_pretrained(tmp_path / "new").diversity_reduction == "mean"

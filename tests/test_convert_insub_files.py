"""Files written before the objectives owned their state (commit 171e067) and before the authors' objective became
the default: the library refuses them naming `convert_insub_files`, which rewrites them once; then the weights load
exactly and the outputs match what that code computed (within float32 rounding: they were recorded on another
machine, whose kernels round differently).

`fixtures/old_format` holds a tiny DINO and a tiny Self-GenomeNet checkpoint written by that code (teacher and centre
moved away from the student first, so a teacher that fails to load shows), the inputs, and the outputs that code
computed on them in eval mode.
"""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from transformers import AutoModel

from insub_hf import InSubConfig, InSubForPreTraining, InSubModel
from insub_hf.configuration_insub import objective_config_to_flat, small_vit_encoder
from insub_hf.convert_insub_files import UNSCALED_SUM_LOSS, convert_folder, convert_results, main
from insub_hf.evaluation.results import MethodResults
from insub_hf.objectives import DINOConfig

pytestmark = pytest.mark.numeric

OLD = Path(__file__).resolve().parent / "fixtures" / "old_format"


@pytest.fixture(scope="module")
def recorded():
    return load_file(OLD / "inputs_and_outputs.safetensors")


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """A converted copy of the old folders, and the files the conversion rewrote."""
    folder = tmp_path_factory.mktemp("converted") / "old_format"
    shutil.copytree(OLD, folder)
    return folder, convert_folder(folder)


def old_keys(folder: str | Path) -> set[str]:
    with safe_open(Path(folder) / "model.safetensors", framework="pt") as f:
        return set(f.keys())


def test_old_folders_are_refused_naming_the_converter():
    for name in ("dino", "genomenet"):
        with pytest.raises(ValueError, match=r"earlier insub-hf .*python -m insub_hf\.convert_insub_files FOLDER"):
            InSubForPreTraining.from_pretrained(OLD / name)


def test_the_conversion_rewrites_each_old_file_once(converted, tmp_path):
    folder, changed = converted
    assert sorted(p.relative_to(folder).as_posix() for p in changed) == [
        "dino/config.json", "dino/model.safetensors", "genomenet/config.json", "genomenet/model.safetensors"]
    assert convert_folder(folder) == []  # a second run finds nothing old
    copy = tmp_path / "copy"
    shutil.copytree(OLD, copy)
    before = {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    main([str(copy), "--dry_run"])
    assert {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()} == before  # a dry run writes nothing
    with pytest.raises(SystemExit):
        main([str(tmp_path / "missing")])


def test_a_converted_dino_checkpoint_has_every_weight_in_its_new_place(recorded, converted, tmp_path):
    folder, _ = converted
    keys = old_keys(OLD / "dino")
    assert {"teacher.prototypes.weight", "insub.prototypes.weight", "dino_loss.center"} <= keys  # the old layout
    model, info = InSubForPreTraining.from_pretrained(folder / "dino", output_loading_info=True)
    assert not info["missing_keys"], info
    assert not info["unexpected_keys"], info
    dino = model.objective
    with safe_open(OLD / "dino" / "model.safetensors", framework="pt") as f:
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

    converted_keys = old_keys(folder / "dino")
    assert {"objective.teacher_prototypes.weight", "objective.prototypes.weight", "objective.loss.center"} <= converted_keys
    assert not any(k.startswith(("teacher.", "dino_loss.")) or k == "insub.prototypes.weight" for k in converted_keys)
    model.save_pretrained(tmp_path / "resaved")
    again = InSubForPreTraining.from_pretrained(tmp_path / "resaved")
    for key, value in model.state_dict().items():
        assert torch.equal(again.state_dict()[key], value), key

    base = AutoModel.from_pretrained(folder / "dino")  # the bare model: encoder and heads, no objective
    assert isinstance(base, InSubModel) and not hasattr(base, "prototypes")
    assert torch.equal(base.heads.weights[0], model.insub.heads.weights[0])


def test_a_converted_genomenet_checkpoint_has_its_projections(recorded, converted):
    folder, _ = converted
    assert "genomenet_projections.weight" in old_keys(OLD / "genomenet")
    model, info = InSubForPreTraining.from_pretrained(folder / "genomenet", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    with safe_open(OLD / "genomenet" / "model.safetensors", framework="pt") as f:
        assert torch.equal(model.objective.projections.weight, f.get_tensor("genomenet_projections.weight"))
    with torch.no_grad():
        out = model.eval()(dna_one_hot=recorded["dna_one_hot"])
    # recorded on another machine: other kernels round differently
    torch.testing.assert_close(out.loss, recorded["genomenet_loss"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.head_embeddings, recorded["genomenet_head_embeddings"], rtol=1e-5, atol=1e-5)


def test_a_converted_config_keeps_the_loss_it_was_trained_with(converted, tmp_path):
    # the DINO fixture was written before the authors' objective became the default: no `diversity_reduction`
    old = json.loads((OLD / "dino" / "config.json").read_text())
    assert "diversity_reduction" not in old and "base_temperature" not in old
    config = InSubConfig.from_pretrained(converted[0] / "dino")
    assert config.diversity_reduction == "sum" and config.objective == "dino"
    # its flat dino_* fields became its objective_config; the other objectives' flat fields were dropped
    assert config.objective_config == {**DINOConfig(out_dim=old["dino_out_dim"]).to_dict(), **{
        field: old[flat] for flat, field in DINOConfig.flat_fields.items()}}
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
    for key in UNSCALED_SUM_LOSS:
        del saved[key]
    (tmp_path / "old" / "config.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match="convert_insub_files"):
        InSubForPreTraining.from_pretrained(tmp_path / "old")
    assert [p.name for p in convert_folder(tmp_path / "old")] == ["config.json"]
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


def test_old_results_are_refused_and_converted_to_the_same_aurocs(tmp_path):
    old = {"members": 1, "test": {"accuracy": 0.8, "nll": 0.5, "ece": 0.02, "tace": 0.01, "brier": 0.3},
           "ood": {"mnist": {"msp": 0.7, "neg_knn": 0.9, "neg_head_spread": 0.6}},
           "corruption_mean": {"1": {"accuracy": 0.7, "ece": 0.05, "tace": 0.02, "auroc": 0.6, "auroc_knn": 0.8}}}
    with pytest.raises(ValueError, match=r"unknown OOD scores \['neg_head_spread', 'neg_knn'\].*convert_insub_files"):
        MethodResults.from_dict(old)
    (tmp_path / "results.json").write_text(json.dumps({"args": {}, "rows": [{"name": "insub", **old}]}))
    assert convert_folder(tmp_path) == [tmp_path / "results.json"]
    row = json.loads((tmp_path / "results.json").read_text())["rows"][0]
    assert row == {"name": "insub", **convert_results(old)}
    results = MethodResults.from_dict(convert_results(old))
    assert results.ood["mnist"] == {"msp": 0.7, "knn": 0.9, "head_spread": 0.6}  # the same AUROCs
    assert results.corruption_mean["1"].auroc_msp == 0.6 and results.knn_accuracy is None
    with pytest.raises(ValueError, match=r"unknown keys \['tset'\]"):
        MethodResults.from_dict({**convert_results(old), "tset": {}})

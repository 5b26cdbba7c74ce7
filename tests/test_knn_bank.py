"""The k-NN bank inside a model: `set_bank` makes `knn_distance` the cosine distance to the k-th nearest bank row
(checked against numpy), on every path that loads the folder (insub-hf, the remote code without insub-hf), while
`uncertainty` stays the calibrated reading or None; the spread stays `head_spread`; a bank embedded with other
weights is dropped at save and refused at load."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import numpy as np
import pytest
import torch

from insub_hf import InSubConfig, InSubModel, named_encoder
from insub_hf.uncertainty.knn import clear_bank, encoder_and_heads_fingerprint


def tiny_model(**overrides) -> InSubModel:
    config = dict(encoder_config=named_encoder("resnet18_cifar", 28, 1, 0.0625), num_heads=2, head_hidden_sizes=[8],
                  head_output_size=4, **overrides)
    config["uncertainty"] = {"direction": -1, **config.get("uncertainty", {})}
    return InSubModel(InSubConfig(**config)).eval()


def numpy_kth_distance(queries: np.ndarray, bank: np.ndarray, k: int) -> np.ndarray:
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    return 1 - np.sort(unit(queries) @ unit(bank).T, axis=1)[:, -k]


@torch.no_grad()
def test_set_bank_makes_knn_distance_the_kth_neighbour_distance_and_uncertainty_stays_none(caplog):
    model = tiny_model()
    bank_images, queries = torch.rand(20, 1, 28, 28), torch.rand(7, 1, 28, 28)
    logging.Logger.warning_once.cache_clear()  # said once per process: maybe already, by another test's model
    with caplog.at_level("WARNING"):
        before = model(pixel_values=queries)
    # a single reading (the oriented spread) is never served as `uncertainty`; it keeps its own name, and says so
    assert before.uncertainty is None and before.knn_distance is None
    assert "`uncertainty` is the calibrated rank in [0, 1] alone" in caplog.text and "`out.head_spread`" in caplog.text
    torch.testing.assert_close(before.head_spread, -before.sigma.mean(dim=-1))  # direction -1
    fingerprint = encoder_and_heads_fingerprint(model)
    model.set_bank(model(pixel_values=bank_images).representation, k=3)
    after = model(pixel_values=queries)
    expected = numpy_kth_distance(after.representation.numpy(), model(pixel_values=bank_images).representation.numpy(), 3)
    np.testing.assert_allclose(after.knn_distance.numpy(), expected, rtol=1e-5, atol=1e-6)
    assert after.uncertainty is None
    torch.testing.assert_close(after.head_spread, before.head_spread)
    assert (model.config.uncertainty["reading"], model.config.uncertainty["k"], model.config.uncertainty["bank_size"]) == ("knn", 3, 20)
    assert encoder_and_heads_fingerprint(model) == fingerprint  # the bank is made from the weights, not part of them


REMOTE = """
import sys
sys.modules["insub_hf"] = None  # as if insub-hf were not installed
import torch
from transformers import AutoModel
model = AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
with torch.no_grad():
    out = model(pixel_values=torch.load(sys.argv[2]))
torch.save({"knn_distance": out.knn_distance, "head_spread": out.head_spread}, sys.argv[3])
"""


@torch.no_grad()
def test_the_bank_travels_with_the_weights_to_every_loader(tmp_path):
    model = tiny_model()
    model.set_bank(model(pixel_values=torch.rand(12, 1, 28, 28)).representation, k=2)
    queries = torch.rand(5, 1, 28, 28)
    expected = model(pixel_values=queries)
    model.save_pretrained(tmp_path / "m", remote_code=True)
    saved = json.loads((tmp_path / "m" / "config.json").read_text())
    assert (saved["uncertainty"]["reading"], saved["uncertainty"]["k"], saved["uncertainty"]["bank_size"]) == ("knn", 2, 12)
    loaded = InSubModel.from_pretrained(tmp_path / "m").eval()(pixel_values=queries)
    torch.testing.assert_close(loaded.knn_distance, expected.knn_distance, rtol=0, atol=0)
    torch.save(queries, tmp_path / "x.pt")
    subprocess.run([sys.executable, "-c", REMOTE, str(tmp_path / "m"), str(tmp_path / "x.pt"), str(tmp_path / "y.pt")],
                   cwd=tmp_path, check=True, capture_output=True, timeout=300)
    remote = torch.load(tmp_path / "y.pt")
    torch.testing.assert_close(remote["knn_distance"], expected.knn_distance, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(remote["head_spread"], expected.head_spread, rtol=1e-6, atol=1e-6)


def test_a_bank_of_other_weights_is_dropped_at_save_and_refused_at_load(tmp_path, caplog):
    from transformers import AutoConfig

    model = tiny_model()
    with torch.no_grad():
        model.set_bank(model(pixel_values=torch.rand(12, 1, 28, 28)).representation, k=2)
    model.save_pretrained(tmp_path / "banked")
    with torch.no_grad():  # trained further: the bank's rows are other weights' representations
        next(model.heads.parameters()).add_(0.1)
    model.save_pretrained(tmp_path / "trained")
    assert "k-NN bank was embedded with weights it no longer has" in caplog.text
    saved = json.loads((tmp_path / "trained" / "config.json").read_text())
    assert (saved["uncertainty"]["reading"], saved["uncertainty"]["bank_size"]) == ("spread", 0)
    reloaded = InSubModel.from_pretrained(tmp_path / "trained").eval()
    with torch.no_grad():
        out = reloaded(pixel_values=torch.rand(3, 1, 28, 28))
    assert out.uncertainty is None and out.head_spread.shape == (3,)  # nothing fitted on other weights is served

    config = AutoConfig.from_pretrained(tmp_path / "banked")  # `config=` skips the file pairing: the bank check stays
    config.set_uncertainty(bank_weights="0" * 64)
    with pytest.raises(ValueError, match=r"its k-NN bank was embedded with other weights than the folder holds"):
        InSubModel.from_pretrained(tmp_path / "banked", config=config)


def test_a_classifier_from_a_banked_model_drops_the_bank():
    from insub_hf import InSubForImageClassification

    model = tiny_model()
    with torch.no_grad():
        model.set_bank(model(pixel_values=torch.rand(6, 1, 28, 28)).representation, k=2)
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        classifier = InSubForImageClassification.from_pretrained(folder, num_labels=3)
    assert classifier.config.uncertainty["reading"] == "spread" and not hasattr(classifier.insub, "knn_bank")


def test_set_bank_and_the_config_refuse_what_would_read_wrong():
    model = tiny_model()
    d = model.encoder.output_dim
    with pytest.raises(ValueError, match=rf"representations must be \(N, {d}\).*got \(4, 3\)"):
        model.set_bank(torch.rand(4, 3))
    with pytest.raises(ValueError, match="k=5 must be between 1 and the bank's 4 rows"):
        model.set_bank(torch.rand(4, d), k=5)
    with pytest.raises(ValueError, match="NaN or inf"):
        model.set_bank(torch.full((4, d), float("nan")), k=1)
    with pytest.raises(ValueError, match=r"uncertainty\['reading'\]='knn' needs a bank"):
        tiny_model(uncertainty={"reading": "knn"})
    with pytest.raises(ValueError, match=r"uncertainty\['reading'\] must be one of \['spread', 'spread_by_length', 'knn', 'calibrated'\], got 'mah"):
        tiny_model(uncertainty={"reading": "mahalanobis"})


@torch.no_grad()
def test_a_release_banks_the_first_rows_and_calibrates_on_rows_outside_its_bank():
    from insub_hf.release.shipped import fit_shipped

    model = tiny_model().eval()
    inputs = {"pixel_values": torch.rand(40, 1, 28, 28, generator=torch.Generator().manual_seed(0))}
    fitted = fit_shipped(model, inputs, bank=20)
    assert (fitted.bank_size, fitted.calibration_size[1], fitted.k) == (20, 20, 19)
    block = model.config.uncertainty
    assert (block["reading"], block["bank_size"], block["calibration_size"][1]) == ("calibrated", 20, 20)
    # the bank is the first 20 rows, unit length as a bank keeps them
    first = torch.nn.functional.normalize(model(pixel_values=inputs["pixel_values"][:20]).representation, dim=-1)
    torch.testing.assert_close(model.knn_bank.bank, first, rtol=1e-5, atol=1e-6)
    # fewer than 16 rows beyond the bank: half the rows calibrate, the rest are the bank
    more = {"pixel_values": torch.rand(50, 1, 28, 28, generator=torch.Generator().manual_seed(1))}
    fitted = fit_shipped(model, {"pixel_values": more["pixel_values"][:44]}, bank=30)
    assert (fitted.bank_size, fitted.calibration_size[1]) == (22, 22)


@pytest.mark.parametrize("objective", ["dino", "byol"])
def test_a_teacher_follows_the_weights_not_the_bank_through_save_and_load(tmp_path, objective):
    from insub_hf import InSubForPreTraining

    from .conftest import tiny_config

    model = InSubForPreTraining(tiny_config(objective=objective)).eval()
    images = torch.rand(6, 3, 32, 32)
    with torch.no_grad():
        model.insub.set_bank(model.insub(pixel_values=images).representation, k=2)
        expected = model.insub(pixel_values=images).uncertainty
    model.save_pretrained(tmp_path / "m")
    loaded = InSubForPreTraining.from_pretrained(tmp_path / "m").eval()  # no teacher bank is missing
    follower = loaded.objective.teacher if objective == "dino" else loaded.objective.target
    assert not hasattr(follower, "knn_bank")
    loaded.sync_objective_with_student()  # the teacher takes the weights, leaving the bank out
    with torch.no_grad():
        torch.testing.assert_close(loaded.insub(pixel_values=images).uncertainty, expected)


def test_a_bank_that_no_longer_matches_its_weights_is_refused_at_every_read(tmp_path):
    from datasets import Dataset

    from insub_hf import InSubForPreTraining, InSubTrainer, InSubTrainingArguments

    model = tiny_model()
    bank_images, queries = torch.rand(20, 1, 28, 28), torch.rand(5, 1, 28, 28)
    with torch.no_grad():
        model.set_bank(model(pixel_values=bank_images).representation, k=3)
        served = model(pixel_values=queries).knn_distance
        for p in model.parameters():  # an in-place write that changes no value: still the bank's weights
            p.mul_(1.0)
        torch.testing.assert_close(model(pixel_values=queries).knn_distance, served)
    # one optimiser step: the representations move, the bank does not
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model.train()
    model(pixel_values=queries).representation.pow(2).sum().backward()
    optimizer.step()
    model.eval()
    with torch.no_grad(), pytest.raises(ValueError, match=r"k-NN bank .* was embedded with other weights than the "
                                                          r"model has now .*model.fit_uncertainty\(your_inputs\)"):
        model(pixel_values=queries)
    clear_bank(model)
    with torch.no_grad():  # cleared, then set anew: the distances to the new weights' bank (checked against numpy)
        bank = model(pixel_values=bank_images).representation
        model.set_bank(bank, k=3)
        out = model(pixel_values=queries)
    np.testing.assert_allclose(out.knn_distance.numpy(), numpy_kth_distance(out.representation.numpy(), bank.numpy(), 3),
                               atol=1e-5)
    # trained by InSubTrainer with the bank in it: the in-memory model refuses to serve the old bank
    pretraining = InSubForPreTraining(model.config)
    pretraining.insub.load_state_dict(model.state_dict())
    rows = Dataset.from_dict({"pixel_values": torch.randn(8, 1, 28, 28).numpy(),
                              "pixel_values_2": torch.randn(8, 1, 28, 28).numpy()}).with_format("torch")
    args = InSubTrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=2, report_to=[],
                                  save_strategy="no", use_cpu=True)
    with torch.no_grad():
        pretraining.insub.eval()(pixel_values=queries)  # served before training
        pretraining.insub.knn_bank.check_current(pretraining.insub)
    InSubTrainer(model=pretraining, args=args, train_dataset=rows).train()
    # the trainer drops the fit it makes stale (with a warning): `uncertainty` is None until fitted again
    assert pretraining.config.uncertainty["bank_size"] == 0 and not hasattr(pretraining.insub, "knn_bank")
    with torch.no_grad():
        out = pretraining.insub.eval()(pixel_values=queries)
    assert out.uncertainty is None and out.knn_distance is None and out.head_spread.shape == (queries.shape[0],)


@torch.no_grad()
def test_a_bank_is_refused_after_an_edit_that_no_change_counter_sees():
    """`p.data` edits the values without moving `p._version`: the values' checksum sees it."""
    model = tiny_model()
    images = torch.rand(8, 1, 28, 28)
    model.set_bank(model(pixel_values=images).representation, k=1)
    torch.testing.assert_close(model(pixel_values=images).knn_distance, torch.zeros(8), rtol=0, atol=1e-5)  # own rows
    weight = next(model.encoder.parameters())
    version = weight._version
    weight.data.mul_(1.5)
    assert weight._version == version  # no counter moved
    with pytest.raises(ValueError, match="embedded with other weights than the model has now"):
        model(pixel_values=images)


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_a_compiled_forward_refuses_a_bank_that_an_optimiser_step_left_behind(backend):
    model = tiny_model()
    images = torch.rand(8, 1, 28, 28)
    with torch.no_grad():
        model.set_bank(model(pixel_values=images).representation, k=1)
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        served = compiled(pixel_values=images).knn_distance  # the bank matches: served
    torch.testing.assert_close(served, torch.zeros(8), rtol=0, atol=1e-5)
    for parameter in model.parameters():
        parameter.grad = torch.ones_like(parameter)
    step = torch.compile(torch.optim.SGD(model.parameters(), lr=0.1).step, backend=backend)
    step()
    with torch.no_grad():  # inside the graph nothing is read on the host: every row is NaN, not a number of the fit
        assert torch.isnan(compiled(pixel_values=images).knn_distance).all()
    with torch.no_grad(), pytest.raises(ValueError, match="embedded with other weights than the model has now"):
        model(pixel_values=images)  # eagerly, refused in words


def test_a_compiled_forward_with_uncertainty_is_one_graph():
    model = tiny_model()
    images = torch.rand(8, 1, 28, 28)
    with torch.no_grad():
        model.fit_uncertainty({"pixel_values": torch.rand(60, 1, 28, 28)}, k=3)
        eager = model(pixel_values=images).uncertainty  # the fit is checked (by SHA-256) once, here
        torch._dynamo.reset()
        explained = torch._dynamo.explain(model)(pixel_values=images)
        # fullgraph refuses any break, a `torch.compiler.disable`d call included (which `explain` does not count)
        compiled = torch.compile(model, backend="eager", fullgraph=True)(pixel_values=images).uncertainty
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    torch.testing.assert_close(compiled, eager, rtol=0, atol=1e-6)

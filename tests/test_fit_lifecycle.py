"""The fitted `uncertainty` through its whole life: a refused fit changes nothing; whatever makes a fit stale
(training, an optimiser step, a `.data` edit, `load_state_dict`, a changed k) leaves `uncertainty` None or refused,
never a number of the old state; former flat keys at `from_pretrained` are kept as given; a fit takes what the
model's processor takes (PIL images, numpy arrays, a `datasets.Dataset`, sentences), and bad inputs are refused in
the package's words before any forward."""

from __future__ import annotations

import json
import logging
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

from insub_hf import InSubConfig, InSubForPreTraining, InSubImageProcessor, InSubModel
from insub_hf.uncertainty.fitting import representations_and_spread

from .conftest import tiny_config

QUERIES = torch.rand(9, 3, 32, 32, generator=torch.Generator().manual_seed(7))


def fitted_model(rows: int = 80, k: int = 5) -> tuple[InSubModel, torch.Tensor]:
    torch.manual_seed(0)
    model = InSubModel(tiny_config()).eval()
    images = torch.rand(rows, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    model.fit_uncertainty({"pixel_values": images}, k=k)
    return model, images


@torch.no_grad()
def served(model) -> torch.Tensor | None:
    return model(pixel_values=QUERIES).uncertainty


class CountForwards:
    """Counts the encoder's forwards (to show a refusal came before any)."""

    def __init__(self, model):
        self.count = 0
        model.encoder.register_forward_pre_hook(lambda *_: setattr(self, "count", self.count + 1))


def nan_pixel(images: torch.Tensor) -> torch.Tensor:
    bad = images.clone()
    bad[3, 0, 5, 5] = float("nan")
    return bad


@pytest.mark.parametrize("call, message", [
    (lambda m, x: m.fit_uncertainty({"pixel_values": nan_pixel(x)}), r"inputs=.*1 of its 80 rows hold NaN"),
    (lambda m, x: m.fit_uncertainty({"pixel_values": x}, k=0), r"k must be an integer >= 1, got 0"),
    (lambda m, x: m.fit_uncertainty({"pixel_values": x}, k=-3), r"k must be an integer >= 1, got -3"),
    (lambda m, x: m.fit_uncertainty({"pixel_values": x}, k=2.5), r"k must be an integer >= 1, got 2.5"),
    (lambda m, x: m.fit_uncertainty({"pixel_values": x}, k=True), r"k must be an integer >= 1, got True"),
    (lambda m, x: m.fit_uncertainty({"pixel_values": x}, batch_size=0), r"batch_size must be an integer >= 1, got 0"),
    (lambda m, x: m.fit_uncertainty({"pixel_values": x[:4]}), r"2 calibration rows are too few.*from 20"),
    (lambda m, x: m.fit_uncertainty({"pixel_values": x[:40]}, k=50), r"k=50 needs at least 51 bank rows, got 20"),
    (lambda m, x: m.fit_uncertainty({"pixel_values": x[:50]}, {"pixel_values": x[40:]}),
     r"calibration_inputs=.*10 of its rows are also rows of `inputs`"),
    (lambda m, x: m.fit_uncertainty({"input_ids": torch.ones(80, 5, dtype=torch.long)}),
     r"inputs=.*reads `pixel_values`.*got a dict with keys \['input_ids'\]"),
    (lambda m, x: m.fit_uncertainty(["a sentence"] * 40), r"inputs=.*reads `pixel_values`.*got sentences"),
    (lambda m, x: m.fit_uncertainty(x[0]), r"inputs=.*got a float array of shape \(3, 32, 32\)"),
    (lambda m, x: m.fit_uncertainty([Image.new("RGB", (32, 32))] * 40),
     r"raw inputs need the model's image processor.*pass processor="),
    (lambda m, x: m.fit_uncertainty(42), r"inputs=.*got a int"),
])
def test_a_refused_fit_changes_nothing_and_runs_no_forward(call, message):
    model, images = fitted_model()
    before, block = served(model), json.dumps(dict(model.config.uncertainty))
    bank = model.knn_bank
    counter = CountForwards(model)
    with pytest.raises(ValueError, match=message):
        call(model, images)
    assert counter.count == 0  # refused before the first forward
    assert model.knn_bank is bank and json.dumps(dict(model.config.uncertainty)) == block
    assert torch.equal(served(model), before)  # the previous fit serves the same numbers


@pytest.mark.parametrize("fit", ["calibrated", "oriented spread"])
def test_training_on_leaves_none_not_the_old_spread(tmp_path, fit):
    from datasets import Dataset

    from insub_hf import InSubTrainer, InSubTrainingArguments

    images = torch.rand(80, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    if fit == "calibrated":
        model = InSubForPreTraining(tiny_config())
        model.eval().fit_uncertainty({"pixel_values": images}, k=5)  # through the pretraining model itself
    else:  # a direction fixed for these weights (as `InSubOODDetector` fixes it), no bank
        model = InSubForPreTraining(tiny_config(uncertainty={"reading": "spread", "direction": -1}))
    if fit == "calibrated":
        assert served(model.insub.eval()) is not None
    else:  # a single reading has its own output; `uncertainty` is the calibrated one alone
        assert served(model.insub.eval()) is None and model.config.uncertainty["direction"] == -1
    rows = Dataset.from_dict({"pixel_values": images[:8].numpy(), "pixel_values_2": images[8:16].numpy()})
    args = InSubTrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=2, report_to=[],
                                  save_strategy="no", use_cpu=True)
    InSubTrainer(model=model, args=args, train_dataset=rows.with_format("torch")).train()
    block = model.config.uncertainty
    assert (block["direction"], block["bank_size"], block["fitted_with"]) == (None, 0, None)
    out = model.insub.eval()(pixel_values=QUERIES)
    assert out.uncertainty is None and out.head_spread is not None  # the raw reading keeps its own name
    model.save_pretrained(tmp_path / "saved")
    assert InSubModel.from_pretrained(tmp_path / "saved").eval()(pixel_values=QUERIES).uncertainty is None


@pytest.mark.parametrize("change", ["optimiser step", ".data edit", "load_state_dict", "a vector's .data edit",
                                    "a vector's sign flipped whole", "two values of a vector swapped"])
def test_weights_changed_after_a_fit_are_refused_before_a_number_is_served(change):
    model, images = fitted_model()
    vector = next(t for t in model.parameters() if t.dim() == 1)  # a BatchNorm or bias vector of the encoder
    with torch.no_grad():  # distinct non-zero values, so that a flip or a swap is a change
        vector.copy_(torch.linspace(0.5, 1.5, len(vector)))
    model.fit_uncertainty({"pixel_values": images}, k=5)
    assert served(model) is not None
    other = InSubModel(tiny_config()).eval()
    if change == "optimiser step":
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model(pixel_values=QUERIES).head_embeddings.pow(2).sum().backward()
        optimizer.step()
    elif change == ".data edit":
        next(model.heads.parameters()).data[0, 0] += 1e-3  # one value, through `.data`: no change counter moves
    elif change.startswith("a vector") or change.startswith("two values"):
        if change == "a vector's .data edit":
            vector.data[0] += 1e-3
        elif change == "a vector's sign flipped whole":
            vector.data.neg_()  # keeps the vector's norm
        else:
            vector.data[[0, 1]] = vector.data[[1, 0]].clone()  # keeps the norm too
    else:
        model.load_state_dict({**other.state_dict(), **{k: v for k, v in model.state_dict().items() if "knn" in k}})
    with pytest.raises(ValueError, match=r"embedded with other weights .*model.fit_uncertainty\(your_inputs\)"):
        served(model)


def test_a_changed_k_serves_none_with_one_warning_naming_the_refit(caplog):
    model, images = fitted_model()
    assert served(model) is not None
    model.config.uncertainty["k"] = 3  # a setting the calibration was not fitted with
    with caplog.at_level("WARNING"):
        assert served(model) is None
        assert served(model) is None
    said = [r.message for r in caplog.records if "changed since the calibration was fitted" in r.message]
    assert len(said) == 1 and "k 5 -> 3" in said[0] and "model.fit_uncertainty(your_inputs, k=3)" in said[0]
    model.config.uncertainty["k"] = 5  # back to what it was fitted with: the same numbers again
    assert served(model) is not None
    block = dict(model.config.uncertainty)
    model.config.uncertainty = {**block, "direction": None if block["direction"] else 1}  # a whole block
    assert served(model) is None


def test_a_whole_block_is_checked_as_an_item_is():
    config = tiny_config()
    with pytest.raises(ValueError, match=r"uncertainty\['reading'\] must be one of .*got 'bogus'"):
        config.uncertainty = {"reading": "bogus"}
    with pytest.raises(ValueError, match=r"uncertainty\['reading'\] must be one of .*got 'bogus'"):
        config.uncertainty["reading"] = "bogus"
    with pytest.raises(ValueError, match=r"InSubConfig.uncertainty has no keys \['kk'\]"):
        config.uncertainty = {"kk": 3}
    config.uncertainty = {"k": 7}
    assert config.uncertainty["k"] == 7 and config.uncertainty["reading"] == "spread"


def test_former_flat_keys_at_from_pretrained_are_kept_as_given_with_their_warning(tmp_path):
    model, _ = fitted_model()
    model.save_pretrained(tmp_path / "m")
    with pytest.warns(FutureWarning, match=r"knn_k=.*uncertainty=\{'k'"):
        warnings.simplefilter("always")
        from insub_hf import compat

        compat._warned.discard("InSubConfig(knn_k=...)")
        config = InSubConfig.from_pretrained(tmp_path / "m", knn_k=7)
    assert config.uncertainty["k"] == 7 and config.uncertainty["fitted_with"]["k"] == 5
    loaded = InSubModel.from_pretrained(tmp_path / "m", knn_k=7).eval()
    assert loaded.config.uncertainty["k"] == 7 and served(loaded) is None  # not the k its calibration was fitted with
    same = InSubModel.from_pretrained(tmp_path / "m").eval()
    torch.testing.assert_close(served(same), served(model), rtol=0, atol=0)


def test_a_folder_saved_before_the_record_loads_with_its_own_fit(tmp_path):
    model, _ = fitted_model()
    model.save_pretrained(tmp_path / "m")
    path = tmp_path / "m" / "config.json"
    saved = json.loads(path.read_text())
    del saved["uncertainty"]["fitted_with"]  # as a config.json of insub-hf up to ec29209 holds it
    path.write_text(json.dumps(saved))
    loaded = InSubModel.from_pretrained(tmp_path / "m", check_config_pairing=False).eval()  # edited here on purpose
    torch.testing.assert_close(served(loaded), served(model), rtol=0, atol=0)


def test_a_folder_fitted_with_the_former_combination_serves_it_and_says_how_to_refit(tmp_path, caplog):
    """A folder of insub-hf up to commit 9637199: its calibration holds each reading's centre and scale and the
    larger standardised score's ranks, and its config names no combination. It loads with that combination filled
    in, serves the numbers it served, and says once how to fit Fisher's rule."""
    from insub_hf.uncertainty.conformal import CalibrationScores, centre_and_scale, combined, conformal_rank

    model, _ = fitted_model()
    fisher_scores = model.knn_bank.calibration
    former = CalibrationScores(*fisher_scores.reference.shape, fisher_scores.combined_scores.shape[0], "max_z")
    former.centre_scale.copy_(centre_and_scale(fisher_scores.reference))
    former.combined_scores.copy_(fisher_scores.combined_scores)
    model.knn_bank.calibration = former
    model.save_pretrained(tmp_path / "m")
    path = tmp_path / "m" / "config.json"
    saved = json.loads(path.read_text())
    del saved["uncertainty"]["combination"], saved["uncertainty"]["fitted_with"]["combination"]
    path.write_text(json.dumps(saved))
    logging.Logger.warning_once.cache_clear()  # said once per process: maybe already, by another test's folder
    with caplog.at_level("WARNING"):
        loaded = InSubModel.from_pretrained(tmp_path / "m", check_config_pairing=False).eval()  # edited on purpose
    assert loaded.config.uncertainty["combination"] == "max_z"
    assert loaded.config.uncertainty["fitted_with"]["combination"] == "max_z"
    assert "larger standardised score" in caplog.text and "model.fit_uncertainty(your_inputs)" in caplog.text
    with torch.no_grad():
        out = loaded(pixel_values=QUERIES)
        parts = torch.stack([loaded.knn_bank(out.representation, 5)] + (
            [out.head_spread] if "spread" in loaded.config.uncertainty["components"] else []))
    expected = conformal_rank(combined(parts, former.centre_scale), former.combined_scores)
    torch.testing.assert_close(out.uncertainty, expected, rtol=0, atol=0)
    loaded.fit_uncertainty(torch.rand(80, 3, 32, 32, generator=torch.Generator().manual_seed(1)), k=5)
    assert loaded.config.uncertainty["combination"] == "fisher" and hasattr(loaded.knn_bank.calibration, "reference")


def image_processor() -> InSubImageProcessor:
    return InSubImageProcessor.for_images(32, 3, [0.5] * 3, [0.25] * 3)


def test_a_fit_takes_pil_images_numpy_arrays_a_dataset_and_a_bare_tensor():
    from datasets import Dataset

    rng = np.random.default_rng(0)
    arrays = rng.integers(0, 256, (60, 32, 32, 3), dtype=np.uint8)
    pil = [Image.fromarray(a) for a in arrays]
    processor = image_processor()
    tensors = dict(processor(images=pil, return_tensors="pt"))
    results = {}
    for name, given in [("tensors", tensors), ("pil", pil), ("numpy", arrays), ("bare tensor", tensors["pixel_values"]),
                        ("dataset", Dataset.from_dict({"image": pil, "label": [0] * 60}))]:
        torch.manual_seed(0)
        model = InSubModel(tiny_config()).eval()
        model.fit_uncertainty(given, k=5, processor=processor)
        results[name] = served(model)
    for name, value in results.items():
        torch.testing.assert_close(value, results["tensors"], rtol=0, atol=1e-6, msg=name)


def test_raw_images_use_the_processor_saved_beside_the_model(tmp_path):
    torch.manual_seed(0)
    model = InSubModel(tiny_config()).eval()
    model.save_pretrained(tmp_path / "m")
    image_processor().save_pretrained(tmp_path / "m")
    loaded = InSubModel.from_pretrained(tmp_path / "m").eval()
    pil = [Image.fromarray(a) for a in np.random.default_rng(0).integers(0, 256, (60, 32, 32, 3), dtype=np.uint8)]
    loaded.fit_uncertainty(pil, k=5)
    assert served(loaded) is not None


def text_model_and_tokenizer(tmp_path):
    from transformers import BertConfig, BertTokenizerFast

    vocab = tmp_path / "vocab.txt"
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(40)]
    vocab.write_text("\n".join(words) + "\n")
    bert = BertConfig(vocab_size=len(words), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = InSubModel(tiny_config(encoder_config=bert, pooling="mean", objective="scd")).eval()
    return model, BertTokenizerFast(str(vocab))


def test_sentences_fit_batched_by_length_as_the_padded_forward_reads_them(tmp_path):
    model, tokenizer = text_model_and_tokenizer(tmp_path)
    rng = np.random.default_rng(0)
    sentences = [" ".join(f"w{i}" for i in rng.integers(0, 40, rng.integers(2, 30))) for _ in range(70)]
    padded = dict(tokenizer(sentences, padding=True, return_tensors="pt"))
    by_length = representations_and_spread(model, padded, batch_size=8)
    with torch.no_grad():  # one forward of the whole set, padded to its longest sentence
        whole = model(**padded)
    torch.testing.assert_close(by_length[0], whole.representation, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(by_length[1], whole.sigma.mean(dim=-1), rtol=1e-4, atol=1e-5)
    model.fit_uncertainty(sentences, k=5, processor=tokenizer)
    fitted_on_sentences = model(**padded).uncertainty
    model.fit_uncertainty(padded, k=5)
    torch.testing.assert_close(model(**padded).uncertainty, fitted_on_sentences, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match=r"reads `input_ids`.*got a list of Image"):
        model.fit_uncertainty([Image.new("RGB", (8, 8))] * 40, processor=tokenizer)


def test_sentences_of_other_token_counts_than_the_calibration_are_nan_with_one_warning(tmp_path, caplog):
    model, tokenizer = text_model_and_tokenizer(tmp_path)
    rng = np.random.default_rng(1)
    sentence = lambda words: " ".join(f"w{i}" for i in rng.integers(0, 40, words))  # noqa: E731
    bank = [sentence(int(rng.integers(2, 30))) for _ in range(60)]
    # calibration rows of 5 to 12 words: 7 to 14 tokens with [CLS] and [SEP], both ends present
    calibration = [sentence(words) for words in [5, 12] + [int(w) for w in rng.integers(5, 13, 38)]]
    model.fit_uncertainty(bank, calibration, k=5, processor=tokenizer)
    assert model.config.uncertainty["length_range"] == [7, 14]
    served_alone = [sentence(8), sentence(12)]
    mixed = [sentence(3), served_alone[0], sentence(20), served_alone[1]]  # 5, 10, 22 and 14 tokens
    with torch.no_grad(), caplog.at_level("WARNING"):
        alone = model(**tokenizer(served_alone, padding=True, return_tensors="pt")).uncertainty
        assert "calibrated on sentences" not in caplog.text  # all inside: no word
        out = model(**tokenizer(mixed, padding=True, return_tensors="pt"))
        model(**tokenizer(mixed, padding=True, return_tensors="pt"))
    assert out.uncertainty.isnan().tolist() == [True, False, True, False]
    torch.testing.assert_close(out.uncertainty[[1, 3]], alone, rtol=0, atol=1e-6)
    said = [r.message for r in caplog.records if "calibrated on sentences of 7-14 tokens" in r.message]
    assert len(said) == 1 and "model.fit_uncertainty(your_sentences)" in said[0]
    assert not out.head_spread.isnan().any()  # the raw readings stay served


def test_dna_of_another_length_than_the_calibration_serves_none_with_one_warning(caplog):
    from insub_hf.encoders.configuration_genomic import GenomicEncoderConfig

    torch.manual_seed(0)
    model = InSubModel(tiny_config(encoder_config=GenomicEncoderConfig(conv_filters=8, kernel_size=8, stride=4))).eval()
    one_hot = lambda n, length, seed: torch.nn.functional.one_hot(  # noqa: E731
        torch.randint(0, 4, (n, length), generator=torch.Generator().manual_seed(seed)), 4).float()
    model.fit_uncertainty(one_hot(80, 40, 0), k=5)  # a bare (N, L, 4) tensor
    assert model.config.uncertainty["length_range"] == [40, 40]
    with torch.no_grad(), caplog.at_level("WARNING"):
        assert model(dna_one_hot=one_hot(6, 40, 1)).uncertainty.shape == (6,)
        for length in (24, 64):
            out = model(dna_one_hot=one_hot(6, length, 1))
            assert out.uncertainty is None and out.head_spread.shape == (6,)
    said = [r.message for r in caplog.records if "was calibrated on inputs of 40-40 bases" in r.message]
    assert len(said) == 2 and "this batch has 24" in said[0] and "model.fit_uncertainty(" in said[0]
    sequences = ["".join("ACGT"[i] for i in row) for row in one_hot(60, 40, 2).argmax(dim=-1).tolist()]
    model.fit_uncertainty(sequences, k=5)  # DNA strings, one-hot encoded by the package
    assert model.config.uncertainty["length_range"] == [40, 40]


def test_a_reading_that_cannot_see_outliers_says_so(caplog):
    torch.manual_seed(0)
    model = InSubModel(tiny_config()).eval()
    noise = torch.rand(80, 3, 32, 32, generator=torch.Generator().manual_seed(1))  # shuffled noise is noise
    with caplog.at_level("WARNING"):
        fitted = model.fit_uncertainty(noise, k=5)
    assert not fitted.sees_outliers and abs(fitted.auroc - 0.5) < 0.15
    assert model.config.uncertainty["made_outlier_auroc"] == round(fitted.auroc, 4)
    assert "cannot see outliers" in caplog.text and "another encoder" in caplog.text
    caplog.clear()
    ramp = torch.linspace(0, 1, 32)
    angle = torch.rand(80, 1, 1, 1, generator=torch.Generator().manual_seed(2)) * 6.28
    phase = ramp[None, None, :, None] * angle.cos() + ramp[None, None, None, :] * angle.sin()
    stripes = (0.5 + 0.5 * torch.sin(6 * phase)).expand(80, 3, 32, 32)
    with caplog.at_level("WARNING"):
        fitted = model.fit_uncertainty(stripes.contiguous(), k=5)  # images with structure: shuffling destroys it
    assert fitted.sees_outliers and fitted.auroc > 0.65 and "cannot see outliers" not in caplog.text


def test_rows_also_in_finds_exact_repeats_only():
    from insub_hf.uncertainty.fitting import rows_also_in

    first = torch.rand(50, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    second = torch.rand(20, 3, 4, 4, generator=torch.Generator().manual_seed(1))
    second[[2, 11, 17]] = first[[40, 0, 40]]  # repeats, one of them twice
    second[5] = first[7] + 1e-6  # close, not the same
    expected = torch.zeros(20, dtype=torch.bool)
    expected[[2, 11, 17]] = True
    assert torch.equal(rows_also_in(first, second), expected)
    brute = torch.tensor([any(torch.equal(row, other) for other in first) for row in second])  # every pair compared
    assert torch.equal(rows_also_in(first, second), brute)


def test_a_dtype_cast_and_a_bank_never_set_are_refused_for_what_they_are():
    from .conftest import tiny_config

    torch.manual_seed(0)
    model = InSubModel(tiny_config(num_heads=3)).eval()
    model.fit_uncertainty({"pixel_values": torch.rand(100, 3, 32, 32)}, k=5)
    model.to(torch.float64)
    with pytest.raises(ValueError, match=r"the model was cast to torch.float64 after its `uncertainty` was fitted in "
                                         r"torch.float32 \(the same weights\).*model.to\(torch.float32\)"):
        model(pixel_values=torch.rand(2, 3, 32, 32, dtype=torch.float64))
    model.to(torch.float32)  # cast back: the same numbers again
    assert model(pixel_values=torch.rand(2, 3, 32, 32)).uncertainty is not None
    never = InSubModel(tiny_config(num_heads=3, uncertainty={"reading": "knn", "bank_size": 10, "k": 3})).eval()
    with pytest.raises(ValueError, match=r"its config names a k-NN bank of 10 rows \(config.uncertainty\['bank_size'\]\) "
                                         r"that was never set.*model.fit_uncertainty"):
        never(pixel_values=torch.rand(2, 3, 32, 32))

"""The calibrated `uncertainty`: its conformal arithmetic against hand-worked and numpy computations, its promise (about
5 % of in-distribution inputs above 0.95), the outliers made for fitting it, and one number on every path a fitted
model is read through (its class, AutoModel without insub-hf, sentence-transformers, `InSubOODDetector`,
`insub-hf score`'s encoder); a model nobody fitted serves None."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from transformers import BertConfig

from insub_hf import InSubModel, InSubOODDetector
from insub_hf.uncertainty.conformal import (
    CalibrationScores,
    centre_and_scale,
    combined,
    conformal_rank,
    sorted_scale,
)
from insub_hf.uncertainty.fitting import shuffled_within
from insub_hf.uncertainty.readings import READINGS
from insub_hf.uncertainty.separation import bootstrap_auroc_interval, pairwise_auroc

from .conftest import tiny_config


def test_a_conformal_rank_is_the_share_of_strictly_lower_reference_scores():
    reference = torch.tensor([0.1, 0.2, 0.2, 0.5])  # sorted
    got = conformal_rank(torch.tensor([0.0, 0.1, 0.2, 0.3, 0.5, 0.9]), reference)
    torch.testing.assert_close(got, torch.tensor([0.0, 0.0, 1, 3, 3, 4]) / 5)  # counted by hand, among n + 1 = 5
    # one minus the conformal p-value (1 + #{reference >= s}) / (n + 1), ties counted against the input
    p_values = torch.tensor([(1 + (reference >= s).sum().item()) / 5 for s in (0.0, 0.1, 0.2, 0.3, 0.5, 0.9)])
    torch.testing.assert_close(got, 1 - p_values)


@pytest.mark.parametrize("n", [20, 21, 30, 99, 100, 1000])
def test_the_rank_s_guarantee_holds_with_no_slack_on_exchangeable_scores(n):
    """Scores drawn alike (on a coarse lattice, so ties happen): every rank is one of the n + 1 lattice values
    j / (n + 1) in [0, 1), and P(u > 1 - a) <= a at every a, over many draws, within the Monte-Carlo error only."""
    generator = torch.Generator().manual_seed(n)
    draws = 20000
    reference = torch.randint(0, 50, (draws, n), generator=generator).float().sort(dim=1).values  # ties
    new = torch.randint(0, 50, (draws, 1), generator=generator).float()
    ranks = torch.stack([conformal_rank(new[i], reference[i]) for i in range(0, draws, 50)])  # a calibration each
    counts = (reference < new).sum(dim=1).float()  # the same, for every draw at once
    torch.testing.assert_close(ranks.flatten(), counts[::50] / (n + 1))
    u = counts / (n + 1)
    assert (u >= 0).all() and (u < 1).all()
    torch.testing.assert_close(u * (n + 1), (u * (n + 1)).round(), rtol=0, atol=1e-3)  # on the lattice
    for a in (0.01, 0.05, 0.1, 0.5):
        rate = (u > 1 - a).float().mean().item()
        assert rate <= a + 3 * (a * (1 - a) / draws) ** 0.5, (a, rate)
    continuous = torch.rand(draws, n + 1, generator=generator)  # no ties: exactly uniform on the lattice
    u = (continuous[:, :n] < continuous[:, n:]).sum(dim=1).float() / (n + 1)
    exact = (torch.arange(n + 1).float() / (n + 1) > 0.95).sum().item() / (n + 1)  # lattice values above, of n + 1
    rate = (u > 0.95).float().mean().item()
    assert rate <= 0.05 + 3 * (0.05 * 0.95 / draws) ** 0.5 and abs(rate - exact) < 4 * (exact / draws) ** 0.5


def test_centre_and_scale_are_numpy_s_median_and_interquartile_range():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(2, 101))
    got = centre_and_scale(torch.from_numpy(scores))
    q1, median, q3 = np.percentile(scores, [25, 50, 75], axis=1)
    np.testing.assert_allclose(got.numpy(), np.stack([median, q3 - q1], axis=1), rtol=1e-6)
    constant = centre_and_scale(torch.tensor([[2.0, 2.0, 2.0, 2.0]]))  # no spread at all: scale 1, not a division by 0
    torch.testing.assert_close(constant, torch.tensor([[2.0, 1.0]]))


@pytest.mark.parametrize("n", [1, 2, 7, 100, 2000])
def test_sorted_scale_is_numpy_s_interquartile_range_of_sorted_rows(n):
    rng = np.random.default_rng(n)
    rows = np.sort(rng.normal(size=(2, n)).astype(np.float32), axis=1)
    got = sorted_scale(torch.from_numpy(rows))
    q1, q3 = np.percentile(rows.astype(np.float64), [25, 75], axis=1)
    expected = np.where(q3 - q1 > 0, q3 - q1, 1.0)  # n = 1: no spread, scale 1
    np.testing.assert_allclose(got[:, 0].numpy(), expected, rtol=1e-6)
    assert got.shape == (2, 1) and got.dtype == torch.float64
    # a constant row has no IQR: its standard deviation, then 1, as centre_and_scale
    tied = torch.tensor([[2.0, 2.0, 2.0, 2.0, 9.0], [3.0, 3.0, 3.0, 3.0, 3.0]])
    torch.testing.assert_close(sorted_scale(tied)[:, 0].float(), centre_and_scale(tied)[:, 1])


def numpy_fisher(reference: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Fisher's combination written apart from the package: each component's p = 1 - F(s), F the rows' empirical CDF
    interpolated by numpy between them (the j-th lowest row at (j + 1) / (n + 1)), exponential tails past the ends
    with the rows' IQR as scale; the statistic is scipy's Fisher statistic over 2 (scipy sums -2 log p)."""
    from scipy.stats import combine_pvalues

    reference = np.sort(reference, axis=1)
    n = reference.shape[1]
    out = []
    for column in scores.T:
        p = []
        for ref, s in zip(reference, column):
            scale = np.subtract(*np.percentile(ref, [75, 25])) or 1.0
            if s > ref[-1]:
                p.append(np.exp(-(s - ref[-1]) / scale) / (n + 1))
            elif s < ref[0]:
                p.append(1 - np.exp(-(ref[0] - s) / scale) / (n + 1))
            else:
                p.append(1 - np.interp(s, ref, np.arange(1, n + 1)) / (n + 1))
        out.append(combine_pvalues(p, method="fisher").statistic / 2)
    return np.array(out)


def test_fisher_s_combination_matches_an_independent_computation_and_never_ties():
    from insub_hf.uncertainty.conformal import fisher, surprise

    rng = np.random.default_rng(0)
    reference = np.sort(rng.normal(size=(2, 40)) * np.array([[1.0], [30.0]]), axis=1)  # two unlike scales, sorted
    scores = np.concatenate([rng.normal(size=(2, 200)) * np.array([[2.0], [60.0]]),
                             np.array([[-50.0, 50.0, 0.0], [0.0, 0.0, 5000.0]])], axis=1)  # past both ends
    got = fisher(torch.from_numpy(reference).float(), torch.from_numpy(scores).float())
    np.testing.assert_allclose(got.numpy(), numpy_fisher(reference.astype(np.float32), scores.astype(np.float32)),
                               rtol=1e-5, atol=1e-6)
    line = torch.linspace(-200, 200, 5001)[None]  # strictly increasing in each component, past every row too
    assert (surprise(torch.from_numpy(reference[:1]).float(), line)[0].diff() > 0).all()


def test_the_calibration_ranks_fisher_s_statistic_of_split_b():
    from insub_hf.uncertainty.conformal import fisher

    generator = torch.Generator().manual_seed(0)
    split_a, split_b = torch.randn(2, 30, generator=generator), torch.randn(2, 9, generator=generator)
    scores = CalibrationScores.fitted(split_a, split_b)
    torch.testing.assert_close(scores.reference, split_a.sort(dim=1).values)
    b = fisher(scores.reference, split_b).sort().values
    torch.testing.assert_close(scores.combined_scores, b)
    new = torch.randn(2, 50, generator=generator)
    expected = (b[None, :] < fisher(scores.reference, new)[:, None]).float().sum(dim=1) / 10
    torch.testing.assert_close(scores(new), expected)


def test_the_former_combination_is_the_larger_standardised_score_ranked_on_split_b():
    # split A: component 0 has median 2, IQR 2; component 1 has median 10, IQR 20 (worked out by hand)
    split_a = torch.tensor([[1.0, 2.0, 3.0, 0.0, 4.0], [0.0, 10.0, 20.0, -10.0, 30.0]])
    split_b = torch.tensor([[2.0, 6.0, 1.0, 3.0], [50.0, 10.0, 10.0, 10.0]])  # standardised maxima 2, 2, 0, 0.5
    scores = CalibrationScores.fitted(split_a, split_b, "max_z")
    torch.testing.assert_close(scores.centre_scale, torch.tensor([[2.0, 2.0], [10.0, 20.0]]))
    torch.testing.assert_close(scores.combined_scores, torch.tensor([0.0, 0.5, 2.0, 2.0]))
    # new inputs: maxima 0.25 -> 1 below; 1.0 -> 2 below; 3.0 -> all 4 below (among n + 1 = 5)
    got = scores(torch.tensor([[2.5, 4.0, 0.0], [10.0, 10.0, 70.0]]))
    torch.testing.assert_close(got, torch.tensor([0.2, 0.4, 0.8]))
    torch.testing.assert_close(combined(split_b, scores.centre_scale), torch.tensor([2.0, 2.0, 0.0, 0.5]))


def test_about_five_percent_of_exchangeable_inputs_are_flagged_at_0_95():
    """Inputs drawn like the calibration inputs: the flag rate at 0.95 is 5 % up to sampling (and at most 1/(n+1)
    above it in expectation); inputs far out are flagged."""
    generator = torch.Generator().manual_seed(0)
    draw = lambda n: torch.stack([torch.randn(n, generator=generator).exp(),  # noqa: E731
                                  torch.randn(n, generator=generator)])  # two unlike scales
    scores = CalibrationScores.fitted(draw(1000), draw(2000))
    rates = [(scores(draw(5000)) > 0.95).float().mean().item() for _ in range(5)]
    assert 0.04 < np.mean(rates) < 0.06, rates
    far = torch.tensor([[1000.0, 1.0], [0.0, 1000.0]])  # far out on either reading: above all 2,000
    assert (scores(far) == 2000 / 2001).all()


def test_the_expected_flag_band_counts_every_equally_likely_ordering():
    """Small sizes worked by hand: n calibration and m new scores drawn alike put the m new ones at any of the
    C(n + m, m) sets of places in the joint order with equal chance; count how many land above the threshold."""
    from itertools import combinations
    from math import comb

    from insub_hf.evaluation.flagging import expected_flag_band

    for n, m, threshold in [(1, 1, 0.5), (3, 2, 0.5), (4, 3, 0.7), (5, 4, 0.8), (9, 4, 0.95)]:
        counts = []
        for places in combinations(range(n + m), m):  # the new scores' places among all n + m, lowest first
            reference = torch.tensor([float(i) for i in range(n + m) if i not in places])
            counts.append(int((conformal_rank(torch.tensor(places, dtype=torch.float), reference) > threshold).sum()))
        assert len(counts) == comb(n + m, m)
        share = np.mean(counts) / m
        expected, low, high = expected_flag_band(n, m, threshold, level=0.5)
        assert expected == pytest.approx(share, abs=1e-12), (n, m, threshold)
        ordered = np.sort(counts) / m  # the band's ends are the 25 % and 75 % quantiles of the counts
        assert low == ordered[int(np.ceil(0.25 * len(counts))) - 1], (n, m, threshold)
        assert high == ordered[int(np.ceil(0.75 * len(counts))) - 1], (n, m, threshold)


def test_the_expected_flag_band_holds_for_the_reading_s_own_calibration():
    """Many calibrations of `CalibrationScores` on fresh draws, each scoring fresh inputs drawn alike: the shares
    flagged at 0.95 have the mean and the 95 % band `expected_flag_band` gives."""
    from insub_hf.evaluation.flagging import expected_flag_band

    generator = torch.Generator().manual_seed(0)
    n, m, trials = 200, 300, 3000
    shares = []
    for _ in range(trials):
        scores = CalibrationScores.fitted(torch.randn(1, 50, generator=generator), torch.randn(1, n, generator=generator))
        shares.append((scores(torch.randn(1, m, generator=generator)) > 0.95).float().mean().item())
    expected, low, high = expected_flag_band(n, m)
    assert np.mean(shares) == pytest.approx(expected, abs=0.002)
    assert np.quantile(shares, 0.025) == pytest.approx(low, abs=0.004)
    assert np.quantile(shares, 0.975) == pytest.approx(high, abs=0.004)
    assert (low, high) != pytest.approx((expected, expected), abs=0.01)  # a band, not a point


def test_the_separation_auroc_is_scikit_learn_s():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(1)
    low, high = rng.normal(size=300), rng.normal(0.4, 1, size=200).round(1)  # with ties
    expected = roc_auc_score(np.r_[np.zeros(300), np.ones(200)], np.r_[low, high])
    assert pairwise_auroc(low, high) == pytest.approx(expected, abs=1e-12)
    lower, upper = bootstrap_auroc_interval(low, high)
    assert lower < expected < upper and lower > 0.5


def test_unserved_rows_are_left_out_of_the_flag_rate_and_the_auroc_and_counted():
    from sklearn.metrics import roc_auc_score

    from insub_hf.evaluation.flagging import flag_rate, separation_by_reading

    nan = float("nan")
    inside = torch.tensor([0.1, 0.97, nan, 0.5, 0.2])
    outside = torch.tensor([0.99, nan, nan, 0.4])
    assert flag_rate(inside) == pytest.approx(1 / 4)  # one of the four served rows is above 0.95
    spread_in, spread_out = torch.tensor([1.0, 2, 3, 4, 5]), torch.tensor([6.0, 1, 7, 8])
    got = separation_by_reading({"uncertainty": inside, "head_spread": spread_in},
                                {"long": {"uncertainty": outside, "head_spread": spread_out}})
    assert got["unserved"] == {"inside": 1, "long": 2}
    served = roc_auc_score([0, 0, 0, 0, 1, 1], [0.1, 0.97, 0.5, 0.2, 0.99, 0.4])
    assert got["sets"]["long"]["uncertainty"]["auroc"] == pytest.approx(served)
    every_row = roc_auc_score([0] * 5 + [1] * 4, spread_in.tolist() + spread_out.tolist())  # raw readings: every row
    assert got["sets"]["long"]["head_spread"]["auroc"] == pytest.approx(every_row)
    assert "unserved" not in separation_by_reading({"uncertainty": spread_in}, {"o": {"uncertainty": spread_out}})


def test_outliers_made_for_fitting_keep_each_input_s_values_and_none_of_its_order():
    generator = torch.Generator().manual_seed(0)
    pixels = torch.rand(3, 2, 4, 4)
    shuffled = shuffled_within({"pixel_values": pixels}, "pixel_values", generator)["pixel_values"]
    for image, made in zip(pixels, shuffled):  # one order for all channels: each pixel's channels stay together
        assert sorted(map(tuple, image.flatten(1).T.tolist())) == sorted(map(tuple, made.flatten(1).T.tolist()))
    assert not torch.equal(shuffled, pixels)
    ids = torch.tensor([[101, 5, 6, 7, 8, 102, 0, 0], [101, 9, 10, 11, 12, 13, 14, 102]])
    mask = (ids != 0).long()
    made = shuffled_within({"input_ids": ids, "attention_mask": mask}, "input_ids", generator)
    got = made["input_ids"]
    assert torch.equal(made["attention_mask"], mask)
    assert got[:, 0].tolist() == [101, 101] and got[0, 5] == 102 and got[1, 7] == 102  # [CLS] and [SEP] in place
    assert got[0, 6:].tolist() == [0, 0]  # padding untouched
    for row, original in zip(got, ids):
        assert sorted(row.tolist()) == sorted(original.tolist())
    dna = torch.nn.functional.one_hot(torch.randint(0, 4, (2, 30), generator=generator), 4).float()
    made = shuffled_within({"dna_one_hot": dna}, "dna_one_hot", generator)["dna_one_hot"]
    torch.testing.assert_close(made.sum(dim=1), dna.sum(dim=1))  # the same bases, in another order


def _fitted_image_model(rows: int = 120, k: int = 5) -> tuple[InSubModel, torch.Tensor]:
    torch.manual_seed(0)
    model = InSubModel(tiny_config(num_heads=3)).eval()
    images = torch.rand(rows, 3, 32, 32)
    fitted = model.fit_uncertainty({"pixel_values": images}, k=k)
    assert fitted.components[0] == "knn" and fitted.bank_size == rows // 2 and fitted.k == k
    return model, images


def test_a_model_nobody_fitted_serves_none_and_one_line_fits_it():
    model = InSubModel(tiny_config(num_heads=3)).eval()
    pixels = torch.rand(6, 3, 32, 32)
    with torch.no_grad():
        out = model(pixel_values=pixels)
    assert out.uncertainty is None and out.head_spread.shape == (6,)  # the raw reading stays under its own name
    assert "uncertainty" not in InSubOODDetector(model).score({"pixel_values": pixels})
    fitted = model.fit_uncertainty({"pixel_values": torch.rand(40, 3, 32, 32)}, k=3)
    block = model.config.uncertainty
    # half the rows are the bank, half are ranked against; every bank row standardises the readings
    assert block["reading"] == "calibrated" and block["calibration_size"] == [20, 20] and block["bank_size"] == 20
    assert block["components"] == fitted.components and block["direction"] == fitted.direction
    with torch.no_grad():
        served = model(pixel_values=pixels).uncertainty
    assert served.shape == (6,) and ((served >= 0) & (served <= 1)).all()
    assert READINGS["calibrated"].fitted(block)


def test_the_calibrated_reading_is_read_from_the_bank_and_the_spread_as_fitted():
    """The served number, recomputed from the model's bank, its k, its direction and its calibration buffers."""
    model, images = _fitted_image_model()
    block = model.config.uncertainty
    new = torch.rand(8, 3, 32, 32)
    with torch.no_grad():
        out = model(pixel_values=new)
        parts = [model.knn_bank(out.representation, block["k"])]
        if "spread" in block["components"]:
            parts.append(out.head_spread)
        calibration = model.knn_bank.calibration
        statistic = torch.from_numpy(numpy_fisher(calibration.reference.numpy(), torch.stack(parts).numpy())).float()
    expected = (calibration.combined_scores[None, :] < statistic[:, None]).float().sum(dim=1) / (
        calibration.combined_scores.shape[0] + 1)
    torch.testing.assert_close(out.uncertainty, expected)


def test_training_after_fitting_drops_the_reading_rather_than_serve_another_model_s():
    from insub_hf.uncertainty.knn import clear_bank

    model, images = _fitted_image_model()
    with torch.no_grad():
        next(model.heads.parameters()).add_(0.1)
    with pytest.raises(ValueError, match="embedded with other weights"):
        model(pixel_values=images[:2])
    clear_bank(model)
    assert model.config.uncertainty["components"] is None and model.config.uncertainty["calibration_size"] is None
    with torch.no_grad():
        assert model(pixel_values=images[:2]).uncertainty is None  # its direction alone is no calibrated reading


def test_a_calibrated_config_that_misses_a_part_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"'calibrated' needs a k-NN bank"):
        tiny_config(uncertainty={"reading": "calibrated"})
    base = {"reading": "calibrated", "bank_size": 10, "k": 5, "calibration_size": [3, 6], "direction": None,
            "combination": "fisher"}
    with pytest.raises(ValueError, match=r"components'\] must list the combined readings, 'knn' first"):
        tiny_config(uncertainty={**base, "components": ["spread"]})
    with pytest.raises(ValueError, match=r"'spread', which needs the spread's direction"):
        tiny_config(uncertainty={**base, "components": ["knn", "spread"]})
    with pytest.raises(ValueError, match=r"calibration_size'\] must be \[n_a, n_b\]"):
        tiny_config(uncertainty={**base, "components": ["knn"], "calibration_size": [3]})
    with pytest.raises(ValueError, match=r"combination'\].*'fisher', 'max_z'"):
        tiny_config(uncertainty={**base, "components": ["knn"], "combination": "mean"})


REMOTE_READ = """
import sys
sys.modules["insub_hf"] = None  # as if insub-hf were not installed
import torch
from transformers import AutoModel
for name in ("model", "someone/calibrated"):  # by folder, and by repo id from the Hub cache (offline)
    model = AutoModel.from_pretrained(name, trust_remote_code=True).eval()
    assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
    with torch.no_grad():
        got = model(**torch.load("inputs.pt")).uncertainty
    torch.testing.assert_close(got, torch.load("expected.pt"), rtol=0, atol=0)
print("same number")
"""


def test_one_number_through_the_class_a_reload_automodel_without_insub_hf_the_detector_score_and_pipeline(tmp_path):
    """Exact on every path in one process and in a fresh one (the same float32 arithmetic on the same weights); the
    folder's feature-extraction pipeline reads one image a forward, where BatchNorm-free layers give the same floats
    (tolerance 0)."""
    from PIL import Image

    from insub_hf.jobs.score import Encoder, ScoreArguments
    from insub_hf.processing.image_processing_insub import InSubImageProcessor

    model, _ = _fitted_image_model()
    processor = InSubImageProcessor.for_images(32, 3, [0.5] * 3, [0.25] * 3)
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)) for _ in range(10)]
    new = dict(processor(images, return_tensors="pt"))
    with torch.no_grad():
        expected = model(**new).uncertainty
    model.save_pretrained(tmp_path / "model", remote_code=True)
    processor.save_pretrained(tmp_path / "model")
    loaded = InSubModel.from_pretrained(tmp_path / "model").eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(**new).uncertainty, expected, rtol=0, atol=0)
    torch.testing.assert_close(InSubOODDetector(loaded).score(new)["uncertainty"], expected, rtol=0, atol=0)
    torch.save(new, tmp_path / "inputs.pt")
    torch.save(expected, tmp_path / "expected.pt")
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--someone--calibrated"
    model.save_pretrained(repo / "snapshots" / commit, remote_code=True)  # the cache's layout, as a download leaves it
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    run = subprocess.run([sys.executable, "-c", REMOTE_READ], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, env=dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(tmp_path / "hub"),
                                      HF_MODULES_CACHE=str(tmp_path / "modules")))  # this run's code, not a cached one
    assert run.returncode == 0 and "same number" in run.stdout, run.stderr[-3000:]
    _, through_score = Encoder(ScoreArguments(model=str(tmp_path / "model"), dataset="unused"))(images)
    torch.testing.assert_close(through_score, expected, rtol=0, atol=0)
    from transformers import pipeline

    extractor = pipeline("image-feature-extraction", model=str(tmp_path / "model"), trust_remote_code=True)
    rows = [extractor(image, return_uncertainty=True) for image in images]
    torch.testing.assert_close(torch.tensor([row["uncertainty"] for row in rows]), expected, rtol=0, atol=0)
    assert extractor(images[0]) == rows[0]["features"]  # without the flag: features, as transformers gives them


def tiny_sentence_transformer(tmp_path):
    """(a sentence-transformers folder of a tiny unfitted InSub text model loaded with its remote code, its
    tokenizer): words w0..w39."""
    from sentence_transformers import SentenceTransformer
    from transformers import BertTokenizerFast

    from insub_hf.hub import save_for_hub
    from insub_hf.hub.model_card import HubCard

    vocab = tmp_path / "vocab.txt"
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(40)]
    vocab.write_text("\n".join(words) + "\n")
    tokenizer = BertTokenizerFast(str(vocab))
    bert = BertConfig(vocab_size=len(words), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = InSubModel(tiny_config(encoder_config=bert, pooling="mean", objective="scd")).eval()
    save_for_hub(model, tmp_path / "folder", "someone/text", HubCard(tokenizer=tokenizer))
    return SentenceTransformer(str(tmp_path / "folder"), trust_remote_code=True), tokenizer


def test_sentence_transformers_fits_in_one_line_and_serves_what_automodel_serves(tmp_path):
    """sentence-transformers' `encode(..., output_value="uncertainty")` and `AutoModel` on the saved folder give one
    number (the same forward on the same tokens: equal within float32 rounding of batch padding, 1e-6)."""
    pytest.importorskip("sentence_transformers")
    from transformers import AutoModel

    st, tokenizer = tiny_sentence_transformer(tmp_path)
    rng = np.random.default_rng(0)
    sentences = [" ".join(f"w{i}" for i in rng.integers(0, 40, rng.integers(3, 9))) for _ in range(90)]
    with pytest.raises(KeyError):  # not fitted: no number under that name
        st.encode(sentences[:2], output_value="uncertainty")
    st[0].fit_uncertainty(sentences[:60])
    served = torch.stack(st.encode(sentences[60:], output_value="uncertainty"))
    assert ((served >= 0) & (served <= 1)).all()
    st.save(str(tmp_path / "fitted"))
    auto = AutoModel.from_pretrained(tmp_path / "fitted", trust_remote_code=True).eval()
    with torch.no_grad():
        own = auto(**tokenizer(sentences[60:], padding=True, return_tensors="pt")).uncertainty
    torch.testing.assert_close(served, own, rtol=0, atol=1e-6)

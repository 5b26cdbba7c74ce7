"""Acting on the calibrated uncertainty (`insub_hf/uncertainty/pvalues.py`): its conformal p-value exactly (a
hand-worked example, and P(p <= a) <= a with no slack on exchangeable scores), Benjamini-Hochberg against an
independent step-up, one call that selects a batch's outliers on every path that serves `uncertainty`, and bad
input refused in one line naming the argument."""

import numpy as np
import pytest
import torch

from insub_hf import InSubModel
from insub_hf.uncertainty.conformal import conformal_rank
from insub_hf.uncertainty.pvalues import conformal_pvalues, model_pvalues, outliers_among, select_outliers

from .conftest import tiny_config


def test_the_p_value_of_a_hand_worked_rank_is_the_literature_s():
    reference = torch.tensor([1.0, 2.0, 3.0, 4.0])  # n = 4 calibration scores
    scores = torch.tensor([0.5, 2.0, 2.5, 5.0])
    u = conformal_rank(scores, reference)  # 0, 1, 2, 4 of them strictly below, over 5
    expected = np.array([(1 + (reference.numpy() >= s).sum()) / 5 for s in scores.numpy()])  # 1, 0.8, 0.6, 0.2
    np.testing.assert_array_equal(conformal_pvalues(u, 4), expected)
    assert np.isnan(conformal_pvalues(torch.tensor([float("nan"), 0.2]), 4)[0])  # an input not served


@pytest.mark.parametrize("ties", [False, True])
def test_p_values_of_exchangeable_scores_are_valid_with_no_slack(ties):
    """20,000 draws of n = 19 calibration scores and one more, all alike: P(p <= k/20) is k/20 (continuous scores:
    exactly, within 4 standard errors) and never above it (ties only make p larger)."""
    rng = np.random.default_rng(0)
    draws, n = 20_000, 19
    scores = rng.normal(size=(draws, n + 1))
    if ties:
        scores = np.round(scores)
    reference = torch.as_tensor(np.sort(scores[:, :n], axis=1))
    u = torch.stack([conformal_rank(torch.as_tensor(scores[i, n:]), reference[i]) for i in range(draws)])[:, 0]
    p = conformal_pvalues(u, n)
    assert set(np.unique(p * (n + 1)).round(9)) <= set(range(1, n + 2))  # on the lattice
    for k in range(1, n + 1):
        a = k / (n + 1)
        share, error = (p <= a + 1e-12).mean(), 4 * np.sqrt(a * (1 - a) / draws)
        assert share <= a + error, (k, share)
        if not ties:
            assert abs(share - a) <= error, (k, share)


def step_up(p: np.ndarray, q: float) -> np.ndarray:
    """Benjamini and Hochberg's procedure as their 1995 paper states it: reject the k smallest, k the largest i
    with p_(i) <= i q / m."""
    order = np.argsort(p)
    passing = np.flatnonzero(p[order] <= np.arange(1, len(p) + 1) * q / len(p))
    flagged = np.zeros(len(p), dtype=bool)
    if len(passing):
        flagged[order[:passing[-1] + 1]] = True
    return flagged


def test_benjamini_hochberg_is_the_1995_step_up_and_leaves_unserved_rows_out():
    assert outliers_among([0.01, 0.04, 0.03, 0.2], fdr=0.1).tolist() == [True, True, True, False]  # 0.04 <= 3 x 0.025
    rng = np.random.default_rng(1)
    for _ in range(50):
        p = np.concatenate([rng.uniform(size=80), rng.uniform(0, 0.01, size=rng.integers(0, 20))])
        np.testing.assert_array_equal(outliers_among(p, 0.1), step_up(p, 0.1))
    p = np.array([0.001, np.nan, 0.5, 0.002])
    assert outliers_among(p, 0.1).tolist() == [True, False, False, True]  # as if the NaN row were not there


def fitted_model():
    torch.manual_seed(0)
    model = InSubModel(tiny_config(num_heads=3)).eval()
    model.fit_uncertainty({"pixel_values": torch.rand(200, 3, 32, 32)}, k=5)
    return model


def test_select_outliers_flags_what_benjamini_hochberg_flags_on_the_served_uncertainty(tmp_path):
    model = fitted_model()
    inliers = torch.rand(40, 3, 32, 32, generator=torch.Generator().manual_seed(5))
    outliers = torch.zeros(10, 3, 32, 32)  # blank images, unlike every calibration row
    batch = {"pixel_values": torch.cat([inliers, outliers])}
    with torch.no_grad():
        served = model(**batch).uncertainty
    n = model.config.uncertainty["calibration_size"][1]
    expected = 1 - served.double().numpy()  # p = 1 - u: u counts the calibration scores below over n + 1
    selection = select_outliers(model, batch, fdr=0.2, batch_size=7)
    np.testing.assert_allclose(selection.pvalues, expected, rtol=0, atol=1 / (4 * (n + 1)))
    np.testing.assert_array_equal(selection.flagged, np.flatnonzero(step_up(selection.pvalues, 0.2)))
    assert set(range(40, 50)) <= set(selection.flagged.tolist()) and len(selection.unserved) == 0


def test_every_path_that_serves_uncertainty_reaches_the_p_values_in_one_line(tmp_path):
    from PIL import Image
    from transformers import AutoModel, pipeline

    from insub_hf.processing.image_processing_insub import InSubImageProcessor

    model = fitted_model()
    processor = InSubImageProcessor.for_images(32, 3, [0.5] * 3, [0.25] * 3)
    model.save_pretrained(tmp_path / "model", remote_code=True)
    processor.save_pretrained(tmp_path / "model")
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)) for _ in range(6)]
    expected = model_pvalues(model, images, processor=processor)
    remote = AutoModel.from_pretrained(tmp_path / "model", trust_remote_code=True).eval()
    np.testing.assert_array_equal(model_pvalues(remote, images), expected)  # its processor found beside it
    extractor = pipeline("image-feature-extraction", model=str(tmp_path / "model"), trust_remote_code=True)
    np.testing.assert_array_equal(model_pvalues(extractor, images), expected)
    served = [extractor(image, return_uncertainty=True)["uncertainty"] for image in images]
    np.testing.assert_array_equal(conformal_pvalues(served, extractor.model), expected)


def test_sentence_transformers_reaches_the_p_values_in_one_line(tmp_path):
    pytest.importorskip("sentence_transformers")
    from .test_calibrated_uncertainty import tiny_sentence_transformer

    st, _ = tiny_sentence_transformer(tmp_path)
    rng = np.random.default_rng(0)
    sentences = [" ".join(f"w{i}" for i in rng.integers(0, 40, 6)) for _ in range(90)]
    st[0].fit_uncertainty(sentences[:60])
    served = torch.stack(st.encode(sentences[60:], output_value="uncertainty"))
    np.testing.assert_allclose(model_pvalues(st, sentences[60:]), conformal_pvalues(served, st[0].model), atol=1e-9)


@pytest.mark.parametrize("fdr", [0, 1, 1.5, -0.1, True, "0.1", None])
def test_a_false_discovery_rate_outside_zero_one_is_refused_naming_it(fdr):
    with pytest.raises(ValueError, match=r"select_outliers\(fdr=.*\): the false discovery rate to control, a number "
                                         r"in \(0, 1\)"):
        select_outliers(fitted_model(), {"pixel_values": torch.rand(4, 3, 32, 32)}, fdr=fdr)
    with pytest.raises(ValueError, match=r"outliers_among\(fdr="):
        outliers_among([0.5], fdr=fdr)


def test_an_unfitted_model_and_a_batch_of_another_modality_are_refused_in_one_line():
    with pytest.raises(ValueError, match=r"select_outliers: the model serves no calibrated `uncertainty` \(not "
                                         r"fitted\): fit it first with model.fit_uncertainty"):
        select_outliers(InSubModel(tiny_config()), {"pixel_values": torch.rand(4, 3, 32, 32)})
    with pytest.raises(ValueError, match=r"select_outliers\(inputs=...\): this model reads `pixel_values`; it takes "
                                         r".*; got sentences"):
        select_outliers(fitted_model(), ["a sentence", "another one"])
    with pytest.raises(ValueError, match=r"conformal_pvalues\(uncertainty=...\): a calibrated uncertainty ranked "
                                         r"among 4 scores lies in \[0, 4/5\]"):
        conformal_pvalues([0.9], 4)


def test_a_stale_fit_is_refused_rather_than_read(tmp_path):
    model = fitted_model()
    with torch.no_grad():
        model.heads.weights[0].data.add_(0.1)  # an edit through .data after the fit
    with pytest.raises(ValueError, match=r"was embedded with other weights than the model has now .* Fit it again"):
        select_outliers(model, {"pixel_values": torch.rand(4, 3, 32, 32)})

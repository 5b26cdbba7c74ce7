"""The metrics the field reports beside AUROC and ECE (issue 46): temperature scaling, FPR95, AUPR-In/Out, AURC,
AUGRC, R-AUROC and the crop test, each against an independent computation (a brute-force search, sklearn's ROC
curve, a loop over the ranking, a hand-worked example)."""

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_curve

from insub_hf.evaluation import metrics

pytestmark = pytest.mark.numeric


def overconfident(n=20000, c=4, factor=3.0, seed=0):
    """Labels drawn from softmax(z), and a model that reports softmax(factor * z): over-confident by `factor`."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, c, generator=g, dtype=torch.float64)
    labels = torch.multinomial(torch.softmax(logits, dim=1), 1, generator=g).squeeze(1)
    return torch.softmax(factor * logits, dim=1), labels


def scaled_nll(probs, labels, t):
    return float(-torch.log_softmax(probs.log() / t, dim=1)[torch.arange(len(labels)), labels].mean())


def test_temperature_scaling_recovers_the_over_confidence_and_minimises_the_nll():
    probs, labels = overconfident()
    t = metrics.fit_temperature(probs, labels)
    assert abs(t - 3.0) < 0.15  # the model was over-confident by 3
    grid = np.exp(np.linspace(np.log(0.05), np.log(20), 2001))  # brute force: no grid point has a lower NLL
    assert scaled_nll(probs, labels, t) <= min(scaled_nll(probs, labels, g) for g in grid) + 1e-9
    scaled = metrics.temperature_scale(probs, t)
    assert torch.equal(scaled.argmax(1), probs.argmax(1))  # accuracy is unchanged
    assert metrics.nll(scaled, labels) < metrics.nll(probs, labels)
    assert metrics.expected_calibration_error(scaled, labels) < metrics.expected_calibration_error(probs, labels)
    logits = torch.randn(5, 3, dtype=torch.float64)  # one model: the softmax of its logits / T
    torch.testing.assert_close(metrics.temperature_scale(torch.softmax(logits, 1), 2.5), torch.softmax(logits / 2.5, 1))
    with pytest.raises(ValueError, match="temperature must be a positive finite number, got 0"):
        metrics.temperature_scale(probs, 0)


def test_fpr95_is_the_roc_curves_fpr_where_it_first_reaches_95_percent_tpr():
    rng = np.random.default_rng(0)
    inside, outside = rng.normal(1, 1, 500), rng.normal(0, 1, 300)
    fpr, tpr, _ = roc_curve(np.r_[np.ones(500), np.zeros(300)], np.r_[inside, outside], drop_intermediate=False)
    expected = fpr[np.searchsorted(tpr, 0.95)]
    assert metrics.fpr_at_tpr(inside, outside) == pytest.approx(expected)
    # uncertainty scores (higher = OOD) are read the other way round
    assert metrics.fpr_at_tpr(-inside, -outside, higher_is_in=False) == pytest.approx(expected)
    # by hand: of the in-scores 1..20 the threshold 2 keeps 19 (95 %); of the out-scores 0, 1.6, 2.5 and 30 the last
    # two reach it
    assert metrics.fpr_at_tpr(np.arange(1, 21), [0.0, 1.6, 2.5, 30.0]) == pytest.approx(2 / 4)


def average_precision_by_hand(positives, negatives):
    """sum over the ranking of (recall step) x (precision there), scores without ties, highest first."""
    scores = np.r_[positives, negatives]
    is_positive = np.r_[np.ones(len(positives)), np.zeros(len(negatives))][np.argsort(-scores)]
    hits = np.cumsum(is_positive)
    precision = hits / np.arange(1, len(scores) + 1)
    return float((precision * is_positive).sum() / len(positives))


def test_aupr_in_and_out_are_average_precision_with_either_side_positive():
    rng = np.random.default_rng(1)
    inside, outside = rng.normal(1, 1, 200), rng.normal(0, 1, 100)
    assert metrics.aupr(inside, outside, positive="in") == pytest.approx(average_precision_by_hand(inside, outside))
    assert metrics.aupr(inside, outside, positive="out") == pytest.approx(average_precision_by_hand(-outside, -inside))
    assert metrics.aupr(-inside, -outside, higher_is_in=False) == pytest.approx(metrics.aupr(inside, outside))
    with pytest.raises(ValueError, match="positive must be one of"):
        metrics.aupr(inside, outside, positive="both")


def test_aurc_and_augrc_by_hand():
    confidence, correct = [0.9, 0.6, 0.8, 0.7], [1, 0, 0, 1]  # ranked: right, wrong, right, wrong
    # selective risk at coverage 1..4: 0/1, 1/2, 1/3, 2/4; generalised risk: 0/4, 1/4, 1/4, 2/4
    assert metrics.aurc(confidence, correct) == pytest.approx((0 + 1 / 2 + 1 / 3 + 2 / 4) / 4)
    assert metrics.augrc(confidence, correct) == pytest.approx((0 + 1 / 4 + 1 / 4 + 2 / 4) / 4)
    rng = np.random.default_rng(2)
    right = rng.random(300) < 0.7
    oracle, reversed_ = right + rng.random(300) * 0.1, -(right + rng.random(300) * 0.1)
    assert metrics.aurc(oracle, right) < metrics.aurc(rng.random(300), right) < metrics.aurc(reversed_, right)


def test_r_auroc_scores_the_uncertainty_against_nearest_neighbour_errors_found_by_brute_force():
    rng = np.random.default_rng(3)
    gallery, gallery_labels = rng.normal(size=(60, 8)), rng.integers(0, 3, 60)
    queries, query_labels = rng.normal(size=(40, 8)), rng.integers(0, 3, 40)
    cosine = lambda a, b: a @ b / np.linalg.norm(a) / np.linalg.norm(b)  # noqa: E731
    by_hand = np.array([gallery_labels[max(range(60), key=lambda g: cosine(q, gallery[g]))] != y
                        for q, y in zip(queries, query_labels)])
    errors = metrics.nearest_neighbour_errors(torch.tensor(queries), query_labels, torch.tensor(gallery), gallery_labels)
    assert errors.numpy().tolist() == by_hand.tolist()
    assert metrics.r_auroc(by_hand + 0.0, by_hand) == 1.0  # an uncertainty that knows the errors
    uncertainty = rng.random(40)
    pairs = [(u_wrong > u_right) + 0.5 * (u_wrong == u_right) for u_wrong in uncertainty[by_hand]
             for u_right in uncertainty[~by_hand]]
    assert metrics.r_auroc(uncertainty, by_hand) == pytest.approx(np.mean(pairs))  # the Mann-Whitney form of AUROC
    assert np.isnan(metrics.r_auroc(uncertainty, np.zeros(40, dtype=bool)))  # nothing to rank


def test_the_crop_test_by_hand():
    fractions = [1.0, 0.5, 0.25]
    # image 1 gets more uncertain as the crop shrinks, image 2 less
    result = metrics.crop_test([[0.1, 0.2, 0.3], [0.9, 0.8, 0.05]], fractions)
    assert result.smaller_crop_higher == 0.5
    # Spearman by hand: ranks of the 6 fractions (ties averaged) and of the 6 uncertainties, then Pearson
    f = np.array([1.0, 0.5, 0.25, 1.0, 0.5, 0.25])
    u = np.array([0.1, 0.2, 0.3, 0.9, 0.8, 0.05])
    rank_f = np.array([5.5, 3.5, 1.5, 5.5, 3.5, 1.5])
    rank_u = np.argsort(np.argsort(u)) + 1.0
    assert result.spearman == pytest.approx(np.corrcoef(rank_f, rank_u)[0, 1])
    assert metrics.crop_test([[0.1, 0.2, 0.3]] * 3, fractions).spearman == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="crop_test needs uncertainty"):
        metrics.crop_test([[0.1, 0.2]], fractions)


def test_split_half_r_auroc_by_hand():
    # gallery: items 0 and 2 (labels 0, 1); queries: items 1 and 3 (labels 0, 0)
    embeddings = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.2, 0.9]])
    labels = torch.tensor([0, 0, 1, 0])
    # query 1's nearest is item 0 (right, similarity ~0.99), query 3's is item 2 (wrong, similarity ~0.98)
    out = metrics.split_half_r_auroc(embeddings, torch.tensor([0.0, 0.1, 0.0, 0.9]), labels)
    assert out == {"r_auroc_uncertainty": 1.0, "r_auroc_nn_distance": 1.0}
    out = metrics.split_half_r_auroc(embeddings, torch.tensor([0.0, 0.9, 0.0, 0.1]), labels)
    assert out["r_auroc_uncertainty"] == 0.0
    assert metrics.split_half_r_auroc(embeddings, torch.zeros(4), torch.zeros(4, dtype=torch.long)) == {
        "r_auroc_uncertainty": None, "r_auroc_nn_distance": None}  # no retrieval wrong: nothing to rank

import itertools
import math

import numpy as np
import pytest
import torch
from sklearn.metrics import accuracy_score, log_loss

from insub_hf.evaluation import metrics
from insub_hf.evaluation.evaluate_metrics import CalibrationMetrics, OODAUROC

pytestmark = pytest.mark.numeric


def random_probs(n=200, c=5, seed=0, sharpness=3.0):
    g = torch.Generator().manual_seed(seed)
    logits = sharpness * torch.randn(n, c, generator=g, dtype=torch.float64)
    labels = torch.randint(0, c, (n,), generator=g)
    return logits, torch.softmax(logits, dim=1), labels


def ece_reference(probs, labels, n_bins=15):
    probs, labels = np.asarray(probs), np.asarray(labels)
    conf, pred = probs.max(1), probs.argmax(1)
    edges = np.linspace(0, 1, n_bins + 1)
    total = 0.0
    for b in range(n_bins):
        lo, hi = edges[b], edges[b + 1]
        member = (conf > lo) & (conf <= hi) if b > 0 else (conf >= lo) & (conf <= hi)
        if member.any():
            total += member.mean() * abs((pred[member] == labels[member]).mean() - conf[member].mean())
    return total


def tace_reference(probs, labels, n_bins=15, threshold=0.01):
    probs, labels = np.asarray(probs), np.asarray(labels)
    per_class = []
    for c in range(probs.shape[1]):
        p = probs[:, c]
        keep = np.flatnonzero(p >= threshold)
        if len(keep) == 0:
            continue
        order = keep[np.argsort(p[keep], kind="stable")]
        gaps = [abs((labels[ch] == c).mean() - p[ch].mean()) for ch in np.array_split(order, min(n_bins, len(order)))]
        per_class.append(np.mean(gaps))
    return np.mean(per_class)


def test_accuracy_and_nll_match_sklearn():
    logits, probs, labels = random_probs()
    assert metrics.accuracy(probs, labels) == pytest.approx(accuracy_score(labels, probs.argmax(1)))
    expected = log_loss(labels, probs.numpy(), labels=list(range(5)))
    assert metrics.nll_from_logits(logits, labels) == pytest.approx(expected, rel=1e-9)
    assert metrics.nll(probs, labels) == pytest.approx(expected, rel=1e-9)


def test_nll_from_logits_is_exact_where_softmax_underflows():
    logits = torch.tensor([[0.0, -800.0]], dtype=torch.float64)
    assert metrics.nll_from_logits(logits, [1]) == pytest.approx(800.0)
    # from probabilities the zero is clamped at 1e-12 instead of giving inf
    assert metrics.nll(torch.softmax(logits, 1), [1]) == pytest.approx(-math.log(1e-12))


def test_brier_hand_worked():
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
    expected = ((0.3**2 + 0.2**2 + 0.1**2) + (0.1**2 + 0.9**2 + 0.8**2)) / 2
    assert metrics.brier_score(probs, [0, 1]) == pytest.approx(expected)
    assert metrics.brier_score(torch.eye(3), [0, 1, 2]) == 0.0
    assert metrics.brier_score(torch.eye(2), [1, 0]) == pytest.approx(2.0)


def test_ece_against_loop_reference():
    for seed, sharp in [(0, 3.0), (1, 0.5), (2, 10.0)]:
        _, probs, labels = random_probs(seed=seed, sharpness=sharp)
        assert metrics.expected_calibration_error(probs, labels) == pytest.approx(ece_reference(probs, labels))


def test_ece_edge_cases():
    # perfectly calibrated: confidence 0.8 and 4 of 5 right
    probs = torch.tensor([[0.8, 0.2]] * 5, dtype=torch.float64)
    assert metrics.expected_calibration_error(probs, [0, 0, 0, 0, 1]) == pytest.approx(0.0, abs=1e-12)
    # every prediction certain and wrong: confidence exactly 1.0 sits in the last bin, ECE 1
    bins = metrics.reliability_bins(torch.eye(3), [1, 2, 0])
    assert bins.counts[-1] == 3 and bins.accuracy[-1] == 0
    assert metrics.expected_calibration_error(torch.eye(3), [1, 2, 0]) == pytest.approx(1.0)
    # a tie between classes predicts the first one
    assert metrics.accuracy(torch.tensor([[0.5, 0.5]]), [0]) == 1.0
    assert metrics.expected_calibration_error(torch.tensor([[0.5, 0.5]] * 2), [0, 1]) == pytest.approx(0.0)
    # a confidence on a bin edge (2/15) belongs to the lower bin (lo, hi]
    top = float(torch.linspace(0, 1, 16, dtype=torch.float64)[2])
    edge = torch.tensor([[top] + [(1 - top) / 9] * 9], dtype=torch.float64)
    assert metrics.reliability_bins(edge, [0]).counts[1] == 1


def test_tace_against_reference_and_edges():
    for seed in range(3):
        _, probs, labels = random_probs(seed=seed, sharpness=2.0)
        assert metrics.thresholded_adaptive_calibration_error(probs, labels) == pytest.approx(
            tace_reference(probs, labels)
        )
    # one-hot correct: every kept probability is 1 and right -> 0
    assert metrics.thresholded_adaptive_calibration_error(torch.eye(4), [0, 1, 2, 3]) == 0.0
    # probabilities under the threshold are dropped: class 1 never reaches 0.01 and adds no bin
    probs = torch.tensor([[0.995, 0.005], [0.995, 0.005]])
    assert metrics.thresholded_adaptive_calibration_error(probs, [0, 0]) == pytest.approx(0.005)
    assert metrics.thresholded_adaptive_calibration_error(torch.eye(2), [1, 0]) == pytest.approx(1.0)


def test_auroc_against_pair_counting_with_ties():
    g = torch.Generator().manual_seed(0)
    inside = torch.randint(0, 5, (40,), generator=g).double()
    outside = torch.randint(0, 5, (30,), generator=g).double() - 1
    pairs = [(a > b) + 0.5 * (a == b) for a, b in itertools.product(inside.tolist(), outside.tolist())]
    assert metrics.ood_auroc(inside, outside) == pytest.approx(np.mean(pairs))
    assert metrics.ood_auroc(inside, outside, higher_is_in=False) == pytest.approx(1 - np.mean(pairs))
    assert metrics.ood_auroc(torch.ones(5), torch.ones(3)) == 0.5
    with pytest.raises(ValueError, match="non-empty"):
        metrics.ood_auroc(torch.ones(5), torch.ones(0))


def test_entropy_and_mutual_information_hand_worked():
    assert metrics.predictive_entropy(torch.tensor([[0.5, 0.5], [1.0, 0.0]])).tolist() == pytest.approx(
        [math.log(2), 0.0]
    )
    # two confident members that disagree: entropy of mean log 2, members' entropy 0 -> MI = log 2
    members = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[0.5, 0.5], [0.5, 0.5]]])
    assert metrics.mutual_information(members).tolist() == pytest.approx([math.log(2), 0.0])
    assert metrics.max_probability(torch.tensor([[0.2, 0.8]])).tolist() == pytest.approx([0.8])


def test_mutual_information_of_one_member_is_refused_not_zero():
    with pytest.raises(ValueError, match=r"at least 2 members, got member_probabilities of shape \(3, 1, 2\)"):
        metrics.mutual_information(torch.full((3, 1, 2), 0.5))


def test_disagreement_against_loop():
    _, probs, labels = random_probs(n=60, c=3, seed=4)
    members = torch.stack([probs, probs.roll(1, 0), probs.roll(2, 0), probs.flip(1)], dim=1)  # (N, 4, C)
    preds = members.argmax(2)
    pair_rates = [(preds[:, a] != preds[:, b]).double().mean() for a, b in itertools.combinations(range(4), 2)]
    assert metrics.disagreement_rate(members) == pytest.approx(float(np.mean(pair_rates)))
    error = 1 - float((preds == labels[:, None]).double().mean())
    assert metrics.normalized_disagreement(members, labels) == pytest.approx(float(np.mean(pair_rates)) / error)
    same = torch.stack([probs, probs], dim=1)
    assert metrics.normalized_disagreement(same, labels) == 0.0
    with pytest.raises(ValueError, match="at least 2 members"):
        metrics.disagreement_rate(probs[:, None])


@pytest.mark.parametrize(
    "probs, labels, message",
    [
        (torch.tensor([[0.6, 0.6]]), [0], "sum to 1"),
        (torch.tensor([[float("nan"), 1.0]]), [0], "NaN or inf"),
        (torch.tensor([[1.5, -0.5]]), [0], r"\[0, 1\]"),
        (torch.tensor([[0.5, 0.5]]), [2], r"\[0, 1\] for 2 classes"),
        (torch.tensor([[0.5, 0.5]]), [0, 1], "2 entries but the predictions have 1"),
        (torch.zeros(0, 3), [], "N >= 1"),
    ],
)
def test_bad_inputs_raise(probs, labels, message):
    with pytest.raises(ValueError, match=message):
        metrics.expected_calibration_error(probs, labels)


def test_nan_logits_raise():
    with pytest.raises(ValueError, match="NaN or inf"):
        metrics.nll_from_logits(torch.tensor([[0.0, float("nan")]]), [0])


def test_evaluate_wrappers_match_functions():
    _, probs, labels = random_probs(n=100, c=4, seed=5)
    metric = CalibrationMetrics()
    for rows in torch.split(torch.arange(100), 30):
        metric.add_batch(predictions=probs[rows].tolist(), references=labels[rows].tolist())
    result = metric.compute()
    assert result["ece"] == pytest.approx(metrics.expected_calibration_error(probs, labels))
    assert result["tace"] == pytest.approx(metrics.thresholded_adaptive_calibration_error(probs, labels))
    assert result["nll"] == pytest.approx(metrics.nll(probs, labels))
    assert result["brier"] == pytest.approx(metrics.brier_score(probs, labels))
    assert result["accuracy"] == pytest.approx(metrics.accuracy(probs, labels))
    scores = torch.rand(50, dtype=torch.float64)
    is_in = (torch.arange(50) % 3 > 0).long()
    assert OODAUROC().compute(predictions=scores.tolist(), references=is_in.tolist(), higher="in")["auroc"] == \
        pytest.approx(metrics.ood_auroc(scores[is_in == 1], scores[is_in == 0]))


def test_the_evaluate_modules_refuse_non_labels_and_an_unnamed_score_orientation():
    # hand-worked: in-distribution scores 0.9, 0.8 above the OOD ones 0.3, 0.1 -> AUROC 1 read as a confidence, 0 as
    # an uncertainty (an InSub model's `uncertainty`, higher = more likely OOD, is read the other way round)
    scores, is_in = [0.9, 0.8, 0.3, 0.1], [1, 1, 0, 0]
    assert OODAUROC().compute(predictions=scores, references=is_in, higher="in")["auroc"] == 1.0
    assert OODAUROC().compute(predictions=scores, references=is_in, higher="ood")["auroc"] == 0.0
    assert OODAUROC().compute(predictions=scores, references=is_in, higher="ood")["fpr95"] == 1.0
    with pytest.raises(ValueError, match=r"OODAUROC.compute\(higher=...\) must name how the score is oriented, one of "
                                         r"\['in', 'ood'\].*got None"):
        OODAUROC().compute(predictions=scores, references=is_in)
    with pytest.raises(ValueError, match=r"OODAUROC references must be 1 \(in-distribution\) or 0 \(OOD\), got "
                                         r"non-integer values such as \[0.7\]"):
        OODAUROC().compute(predictions=scores, references=[1, 0.7, 0, 0], higher="in")
    probs = [[0.9, 0.1], [0.2, 0.8]]
    with pytest.raises(ValueError, match=r"CalibrationMetrics references must be class indices .*non-integer values "
                                         r"such as \[0.7, 1.3\]"):
        CalibrationMetrics().compute(predictions=probs, references=[0.7, 1.3])
    metric = CalibrationMetrics()
    with pytest.raises(ValueError, match=r"CalibrationMetrics references must be class indices"):
        metric.add(prediction=probs[0], reference=0.5)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 1\] for 2 classes, got values in \[0, 2\]"):
        CalibrationMetrics().compute(predictions=probs, references=[0, 2])
    with pytest.raises(ValueError, match=r"contains NaN or inf"):
        CalibrationMetrics().compute(predictions=[[float("nan"), 1.0], [0.2, 0.8]], references=[0, 1])
    with pytest.raises(ValueError, match=r"[Mm]ismatch in the number of predictions \(2\) and references \(3\)"):
        CalibrationMetrics().compute(predictions=probs, references=[0, 1, 1])

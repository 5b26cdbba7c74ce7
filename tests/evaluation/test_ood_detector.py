"""The label-free OOD detector: the model's own bank, k and direction measured; the harness's feature banks; distances
against brute force, torch and faiss agree, direction, AUROC."""

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from insub_hf import InSubModel, InSubOODDetector
from insub_hf.evaluation.ood_detector import FeatureBank, calibrate_spread, kth_neighbour_distance

from ..conftest import tiny_config


def brute_force(queries, bank, k):
    from sklearn.metrics.pairwise import cosine_distances

    return np.sort(cosine_distances(queries.numpy(), bank.numpy()), axis=1)[:, k - 1]  # the text reading's distance


@pytest.mark.parametrize("k", [1, 5, 40])
def test_kth_neighbour_distance_matches_brute_force(k):
    g = torch.Generator().manual_seed(0)
    queries, bank = torch.randn(30, 16, generator=g), torch.randn(40, 16, generator=g)
    expected = brute_force(queries, bank, k)
    np.testing.assert_allclose(kth_neighbour_distance(queries, bank, k, chunk_size=7).numpy(), expected, atol=1e-5)


def test_faiss_and_torch_agree():
    pytest.importorskip("faiss")
    g = torch.Generator().manual_seed(1)
    queries, bank = torch.randn(50, 32, generator=g), torch.randn(500, 32, generator=g)
    torch.testing.assert_close(
        kth_neighbour_distance(queries, bank, 10, backend="faiss"), kth_neighbour_distance(queries, bank, 10),
        atol=1e-5, rtol=0,
    )


def test_points_far_from_the_bank_score_higher_and_a_separated_toy_set_has_auroc_one():
    g = torch.Generator().manual_seed(2)
    centre = torch.zeros(8)
    centre[0] = 1.0
    bank = centre + 0.1 * torch.randn(200, 8, generator=g)  # a tight cone around e_0
    near = centre + 0.1 * torch.randn(50, 8, generator=g)
    far = -centre + 0.1 * torch.randn(50, 8, generator=g)  # the opposite direction
    features = FeatureBank(bank, bank[:, None, :].repeat(1, 2, 1), k=5, backend="torch")
    scores = features.score_features(torch.cat([near, far]), torch.cat([near, far])[:, None].repeat(1, 2, 1),
                                     torch.zeros(100))
    assert scores["knn"][50:].min() > scores["knn"][:50].max()
    labels = np.r_[np.zeros(50), np.ones(50)]  # OOD positive: higher score = more likely OOD
    assert roc_auc_score(labels, scores["knn"].numpy()) == 1.0
    assert roc_auc_score(labels, scores["knn_heads"].numpy()) == 1.0


def test_the_detector_measures_the_model_s_own_bank_k_and_direction_and_they_travel_with_its_weights(tmp_path):
    torch.manual_seed(0)
    model = InSubModel(tiny_config(num_heads=3)).eval()
    train = {"pixel_values": torch.randn(20, 3, 32, 32)}
    test = {"pixel_values": torch.randn(6, 3, 32, 32)}
    noise = {"pixel_values": 5 * torch.rand(8, 3, 32, 32)}
    detector = InSubOODDetector.fit(model, train, k=3, calibration_inputs=noise)
    with torch.no_grad():
        bank_out, noise_out, out = model(**train), model(**noise), model(**test)
    expected = roc_auc_score(np.r_[np.zeros(20), np.ones(8)],
                             torch.cat([bank_out.sigma.mean(1), noise_out.sigma.mean(1)]).numpy())
    assert detector.calibration.validation_auroc == pytest.approx(expected, abs=1e-9)
    assert detector.calibration.direction == (1 if expected >= 0.5 else -1)
    block = model.config.uncertainty  # the one k, bank and direction: the model's config
    assert (block["reading"], block["k"], block["bank_size"]) == ("spread", 3, 20)
    assert block["direction"] == detector.calibration.usable_direction == detector.direction
    scores = detector.score(test)
    # no calibrated fit: no `uncertainty` score (a single reading is never served as one)
    assert set(scores) == {"head_spread", "knn"} and all(v.shape == (6,) for v in scores.values())
    np.testing.assert_allclose(scores["knn"].numpy(), brute_force(out.representation, bank_out.representation, 3),
                               atol=1e-5)
    torch.testing.assert_close(scores["head_spread"], (block["direction"] or 1) * out.sigma.mean(dim=1))
    model.save_pretrained(tmp_path)
    assert not list(tmp_path.glob("ood_detector*"))  # one weights file: the bank is in it
    reloaded = InSubModel.from_pretrained(tmp_path)
    assert reloaded.config.uncertainty == block
    for name, value in InSubOODDetector(reloaded).score(test).items():
        torch.testing.assert_close(value, scores[name], rtol=0, atol=0, msg=name)
    model.set_bank(bank_out.representation, k=3)  # the model's own `knn_distance` is the detector's `knn`
    scores = InSubOODDetector(model).score(test)
    with torch.no_grad():
        torch.testing.assert_close(model(**test).knn_distance, scores["knn"])


def test_bad_settings_are_named():
    bank = torch.randn(4, 8)
    with pytest.raises(ValueError, match=r"FeatureBank.k must be an integer >= 1 and <= 4, got 5"):
        FeatureBank(bank, bank[:, None], k=5)
    with pytest.raises(ValueError, match=r"FeatureBank.backend must be one of \['torch', 'faiss', 'auto'\]"):
        FeatureBank(bank, bank[:, None], k=1, backend="annoy")
    model = InSubModel(tiny_config(num_heads=2)).eval()
    with pytest.raises(ValueError, match=r"set_bank: k=50 must be between 1 and the bank's 4 rows"):
        InSubOODDetector.fit(model, {"pixel_values": torch.randn(4, 3, 32, 32)})  # the one default k, 50
    assert model.config.uncertainty["bank_size"] == 0  # nothing half-set


@pytest.mark.parametrize("ood_spread, direction", [(0.2, 1), (0.01, -1)])
def test_the_head_spread_direction_is_fixed_on_calibration_data(ood_spread, direction):
    # training inputs spread 0.1 +- noise; calibration OOD inputs above (high spread = OOD) or below (low = OOD)
    g = torch.Generator().manual_seed(3)
    bank = torch.randn(40, 8, generator=g)
    features = FeatureBank(bank, bank[:, None].repeat(1, 2, 1), k=3, bank_sigma=0.1 + 0.01 * torch.rand(40, generator=g))
    calibration = features.calibrate(torch.full((10,), ood_spread))
    assert calibration.direction == direction and calibration.validation_auroc == (1.0 if direction == 1 else 0.0)
    sigma = torch.tensor([0.1, ood_spread])  # an in-distribution-like and an OOD-like input
    scores = features.score_features(bank[:2], None, sigma)
    assert scores["head_spread"][1] > scores["head_spread"][0]  # higher = more likely OOD, either way
    with pytest.raises(ValueError, match="needs the training inputs' head spreads"):
        FeatureBank(bank, bank[:, None], k=1).calibrate(torch.ones(3))


def test_non_finite_rows_empty_banks_and_other_shapes_are_refused_naming_them():
    g = torch.Generator().manual_seed(5)
    bank = torch.randn(10, 4, generator=g)
    heads = bank[:, None].repeat(1, 2, 1)
    poisoned = bank.clone()
    poisoned[3, 1] = float("nan")
    with pytest.raises(ValueError, match=r"representation_bank has NaN or inf values in 1 of 10 rows \(first: \[3\]\)"):
        FeatureBank(poisoned, heads, k=2)
    with pytest.raises(ValueError, match="representation_bank must be \\(N, d\\) with N >= 1"):
        FeatureBank(torch.zeros(0, 4), torch.zeros(0, 2, 4), k=1)
    features = FeatureBank(bank, heads, k=2)
    query = torch.randn(3, 4, generator=g)
    query[2, 0] = float("inf")
    with pytest.raises(ValueError, match=r"representations has NaN or inf values in 1 of 3 rows \(first: \[2\]\)"):
        features.score_features(query, None, torch.zeros(3))
    with pytest.raises(ValueError, match=r"representations must be \(N, 4\) like the bank, got \(3, 5\)"):
        features.score_features(torch.randn(3, 5), None, torch.zeros(3))
    with pytest.raises(ValueError, match=r"head_embeddings must be \(N, M=2, q=4\) like the bank, got \(3, 3, 4\)"):
        features.score_features(torch.randn(3, 4), torch.randn(3, 3, 4), torch.zeros(3))


def test_a_bank_of_other_weights_is_refused_not_measured():
    torch.manual_seed(0)
    model = InSubModel(tiny_config(num_heads=3)).eval()
    train = {"pixel_values": torch.randn(12, 3, 32, 32)}
    detector = InSubOODDetector.fit(model, train, k=3)
    with torch.no_grad():
        next(model.heads.parameters()).add_(0.1)  # trained since: its representations are not the bank's
    with pytest.raises(ValueError, match="its k-NN bank .* was embedded with other weights than the model has now"):
        detector.score(train)


HUB_LOAD = """
from insub_hf import InSubModel, InSubOODDetector
import torch
model = InSubModel.from_pretrained("someone/insub-detector")
scores = InSubOODDetector(model).score({"pixel_values": torch.zeros(2, 3, 32, 32)})
print("k", model.config.uncertainty["k"], model.config.uncertainty["bank_size"], sorted(scores))
"""


def test_a_hub_repo_s_bank_resolves_through_the_cache_offline(tmp_path):
    import os
    import subprocess
    import sys

    model = InSubModel(tiny_config(num_heads=3)).eval()
    model.fit_uncertainty({"pixel_values": torch.randn(48, 3, 32, 32)}, k=3)  # 24 in the bank, 24 to calibrate
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--someone--insub-detector"
    model.save_pretrained(repo / "snapshots" / commit)  # the cache's layout, as a download leaves it
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(tmp_path / "hub"))
    run = subprocess.run([sys.executable, "-c", HUB_LOAD], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.splitlines()[-1] == "k 3 24 ['head_spread', 'knn', 'uncertainty']"


def test_the_spread_s_direction_is_fixed_only_where_it_holds_across_resamples():
    from insub_hf.evaluation.metrics.ood import auroc_interval, ood_auroc
    from insub_hf.evaluation.results import HeadSpreadCalibration

    generator = torch.Generator().manual_seed(0)
    train_sigma = torch.rand(300, generator=generator)
    # separated: noise spreads far higher than any training input's
    separated = calibrate_spread(train_sigma, train_sigma[:100] + 2)
    assert separated.validation_auroc == 1.0 and separated.interval == pytest.approx([1.0, 1.0])
    assert separated.usable_direction == 1
    # the same spreads in another order: AUROC 0.5, its interval holds 0.5, so no direction holds
    same = train_sigma[torch.randperm(300, generator=generator)]
    calibration = calibrate_spread(train_sigma, same)
    low, high = calibration.interval
    assert low < 0.5 < high and calibration.usable_direction is None and low <= calibration.validation_auroc <= high
    # the interval is the percentile bootstrap of sklearn's AUROC, each set drawn again with replacement
    rng = np.random.default_rng(0)
    values = [ood_auroc(rng.choice(train_sigma.numpy(), 300), rng.choice(same.numpy(), 300), higher_is_in=False)
              for _ in range(200)]
    assert (low, high) == pytest.approx((np.quantile(values, 0.05), np.quantile(values, 0.95)))
    assert auroc_interval(train_sigma, same, higher_is_in=False) == (low, high)  # a fixed seed: the same each call
    assert HeadSpreadCalibration(-1, 0.2, [0.1, 0.3]).usable_direction == -1
    assert HeadSpreadCalibration(1, 0.6, None).usable_direction == 1  # recorded before intervals: as it was

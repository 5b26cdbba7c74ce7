"""Temperature scaling (Guo et al., "On Calibration of Modern Neural Networks", ICML 2017): one temperature T > 0,
fitted by NLL on held-out data, divides the log-probabilities before the softmax. It leaves the argmax (accuracy)
unchanged and removes much of the ECE and NLL gap between models, so calibration is compared after it too (Ashukha
et al., "Pitfalls of In-Domain Uncertainty Estimation and Ensembling", ICLR 2020)."""

from __future__ import annotations

import math

import torch

from .inputs import check_labels, check_probabilities

# The search range of T: wide enough for probes that are 20x over- or under-confident
TEMPERATURE_RANGE = (0.05, 20.0)
PROBABILITY_FLOOR = 1e-12


def _log_probabilities(probabilities) -> torch.Tensor:
    return check_probabilities(probabilities).clamp_min(PROBABILITY_FLOOR).log()


def _scaled_nll(log_probs: torch.Tensor, labels: torch.Tensor, temperature: float) -> float:
    return float(-torch.log_softmax(log_probs / temperature, dim=1).gather(1, labels[:, None]).mean())


def fit_temperature(probabilities, labels) -> float:
    """The temperature minimising the NLL of `softmax(log p / T)` on held-out `probabilities` `(N, C)` (a model's,
    or an ensemble's averaged prediction: scaling the average is the choice made here, see `docs/evaluation.md`) and
    `labels` `(N,)`; a bounded search over log T in `TEMPERATURE_RANGE` (the NLL is smooth in it)."""
    from scipy.optimize import minimize_scalar

    log_probs = _log_probabilities(probabilities)
    labels = check_labels(labels, log_probs.shape[0], log_probs.shape[1])
    low, high = (math.log(t) for t in TEMPERATURE_RANGE)
    best = minimize_scalar(lambda log_t: _scaled_nll(log_probs, labels, math.exp(log_t)), bounds=(low, high),
                           method="bounded", options={"xatol": 1e-6})
    return float(math.exp(best.x))


def temperature_scale(probabilities, temperature: float) -> torch.Tensor:
    """`softmax(log p / T)` `(N, C)` of probabilities `(N, C)`: for one model the softmax of its logits / T."""
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a positive finite number, got {temperature!r}.")
    return torch.softmax(_log_probabilities(probabilities) / temperature, dim=1)

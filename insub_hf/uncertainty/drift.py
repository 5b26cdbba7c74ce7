"""Has a stream of inputs left what the model was fitted on? A conformal test martingale over the model's p-values
(`pvalues.model_pvalues`), fed batch after batch.

Under exchangeability each p-value is (super-)uniform, so for every eps in (0, 1) the running product of
eps * p ** (eps - 1) is a test (super)martingale, and so is their mixture over eps (the "simple mixture" martingale
of Vovk, Gammerman, Shafer, "Algorithmic Learning in a Random World", ch. 7). By Ville's inequality it ever reaches
1 / delta with probability at most delta: an alarm at `threshold` (default 100) is a false one at most 1 % of the
time over the whole stream, however long. The p-values here share one calibration set, which makes the bound hold
for the calibration set's draw on average rather than for each one; `benchmarks/acting_on_uncertainty.py` measures
the false alarms of seeded in-distribution streams."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .pvalues import model_pvalues

# The mixture over eps is integrated on this many midpoints of (0, 1)
EPSILON_GRID = 1000


def log_mixture_martingale(count: int, log_p_sum: float, grid: int = EPSILON_GRID) -> float:
    """log of the simple mixture martingale, the integral over eps in (0, 1) of prod_i eps * p_i ** (eps - 1),
    after `count` p-values whose logs sum to `log_p_sum` (midpoint rule on `grid` points, in log space)."""
    eps = (np.arange(grid) + 0.5) / grid
    terms = count * np.log(eps) + (eps - 1) * log_p_sum
    top = terms.max()
    return float(top + np.log(np.exp(terms - top).sum() / grid))


@dataclass
class DriftMonitor:
    """Feed it batch after batch (`update`); it keeps a conformal test martingale over the model's p-values and
    says when it first reached `threshold` (`alarm_batch`) and how strongly the stream has left the calibration
    distribution (`log10_martingale`: 2 = evidence of 100 to 1).

    Args:
        model: an InSub model with a calibrated `uncertainty` (or a pipeline or sentence-transformers model holding
            one); None to feed p-values yourself (`update(pvalues=...)`).
        threshold: the martingale value that raises the alarm, > 1; a false alarm has probability at most
            1 / threshold over the whole stream.
        processor, batch_size: as `model_pvalues` takes them.
    """

    model: object = None
    threshold: float = 100.0
    processor: object = None
    batch_size: int = 256
    count: int = 0
    log_p_sum: float = 0.0
    history: list[float] = field(default_factory=list)
    alarm_batch: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, (int, float)) or not self.threshold > 1:
            raise ValueError(f"DriftMonitor(threshold={self.threshold!r}): the martingale value that raises the "
                             "alarm, a number > 1 (100: at most a 1 % chance of a false alarm).")

    def update(self, inputs=None, pvalues=None) -> float:
        """Takes one batch, `inputs` (what `fit_uncertainty` takes) or their `pvalues (B,)`; returns the
        martingale's log10 after it. NaN p-values (inputs outside the calibrated lengths) are passed over."""
        if (inputs is None) == (pvalues is None):
            raise ValueError("DriftMonitor.update: give one batch, as inputs=... (with a model) or pvalues=...")
        if inputs is not None:
            if self.model is None:
                raise ValueError("DriftMonitor.update(inputs=...): the monitor has no model; give "
                                 "DriftMonitor(model) or feed pvalues=...")
            pvalues = model_pvalues(self.model, inputs, self.processor, self.batch_size, call="DriftMonitor.update")
        p = np.asarray(pvalues, dtype=np.float64).reshape(-1)
        p = p[~np.isnan(p)]
        if ((p <= 0) | (p > 1)).any():
            raise ValueError(f"DriftMonitor.update(pvalues=...): p-values lie in (0, 1]; got [{p.min()}, {p.max()}].")
        self.count += len(p)
        self.log_p_sum += float(np.log(p).sum())
        value = float(log_mixture_martingale(self.count, self.log_p_sum) / np.log(10))
        self.history.append(value)
        if self.alarm_batch is None and value >= np.log10(self.threshold):
            self.alarm_batch = len(self.history) - 1
        return value

    @property
    def log10_martingale(self) -> float:
        """The martingale's log10 after the last batch (0 before any)."""
        return self.history[-1] if self.history else 0.0

    @property
    def alarm(self) -> bool:
        """Whether the martingale has reached `threshold` at some batch."""
        return self.alarm_batch is not None

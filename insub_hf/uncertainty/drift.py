"""Has a stream of inputs left what the model was fitted on? A conformal test martingale over the model's p-values
(`pvalues.model_pvalues`), fed batch after batch.

The martingale is the Simple Jumper (Vovk, Petej, Nouretdinov, Ahlberg, Carlsson, Gammerman, "Retrain or not
retrain: conformal test martingales for change-point detection", COPA 2021), one-sided: its capital sits on two
betting functions of each p-value, f(p) = 1 (no bet) and f(p) = 1.5 - p (a bet that p-values are too small, i.e.
inputs less typical than the calibration rows), and before each p-value a share `JUMP` of the whole capital is
spread evenly over both, so that a long in-distribution stretch does not leave it unable to bet when the stream
shifts. Each f integrates to 1 on [0, 1] and is non-increasing, so under (super-)uniform p-values the capital is a
test supermartingale: by Ville's inequality it ever reaches 1 / delta with probability at most delta, and an alarm
at `threshold` (default 100) is a false one at most 1 % of the time over the whole stream, however long. The
p-values here share one calibration set, which makes the bound hold for the calibration set's draw on average
rather than for each one; `benchmarks/acting_on_uncertainty.py` measures the false alarms of seeded streams."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .pvalues import model_pvalues

# The share of the capital spread evenly over the betting functions before each p-value (the paper's J)
JUMP = 0.01


def jumper_step(log_capital: float, shares: np.ndarray, pvalues: np.ndarray) -> tuple[float, np.ndarray]:
    """The one-sided Simple Jumper after `pvalues (B,)`, in order: from the log of its capital and the shares
    `(2,)` of it on (no bet, the bet 1.5 - p), to both after the batch (the capital kept in log space: a shifted
    stream multiplies it by up to 1.5 per input)."""
    for p in pvalues:
        shares = (1 - JUMP) * shares + JUMP / 2  # the jump: a share of the capital spread evenly
        grown = shares * np.array([1.0, 1.5 - p])
        total = grown.sum()
        log_capital, shares = log_capital + float(np.log(total)), grown / total
    return log_capital, shares


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
    log_capital: float = 0.0
    shares: np.ndarray = field(default_factory=lambda: np.full(2, 0.5))
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
        self.log_capital, self.shares = jumper_step(self.log_capital, self.shares, p)
        value = self.log_capital / float(np.log(10))
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

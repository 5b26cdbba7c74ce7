"""What a threshold on a model's readings does, as a release card reports it: the share of in-distribution inputs
that a calibrated `uncertainty` flags above `FLAG_THRESHOLD` (about 5 % by construction), and how each reading (the
calibrated one and the single readings it combines) tells in-distribution inputs from each OOD set."""

from __future__ import annotations

import torch

from .metrics.ood import fpr_at_tpr, ood_auroc
from .ood_detector import InSubOODDetector

# The threshold a card shows and whose flag rate it reports: "less typical than 95 % of the calibration inputs"
FLAG_THRESHOLD = 0.95
# The readings a card sets side by side, as `InSubOODDetector.score` names them (each higher = more likely OOD)
SHOWN_READINGS = ("uncertainty", "knn", "head_spread")


def flag_rate(uncertainty: torch.Tensor, threshold: float = FLAG_THRESHOLD) -> float:
    """The share of the `(N,)` calibrated readings above `threshold`, compared in float32 as a user's
    `out.uncertainty > threshold` compares them (a reading of 0.8 is not above 0.8 there, though float32's 0.8 is a
    little more than the float 0.8); NaN readings (inputs outside the calibrated lengths, not served) left out."""
    return float((served(uncertainty).float() > threshold).double().mean())


def served_rows(scores: torch.Tensor) -> torch.Tensor:
    """`(N,)` bool: the rows of `scores (N,)` a calibrated `uncertainty` was served for (NaN: an input outside the
    calibrated lengths), to select the same rows of what goes with them."""
    return ~scores.isnan()


def served(scores: torch.Tensor) -> torch.Tensor:
    """`scores (N,)` without their NaN rows (`served_rows`)."""
    return scores[served_rows(scores)]


def flag_count_distribution(calibration_size: int, inputs: int, threshold: float = FLAG_THRESHOLD):
    """How many of `inputs` in-distribution inputs a calibrated `uncertainty` ranked among `calibration_size`
    calibration inputs flags above `threshold`, when both are drawn alike: a frozen `scipy.stats.betabinom` (None
    where no reading can be above the threshold).

    A reading u = (calibration scores below s) / (n + 1) is above `threshold` when s is above the c-th lowest of the
    n calibration scores, c the lowest count with c / (n + 1) > threshold. Each new input is then above it with probability
    1 - F(S_(c)), which is Beta(n + 1 - c, c) over the calibration draw; so the count among m inputs is
    beta-binomial (m, n + 1 - c, c): both the calibration sample and the scored one move the share.
    """
    from scipy.stats import betabinom

    n, m = int(calibration_size), int(inputs)
    # the lowest count of calibration scores below an input that reads above the threshold, in the reading's own
    # float32 arithmetic (`conformal_rank`, `flag_rate`), so that 950 / 1,000 counts as the reading does
    above = (torch.arange(n + 1).float() / (n + 1) > threshold).nonzero()
    if len(above) == 0:
        return None
    c = int(above[0])
    return betabinom(m, n + 1 - c, c)


def expected_flag_band(calibration_size: int, inputs: int, threshold: float = FLAG_THRESHOLD,
                       level: float = 0.95) -> tuple[float, float, float]:
    """The share of `inputs` in-distribution inputs flagged above `threshold` (`flag_count_distribution`):
    `(expected, low, high)`, the central `level` band of that share (at n = m = 1,000 and 0.95: 5.0 %, with a 95 %
    band of 3.2-7.0 %)."""
    counts, m = flag_count_distribution(calibration_size, inputs, threshold), int(inputs)
    if counts is None:  # no reading can be above the threshold
        return 0.0, 0.0, 0.0
    tail = (1 - level) / 2
    return float(counts.mean()) / m, float(counts.ppf(tail)) / m, float(counts.ppf(1 - tail)) / m


def separation_by_reading(inside: dict[str, torch.Tensor], outside: dict[str, dict[str, torch.Tensor]]) -> dict:
    """Each reading's separation of in-distribution inputs from each OOD set.

    Args:
        inside: reading name -> `(N,)` scores of in-distribution inputs (`InSubOODDetector.score`'s names; each
            higher = more likely OOD). Readings other than `SHOWN_READINGS` are ignored.
        outside: OOD set -> the same for its inputs.

    Returns:
        `{"inside": N, "flag_rate": share of inside above FLAG_THRESHOLD (None without "uncertainty"),
        "sets": {set: {reading: {"auroc": .., "fpr95": ..}}}, "unserved": {"inside": .., set: ..}}`, fractions;
        `unserved`: the rows whose "uncertainty" is NaN (outside the calibrated lengths), which its numbers leave
        out, where there are any.
    """
    readings = [name for name in SHOWN_READINGS if name in inside]
    sets = {
        name: {r: {"auroc": ood_auroc(served(inside[r]), served(scores[r]), higher_is_in=False),
                   "fpr95": fpr_at_tpr(served(inside[r]), served(scores[r]), higher_is_in=False)}
               for r in readings if r in scores}
        for name, scores in outside.items()
    }
    rate = flag_rate(inside["uncertainty"]) if "uncertainty" in inside else None
    result = {"inside": int(len(next(iter(inside.values())))), "flag_rate": rate, "sets": sets}
    unserved = {name: int(scores["uncertainty"].isnan().sum())
                for name, scores in [("inside", inside), *outside.items()] if "uncertainty" in scores}
    if any(unserved.values()):
        result["unserved"] = unserved
    return result


def measured_separation(model, inside: dict[str, torch.Tensor], outside: dict[str, dict[str, torch.Tensor]]) -> dict:
    """`separation_by_reading` of `model`'s own scores (`InSubOODDetector.score`: its calibrated `uncertainty`, k-NN
    distance and oriented spread) on the encoder inputs `inside` (in-distribution, `(N, ...)` each) against each OOD
    set's inputs `outside[name]`."""
    detector = InSubOODDetector(model)
    return separation_by_reading(detector.score(inside), {name: detector.score(x) for name, x in outside.items()})

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
    """The share of the `(N,)` calibrated readings above `threshold`."""
    return float((uncertainty.double() > threshold).double().mean())


def separation_by_reading(inside: dict[str, torch.Tensor], outside: dict[str, dict[str, torch.Tensor]]) -> dict:
    """Each reading's separation of in-distribution inputs from each OOD set.

    Args:
        inside: reading name -> `(N,)` scores of in-distribution inputs (`InSubOODDetector.score`'s names; each
            higher = more likely OOD). Readings other than `SHOWN_READINGS` are ignored.
        outside: OOD set -> the same for its inputs.

    Returns:
        `{"inside": N, "flag_rate": share of inside above FLAG_THRESHOLD (None without "uncertainty"),
        "sets": {set: {reading: {"auroc": .., "fpr95": ..}}}}`, fractions.
    """
    readings = [name for name in SHOWN_READINGS if name in inside]
    sets = {
        name: {r: {"auroc": ood_auroc(inside[r], scores[r], higher_is_in=False),
                   "fpr95": fpr_at_tpr(inside[r], scores[r], higher_is_in=False)} for r in readings if r in scores}
        for name, scores in outside.items()
    }
    rate = flag_rate(inside["uncertainty"]) if "uncertainty" in inside else None
    return {"inside": int(len(next(iter(inside.values())))), "flag_rate": rate, "sets": sets}


def measured_separation(model, inside: dict[str, torch.Tensor], outside: dict[str, dict[str, torch.Tensor]]) -> dict:
    """`separation_by_reading` of `model`'s own scores (`InSubOODDetector.score`: its calibrated `uncertainty`, k-NN
    distance and oriented spread) on the encoder inputs `inside` (in-distribution, `(N, ...)` each) against each OOD
    set's inputs `outside[name]`."""
    detector = InSubOODDetector(model)
    return separation_by_reading(detector.score(inside), {name: detector.score(x) for name, x in outside.items()})

"""The calibrated reading's arithmetic: the k-NN distance and the oriented spread, each placed among its values on
rows of the model's bank (A) as a p-value, the two combined by Fisher's rule (the sum of -log p; the spread only where
its direction held), and that combination turned into its conformal rank among the held-out in-distribution
calibration inputs (B), none of which the placing or the direction saw, so that the guarantee holds for it.

Read a calibrated `uncertainty` u as: the share of the held-out in-distribution calibration inputs that look more
typical than this input, counted among n + 1 (the n calibration inputs and this one): u = #{calibration < s} / (n + 1)
(n: split B's rows), so that 1 - u = (1 + #{calibration >= s}) / (n + 1) is exactly the conformal p-value. For an
input drawn like the calibration inputs, u is uniform on {0, 1/(n+1), ..., n/(n+1)} (ties only lower it), so
P(u > 1 - a) <= a for every a and n, and `u > 0.95` flags at most, and about, 5 % of in-distribution inputs, by
construction (Vovk et al., "Algorithmic Learning in a Random World", 2005; Bates et al., "Testing for outliers with
conformal p-values", Annals of Statistics 2023).

Why Fisher's rule on p-values: the larger of two standardised scores (`max_z`, what folders up to commit 9637199
hold) lets a weak reading's in-distribution tail decide (the released image model: 2.6 AUROC points under the k-NN
distance alone against 8x8 digits, 5.6 under the spread against MNIST); on p-values each reading speaks on one scale,
and two moderate pieces of evidence add up. Each p-value is the reading's place among A's rows interpolated
between neighbouring rows and with an exponential tail past the last, so that no two inputs tie where the 5 % is
decided and an input beyond every row keeps its order (`surprise`).
"""

from __future__ import annotations

import math

import torch
from torch import nn

# The readings a calibrated uncertainty may combine, in the order their rows are kept
COMPONENTS = ("knn", "spread")
# How the components' scores make one statistic: "fisher" (every fit), "max_z" (folders fitted up to commit 9637199)
COMBINATIONS = ("fisher", "max_z")
# The uncertainty settings calibration scores belong to (recorded as the block's `fitted_with`): a change of any of
# them makes the scores another reading's
FITTED_SETTINGS = ("k", "components", "combination", "direction", "calibration_size", "length_range")


def fitted_settings(block) -> dict:
    """The values of `FITTED_SETTINGS` in `block` (a dict), as `fitted_with` records them (lists as lists)."""
    return {key: list(block[key]) if isinstance(block.get(key), (list, tuple)) else block.get(key)
            for key in FITTED_SETTINGS}


def conformal_rank(scores: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """`(N,)` in [0, n/(n+1)]: for each of `scores (N,)`, how many of `reference (n,)` (sorted ascending, n >= 1) are
    strictly lower (calibration inputs that look more typical; higher score = less typical), over n + 1: one minus
    the conformal p-value."""
    counted = torch.searchsorted(reference, scores.to(reference.dtype).contiguous(), side="left")
    return counted.float() / (reference.shape[0] + 1)


def centre_and_scale(scores: torch.Tensor) -> torch.Tensor:
    """`(C, 2)`: per component of `scores (C, n)`, its median and interquartile range (the standard deviation where
    that is 0, else 1): what `standardised` reads with."""
    scores = scores.double()
    quartiles = torch.quantile(scores, torch.tensor([0.25, 0.5, 0.75], dtype=scores.dtype), dim=1)  # (3, C)
    return torch.stack([quartiles[1], positive_scale(quartiles[2] - quartiles[0], scores)], dim=1).float()


def positive_scale(interquartile: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """`(C,)`: the interquartile ranges `(C,)` of `rows (C, n)` where positive, else the rows' standard deviation,
    else 1: a scale to divide by."""
    spread = rows.std(dim=1) if rows.shape[1] > 1 else torch.zeros_like(interquartile)
    return torch.where(interquartile > 0, interquartile,
                       torch.where(spread > 0, spread, torch.ones_like(interquartile)))


def sorted_scale(reference: torch.Tensor) -> torch.Tensor:
    """`(C, 1)` float64: `centre_and_scale`'s scale of rows already sorted ascending, `reference (C, n)`, read off
    the rows by index (the quartiles' linear interpolation, as `torch.quantile` does) instead of sorting them again
    on every forward."""
    n = reference.shape[1]
    rows = reference.double()

    def quartile(q: float) -> torch.Tensor:
        position = q * (n - 1)
        low = math.floor(position)
        return torch.lerp(rows[:, low], rows[:, min(low + 1, n - 1)], position - low)

    # rounded through float32 as `centre_and_scale` returns it, so that both give the fit's numbers bit for bit
    return positive_scale(quartile(0.75) - quartile(0.25), rows).float().double()[:, None]


def combined(scores: torch.Tensor, centre_scale: torch.Tensor) -> torch.Tensor:
    """`(N,)`: the largest of each input's component scores `(C, N)`, each standardised by its `(C, 2)` centre and
    scale: the "max_z" combination."""
    return ((scores.float() - centre_scale[:, :1]) / centre_scale[:, 1:]).amax(dim=0)


def surprise(reference: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """`(C, N)` float64: -log p of each of `scores (C, N)` among its component's sorted rows `reference (C, n)`, where
    p = 1 - F(s) and F(s) = (i + t) / (n + 1): i of the n rows are below s, and t in (0, 1] places s between the rows
    around it (linearly), below the first (exp(-(first - s) / scale)) or past the last (1 - exp(-(s - last) / scale),
    whose -log p is then exactly (s - last) / scale + log(n + 1)); scale: the rows' interquartile range
    (`centre_and_scale`'s, read off the sorted rows: `sorted_scale`). F is continuous and strictly increasing: no
    ties, and no input past every row is lost."""
    reference, scores = reference.double(), scores.double()
    n = reference.shape[1]
    scale = sorted_scale(reference)  # (C, 1)
    below = torch.searchsorted(reference, scores.contiguous(), side="left")  # (C, N)
    lower = reference.gather(1, (below - 1).clamp(min=0))
    upper = reference.gather(1, below.clamp(max=n - 1))
    between = ((scores - lower) / (upper - lower).clamp_min(torch.finfo(torch.float64).tiny)).clamp(0, 1)
    t = torch.where(below == 0, torch.exp(-(reference[:, :1] - scores).clamp_min(0) / scale), between)
    inside = -torch.log1p(-(below + t) / (n + 1))
    past = (scores - reference[:, -1:]) / scale + math.log(n + 1)
    return torch.where(below == n, past, inside)


def fisher(reference: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """`(N,)` float32: Fisher's combination of the components' p-values, the sum over components of
    `surprise(reference, scores)`; for one component, a strictly increasing function of its score."""
    return surprise(reference, scores).sum(dim=0).float()


class CalibrationScores(nn.Module):
    """The calibrated reading's reference, saved with the weights: per component (the `COMPONENTS` that the model's
    config lists) its sorted scores on A `reference (C, n_a)` ("fisher"; "max_z": its centre and scale on A
    `centre_scale (C, 2)`), and the sorted combined scores `(n_b,)` of the calibration inputs B. Called on the
    component scores `(C, B)` it gives `(B,)` in [0, 1]."""

    def __init__(self, components: int, size_a: int, size_b: int, combination: str = "fisher"):
        super().__init__()
        self.combination = combination
        if combination == "fisher":
            self.register_buffer("reference", torch.zeros(components, size_a))
        else:
            self.register_buffer("centre_scale", torch.ones(components, 2))
        self.register_buffer("combined_scores", torch.zeros(size_b))

    def statistic(self, scores: torch.Tensor) -> torch.Tensor:
        """`(N,)`: the combination of the component scores `(C, N)` that B's scores are of."""
        if self.combination == "fisher":
            return fisher(self.reference, scores)
        return combined(scores, self.centre_scale)

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return conformal_rank(self.statistic(scores), self.combined_scores)

    @classmethod
    def fitted(cls, split_a: torch.Tensor, split_b: torch.Tensor, combination: str = "fisher") -> CalibrationScores:
        """From the component scores `(C, n_a)` of A (bank rows, each searched without itself) and `(C, n_b)` of
        the calibration inputs B (held out, not in the bank)."""
        module = cls(split_a.shape[0], split_a.shape[1], split_b.shape[1], combination)
        if combination == "fisher":
            module.reference.copy_(split_a.float().sort(dim=1).values)
        else:
            module.centre_scale.copy_(centre_and_scale(split_a))
        module.combined_scores.copy_(module.statistic(split_b).sort().values)
        return module

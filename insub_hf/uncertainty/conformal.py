"""The calibrated reading's arithmetic: the k-NN distance and the oriented spread, each standardised on rows of the
model's bank (A), combined by the larger of the two, and that combination turned into its conformal rank among the
held-out in-distribution calibration inputs (B), none of which the standardisation saw, so that the guarantee holds
for the combination.

Read a calibrated `uncertainty` u as: the share of the held-out in-distribution calibration inputs that look more
typical than this input, counted among n + 1 (the n calibration inputs and this one): u = #{calibration < s} / (n + 1)
(n: split B's rows), so that 1 - u = (1 + #{calibration >= s}) / (n + 1) is exactly the conformal p-value. For an
input drawn like the calibration inputs, u is uniform on {0, 1/(n+1), ..., n/(n+1)} (ties only lower it), so
P(u > 1 - a) <= a for every a and n, and `u > 0.95` flags at most, and about, 5 % of in-distribution inputs, by
construction (Vovk et al., "Algorithmic Learning in a Random World", 2005; Bates et al., "Testing for outliers with
conformal p-values", Annals of Statistics 2023). The readings are standardised (median, interquartile range) rather than ranked on A: ranks on
finitely many rows tie at their top, exactly where the 5 % is decided; standardised scores do not tie.
"""

from __future__ import annotations

import torch
from torch import nn

# The readings a calibrated uncertainty may combine, in the order their rows are kept
COMPONENTS = ("knn", "spread")
# The uncertainty settings calibration scores belong to (recorded as the block's `fitted_with`): a change of any of
# them makes the scores another reading's
FITTED_SETTINGS = ("k", "components", "direction", "calibration_size", "length_range")


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
    scale = quartiles[2] - quartiles[0]
    spread = scores.std(dim=1) if scores.shape[1] > 1 else torch.zeros_like(scale)
    scale = torch.where(scale > 0, scale, torch.where(spread > 0, spread, torch.ones_like(scale)))
    return torch.stack([quartiles[1], scale], dim=1).float()


def combined(scores: torch.Tensor, centre_scale: torch.Tensor) -> torch.Tensor:
    """`(N,)`: the largest of each input's component scores `(C, N)`, each standardised by its `(C, 2)` centre and
    scale (an input unusual by any reading is unusual)."""
    return ((scores.float() - centre_scale[:, :1]) / centre_scale[:, 1:]).amax(dim=0)


class CalibrationScores(nn.Module):
    """The calibrated reading's reference, saved with the weights: per component (`COMPONENTS` that the model's
    config lists) its centre and scale on A `(C, 2)`, and the sorted combined scores `(n_b,)` of the calibration
    inputs B. Called on the component scores `(C, B)` it gives `(B,)` in [0, 1]."""

    def __init__(self, components: int, size_a: int, size_b: int):
        """`size_a`: A's rows (recorded in the config; the centres and scales are what is kept of them)."""
        super().__init__()
        self.register_buffer("centre_scale", torch.ones(components, 2))
        self.register_buffer("combined_scores", torch.zeros(size_b))

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return conformal_rank(combined(scores, self.centre_scale), self.combined_scores)

    @classmethod
    def fitted(cls, split_a: torch.Tensor, split_b: torch.Tensor) -> CalibrationScores:
        """From the component scores `(C, n_a)` of A (bank rows, each searched without itself) and `(C, n_b)` of
        the calibration inputs B (held out, not in the bank)."""
        module = cls(split_a.shape[0], split_a.shape[1], split_b.shape[1])
        module.centre_scale.copy_(centre_and_scale(split_a))
        module.combined_scores.copy_(combined(split_b, module.centre_scale).sort().values)
        return module

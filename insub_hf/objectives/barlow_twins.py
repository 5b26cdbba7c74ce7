"""Barlow Twins: the cross-correlation of the two views' mean head outputs driven to the identity."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..losses.barlow_twins import barlow_twins_loss
from ..validation import checked
from .base import Objective, ObjectiveConfig, ObjectiveOutput, Student


@dataclass
class BarlowTwinsConfig(ObjectiveConfig):
    """Barlow Twins' settings (`InSubConfig.objective_config` with `objective="barlow_twins"`).

    Args:
        off_diagonal_weight: lambda, on the squared off-diagonal cross-correlations (the authors' 0.0051).
    """

    name = "barlow_twins"
    title = "Barlow Twins"

    off_diagonal_weight: float = checked(0.0051, low=0.0)


class BarlowTwinsObjective(Objective):
    """Barlow Twins with InSub heads.

    The loss reads the mean of the M heads' unnormalised outputs (`InSubModel.head_outputs`; the loss standardises
    each dimension over the batch itself). The diversity hinge reads the heads' outputs L2-normalised
    (`normalize_heads`), as for SimCLR, so alpha means the same.

    References:
        Zbontar, Jing, Misra, LeCun & Deny, "Barlow Twins: Self-Supervised Learning via Redundancy Reduction",
        ICML 2021.
    """

    config_class = BarlowTwinsConfig

    def __init__(self, config, student: Student):
        super().__init__(config, student)
        self.off_diagonal_weight = config.objective_options.off_diagonal_weight

    def forward(self, student: Student, views: dict[str, torch.Tensor], **extra: torch.Tensor) -> ObjectiveOutput:
        representation = student.encoder(**views)  # (2B, d)
        raw = student.head_outputs(representation)  # (2B, M, q)
        z1, z2 = raw.mean(dim=1).chunk(2)
        loss = barlow_twins_loss(z1, z2, self.off_diagonal_weight)
        return ObjectiveOutput(loss, student.normalize_embeddings(raw), representation)

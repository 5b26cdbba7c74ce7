"""VICReg: variance, invariance and covariance terms on the mean of the M heads' outputs."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..losses.vicreg import vicreg_loss
from ..validation import checked
from .base import Objective, ObjectiveConfig, ObjectiveOutput, Student


@dataclass
class VICRegConfig(ObjectiveConfig):
    """VICReg's settings (`InSubConfig.objective_config` with `objective="vicreg"`); the authors' weights.

    Args:
        invariance_weight: lambda, on the mean squared distance of the two views.
        variance_weight: mu, on the hinge keeping each dimension's standard deviation over the batch at 1.
        covariance_weight: nu, on the squared off-diagonal covariances.
    """

    name = "vicreg"
    title = "VICReg"

    invariance_weight: float = checked(25.0, low=0.0)
    variance_weight: float = checked(25.0, low=0.0)
    covariance_weight: float = checked(1.0, low=0.0)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (self.invariance_weight or self.variance_weight or self.covariance_weight):  # a loss of 0: no training
            raise ValueError("InSubConfig.objective_config: VICReg's invariance_weight, variance_weight and "
                             "covariance_weight are all 0, so its loss is 0 and nothing trains; give at least one "
                             "weight > 0 (the authors': 25, 25, 1).")


class VICRegObjective(Objective):
    """VICReg with InSub heads.

    The loss reads the mean of the M heads' **unnormalised** outputs (`InSubModel.head_outputs`): its variance term
    asks each dimension for a standard deviation of 1 over the batch, which unit vectors cannot give. The diversity
    hinge reads the heads' outputs L2-normalised (`normalize_heads`), as for SimCLR, so alpha means the same.
    Whether the loss pulls the heads together is measured by `insub-hf mechanism` (docs/objectives.md).

    References:
        Bardes, Ponce & LeCun, "VICReg: Variance-Invariance-Covariance Regularization for Self-Supervised
        Learning", ICLR 2022.
    """

    min_batch = 2  # its loss normalises over the batch
    config_class = VICRegConfig

    def __init__(self, config, student: Student):
        super().__init__(config, student)
        options = config.objective_options
        self.weights = dict(invariance_weight=options.invariance_weight, variance_weight=options.variance_weight,
                            covariance_weight=options.covariance_weight)

    def forward(self, student: Student, views: dict[str, torch.Tensor], **extra: torch.Tensor) -> ObjectiveOutput:
        representation = student.encoder(**views)  # (2B, d)
        raw = student.head_outputs(representation)  # (2B, M, q)
        z1, z2 = raw.mean(dim=1).chunk(2)
        return ObjectiveOutput(vicreg_loss(z1, z2, **self.weights), student.normalize_embeddings(raw), representation)

"""SimCLR: NT-Xent between the two views' mean head embeddings."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..losses.ntxent import nt_xent_loss
from ..validation import checked
from .base import Objective, ObjectiveConfig, ObjectiveOutput, Student


@dataclass
class SimCLRConfig(ObjectiveConfig):
    """SimCLR's settings (`InSubConfig.objective_config` with `objective="simclr"`).

    Args:
        temperature: NT-Xent temperature tau.
        base_temperature: the loss is scaled by `temperature / base_temperature`, as in the authors' (SupCon) code
            (0.07); None leaves it unscaled. It sets how strong the NT-Xent is against the hinge.
        normalize_mean: L2-normalise the mean embedding inside the loss (the paper's written cosine similarity).
            False (the authors' code, whose runs made the paper's tables) takes the dot product of the raw mean of
            the normalised heads: a longer mean, i.e. heads that agree, gives sharper logits, so the loss pulls the
            heads together and the hinge keeps them apart. With True nothing pulls them together.
    """

    name = "simclr"
    title = "SimCLR (NT-Xent)"

    temperature: float = checked(0.5, low=0.0, low_inclusive=False)
    base_temperature: float | None = checked(0.07, low=0.0, low_inclusive=False, optional=True)
    normalize_mean: bool = checked(False, choices=(True, False))


    @property
    def loss_scale(self) -> float:
        """The factor on the NT-Xent: `temperature / base_temperature`, or 1 without a base temperature."""
        return 1.0 if self.base_temperature is None else self.temperature / self.base_temperature


class SimCLRObjective(Objective):
    """NT-Xent (`SimCLRConfig.temperature`) on the mean over the M heads, times `SimCLRConfig.loss_scale`.

    By default the authors' objective: a dot product of the raw mean of the L2-normalised heads, scaled by
    tau / 0.07; `normalize_mean=True` takes the cosine of the mean instead (the paper's written formula).

    References:
        Chen et al., "A Simple Framework for Contrastive Learning of Visual Representations", ICML 2020.
    """

    config_class = SimCLRConfig

    def __init__(self, config, student: Student):
        super().__init__(config, student)
        options = config.objective_options
        self.temperature = options.temperature
        self.normalize_mean = options.normalize_mean
        self.scale = options.loss_scale

    def forward(self, student: Student, views: dict[str, torch.Tensor], **extra: torch.Tensor) -> ObjectiveOutput:
        representation = student.encoder(**views)  # (2B, d)
        z = student.embed_heads(representation)  # (2B, M, q)
        z1, z2 = z.chunk(2, dim=0)
        loss = self.scale * nt_xent_loss(z1.mean(dim=1), z2.mean(dim=1), self.temperature, self.normalize_mean).mean()
        return ObjectiveOutput(loss, z, representation)

"""SimCLR: NT-Xent between the two views' mean head embeddings."""

from __future__ import annotations

import torch
from torch import nn

from ..losses.ntxent import nt_xent_loss
from .base import Objective, ObjectiveOutput


class SimCLRObjective(Objective):
    """NT-Xent (`config.temperature`) on the mean over the M heads, times `config.ssl_loss_scale`.

    By default the authors' objective: a dot product of the raw mean of the L2-normalised heads, scaled by
    tau / 0.07; `config.normalize_mean=True` takes the cosine of the mean instead (the paper's written formula).

    References:
        Chen et al., "A Simple Framework for Contrastive Learning of Visual Representations", ICML 2020.
    """

    name = "simclr"
    title = "SimCLR (NT-Xent)"

    def __init__(self, config, student: nn.Module):
        super().__init__(config, student)
        self.temperature = config.temperature
        self.normalize_mean = config.normalize_mean
        self.scale = config.ssl_loss_scale

    def forward(self, student: nn.Module, views: dict[str, torch.Tensor], **extra: torch.Tensor) -> ObjectiveOutput:
        representation = student.encoder(**views)  # (2B, d)
        z = student.embed_heads(representation)  # (2B, M, q)
        z1, z2 = z.chunk(2, dim=0)
        loss = self.scale * nt_xent_loss(z1.mean(dim=1), z2.mean(dim=1), self.temperature, self.normalize_mean).mean()
        return ObjectiveOutput(loss, z, representation)

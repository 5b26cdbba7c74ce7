"""SimCLR: NT-Xent between the two views' mean head embeddings."""

from __future__ import annotations

import torch
from torch import nn

from ..losses.ntxent import nt_xent_loss
from .base import Objective, ObjectiveOutput


class SimCLRObjective(Objective):
    """NT-Xent (`config.temperature`, cosine similarity when `config.normalize_mean`) on the mean over the M heads.

    References:
        Chen et al., "A Simple Framework for Contrastive Learning of Visual Representations", ICML 2020.
    """

    name = "simclr"
    title = "SimCLR (NT-Xent)"

    def __init__(self, config, student: nn.Module):
        super().__init__(config, student)
        self.temperature = config.temperature
        self.normalize_mean = config.normalize_mean

    def forward(self, student: nn.Module, views: dict[str, torch.Tensor], **extra: torch.Tensor) -> ObjectiveOutput:
        representation = student.encoder(**views)  # (2B, d)
        z = student.embed_heads(representation)  # (2B, M, q)
        z1, z2 = z.chunk(2, dim=0)
        loss = nt_xent_loss(z1.mean(dim=1), z2.mean(dim=1), self.temperature, self.normalize_mean).mean()
        return ObjectiveOutput(loss, z, representation)

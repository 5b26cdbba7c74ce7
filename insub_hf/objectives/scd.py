"""SCD for sentences: two encoder passes under two dropout rates, self-contrast plus head-averaged decorrelation."""

from __future__ import annotations

import torch
from torch import nn

from ..encoders.text import dropout_rate
from ..losses.scd import scd_loss
from .base import Objective, ObjectiveOutput


class SCDObjective(Objective):
    """Self-Contrastive Decorrelation with the decorrelation over the M heads (`losses/scd.py`).

    The views are separate encoder passes under dropout rates `config.scd_dropout` and `config.scd_dropout_2`
    (every `nn.Dropout` of the encoder, attention dropout included).

    References:
        Klein & Nabi, "SCD: Self-Contrastive Decorrelation for Sentence Embeddings", ACL 2022.
    """

    name = "scd"
    title = "SCD (self-contrastive decorrelation)"

    def __init__(self, config, student: nn.Module):
        super().__init__(config, student)
        self.dropout_rates = (config.scd_dropout, config.scd_dropout_2)
        self.loss_weights = dict(
            temperature=config.scd_temperature, alpha=config.scd_alpha, beta=config.scd_beta,
            off_diagonal_weight=config.scd_lambda,
        )

    def forward(self, student: nn.Module, views: dict[str, torch.Tensor], **extra: torch.Tensor) -> ObjectiveOutput:
        passes = []
        for i, rate in enumerate(self.dropout_rates):
            with dropout_rate(student.encoder, rate):
                passes.append(student.encoder(**{k: v.chunk(2)[i] for k, v in views.items()}))  # (B, d)
        representation = torch.cat(passes)  # (2B, d)
        z = student.embed_heads(representation)  # (2B, M, q)
        p1, p2 = z.chunk(2)
        return ObjectiveOutput(scd_loss(*passes, p1, p2, **self.loss_weights), z, representation)

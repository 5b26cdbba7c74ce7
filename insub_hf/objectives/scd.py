"""SCD for sentences: two encoder passes under two dropout rates, self-contrast plus head-averaged decorrelation."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..encoders.text import dropout_rate
from ..losses.scd import scd_loss
from ..validation import checked
from .base import Objective, ObjectiveConfig, ObjectiveOutput, Student


@dataclass
class SCDConfig(ObjectiveConfig):
    """SCD's settings (`InSubConfig.objective_config` with `objective="scd"`).

    Args:
        dropout, dropout_2: the encoder's dropout rate for the first and the second view.
        temperature: tau of the self-contrast (repulsion) term.
        alpha: weight of the self-contrast term.
        beta: weight of the decorrelation term.
        off_diagonal_weight: weight of the off-diagonal part inside the decorrelation term (SCD's lambda).
    """

    name = "scd"
    title = "SCD (self-contrastive decorrelation)"
    encoder_inputs = ("input_ids",)
    modality = "text"

    dropout: float = checked(0.05, low=0.0, high=1.0, high_inclusive=False)
    dropout_2: float = checked(0.155, low=0.0, high=1.0, high_inclusive=False)
    temperature: float = checked(0.05, low=0.0, low_inclusive=False)
    alpha: float = checked(1.0, low=0.0)
    beta: float = checked(0.005225, low=0.0)
    off_diagonal_weight: float = checked(0.012, low=0.0)


class SCDObjective(Objective):
    """Self-Contrastive Decorrelation with the decorrelation over the M heads (`losses/scd.py`).

    The views are separate encoder passes under dropout rates `SCDConfig.dropout` and `SCDConfig.dropout_2`
    (every `nn.Dropout` of the encoder, attention dropout included).

    References:
        Klein & Nabi, "SCD: Self-Contrastive Decorrelation for Sentence Embeddings", ACL 2022.
    """

    min_batch = 2  # its loss normalises over the batch
    config_class = SCDConfig

    def __init__(self, config, student: Student):
        super().__init__(config, student)
        options = config.objective_options
        self.dropout_rates = (options.dropout, options.dropout_2)
        self.loss_weights = dict(
            temperature=options.temperature, alpha=options.alpha, beta=options.beta,
            off_diagonal_weight=options.off_diagonal_weight,
        )

    def forward(self, student: Student, views: dict[str, torch.Tensor], **extra: torch.Tensor) -> ObjectiveOutput:
        passes = []
        for i, rate in enumerate(self.dropout_rates):
            with dropout_rate(student.encoder, rate):
                passes.append(student.encoder(**{k: v.chunk(2)[i] for k, v in views.items()}))  # (B, d)
        representation = torch.cat(passes)  # (2B, d)
        z = student.embed_heads(representation)  # (2B, M, q)
        p1, p2 = z.chunk(2)
        return ObjectiveOutput(scd_loss(*passes, p1, p2, **self.loss_weights), z, representation)

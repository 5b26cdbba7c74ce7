"""Self-GenomeNet for DNA: each sequence's context predicts its reverse complement's, through per-distance
projections owned by the objective."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..encoders.dna_encoding import reverse_complement
from ..losses.genomenet import DistanceProjections, self_genomenet_loss
from ..validation import checked
from .base import Objective, ObjectiveConfig, ObjectiveOutput, Student


@dataclass
class SelfGenomeNetConfig(ObjectiveConfig):
    """Self-GenomeNet's settings (`InSubConfig.objective_config` with `objective="genomenet"`).

    Args:
        distances: D, how many distances (in conv windows) the context predicts ahead.
    """

    name = "genomenet"
    title = "Self-GenomeNet"
    encoder_inputs = ("dna_one_hot",)
    modality = "dna"

    distances: int = checked(3, low=1, integer=True)


class SelfGenomeNetObjective(Objective):
    """The batch holds each sequence; the second view is its reverse complement, built here.

    The M heads embed every window's context (the encoder's token-level features); their mean feeds the contrastive
    prediction (`losses/genomenet.py`). The diversity hinge reads the heads on the pooled representation.

    References:
        Gunduz et al., "A self-supervised deep learning method for data-efficient training in genomics", 2021/2023.
    """

    config_class = SelfGenomeNetConfig
    initialized_modules = (DistanceProjections,)

    def __init__(self, config, student: Student):
        super().__init__(config, student)
        self.projections = DistanceProjections(config.objective_options.distances, config.head_output_size)

    def second_view(
        self, first: dict[str, torch.Tensor | None], second: dict[str, torch.Tensor | None]
    ) -> dict[str, torch.Tensor | None]:
        if first.get("dna_one_hot") is None:
            return second  # the model's input check names what is missing
        if second.get("dna_one_hot") is not None:
            raise ValueError(
                "objective='genomenet' pairs each sequence with its own reverse complement, built here; pass only "
                "dna_one_hot (e.g. DNAViews(..., two_views=False))."
            )
        return {**second, "dna_one_hot": reverse_complement(first["dna_one_hot"])}

    def forward(self, student: Student, views: dict[str, torch.Tensor], **extra: torch.Tensor) -> ObjectiveOutput:
        """views: `dna_one_hot` `(2B, L, 4)`, the sequences then their reverse complements."""
        if set(views) != {"dna_one_hot"}:
            raise ValueError("InSubConfig.objective='genomenet' needs the genomic encoder (dna_one_hot).")
        hidden = student.encoder.forward_features(**views)  # (2B, T, H)
        n, t, h = hidden.shape
        per_position = student.embed_heads(hidden.reshape(n * t, h)).view(n, t, student.config.num_heads, -1)
        context, context_rc = per_position.mean(dim=2).chunk(2)  # (B, T, q) each
        loss = self_genomenet_loss(context, context_rc, self.projections.weight).mean()
        representation = student.encoder.pool(hidden, **views)  # (2B, H)
        return ObjectiveOutput(loss, student.embed_heads(representation), representation)

"""BYOL: an online predictor regresses an EMA target network's projection of the other view."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..losses.byol import byol_loss
from ..validation import checked
from .base import Objective, ObjectiveConfig, ObjectiveOutput, Student
from .ema import cosine_momentum, ema_update_


@dataclass
class BYOLConfig(ObjectiveConfig):
    """BYOL's settings (`InSubConfig.objective_config` with `objective="byol"`).

    Args:
        predictor_hidden_size: the predictor MLP's hidden width (BYOL: 4096; a CPU-sized default).
        target_momentum: EMA momentum of the target at step 0, cosine-scheduled to `final_target_momentum`.
        final_target_momentum: EMA momentum at the last step.
    """

    name = "byol"
    title = "BYOL"

    predictor_hidden_size: int = checked(512, low=1, integer=True)
    target_momentum: float = checked(0.996, low=0.0, high=1.0)
    final_target_momentum: float = checked(1.0, low=0.0, high=1.0)


class BYOLPredictor(nn.Module):
    """BYOL's predictor q: Linear -> BatchNorm -> ReLU -> Linear, `(N, q)` -> `(N, q)`."""

    def __init__(self, size: int, hidden_size: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(size, hidden_size), nn.BatchNorm1d(hidden_size), nn.ReLU(inplace=True), nn.Linear(hidden_size, size)
        )

    def reset_parameters(self) -> None:
        for module in self.net:
            if hasattr(module, "reset_parameters"):
                module.reset_parameters()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class BYOLObjective(Objective):
    """BYOL with InSub heads.

    The online projection of a view is the mean of the M L2-normalised head embeddings (as SimCLR's); the predictor
    (`predictor`, one MLP shared by the heads) maps it to a prediction of the target's projection of the other view,
    the mean of the target's normalised heads. The loss is symmetric, `byol_loss(p1, t2) + byol_loss(p2, t1)`,
    averaged over the batch. The target (`target`, encoder and heads) is an EMA of the student without gradients,
    moved once per optimiser step (`step_end`) with a cosine momentum schedule, so gradient accumulation and a
    resumed run give the same target. The diversity hinge reads the student's normalised head embeddings.

    References:
        Grill et al., "Bootstrap Your Own Latent: A New Approach to Self-Supervised Learning", NeurIPS 2020.
    """

    config_class = BYOLConfig
    initialized_modules = (BYOLPredictor,)

    def __init__(self, config, student: Student):
        super().__init__(config, student)
        options = config.objective_options
        self.predictor = BYOLPredictor(config.head_output_size, options.predictor_hidden_size)
        self.target = student.follower_copy().requires_grad_(False)
        self.momenta = (options.target_momentum, options.final_target_momentum)

    @torch.no_grad()
    def sync_with_student(self, student: Student) -> None:
        self.target.load_state_dict(student.weights_state())

    def forward(self, student: Student, views: dict[str, torch.Tensor], **extra: torch.Tensor) -> ObjectiveOutput:
        representation = student.encoder(**views)  # (2B, d)
        z = student.embed_heads(representation)  # (2B, M, q)
        p1, p2 = self.predictor(z.mean(dim=1)).chunk(2)
        with torch.no_grad():
            t1, t2 = self.target.embed_heads(self.target.encoder(**views)).mean(dim=1).chunk(2)
        loss = (byol_loss(p1, t2) + byol_loss(p2, t1)).mean()
        return ObjectiveOutput(loss, z, representation)

    def step_end(self, student: Student, step: int, total_steps: int) -> None:
        ema_update_(self.target, student, cosine_momentum(step, total_steps, *self.momenta))

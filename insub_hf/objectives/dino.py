"""DINO: the student matches an EMA teacher's centred, sharpened outputs; the teacher, its centre and the schedules
live here."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
from torch import nn

from ..losses.dino import DINOLoss
from ..validation import checked
from .base import Objective, ObjectiveConfig, ObjectiveOutput, Student
from .ema import cosine_momentum, ema_update_


@dataclass
class DINOConfig(ObjectiveConfig):
    """DINO's settings (`InSubConfig.objective_config` with `objective="dino"`).

    Args:
        out_dim: K, the output size of DINO's weight-normalised last layer (65536 for ImageNet, a small default for
            CPU). It is shared by the heads and reads the mean of their `head_output_size`-dim L2-normalised
            bottleneck embeddings, which are what the diversity hinge spreads.
        student_temperature: tau_s.
        teacher_temperature: tau_t after the warm-up.
        warmup_teacher_temperature: tau_t at step 0, raised linearly to `teacher_temperature`.
        warmup_teacher_temperature_fraction: the share of training steps the warm-up takes (DINO: 30 of 100 epochs).
        teacher_momentum: EMA momentum at step 0, cosine-scheduled to `final_teacher_momentum`.
        final_teacher_momentum: EMA momentum at the last step.
        center_momentum: momentum of the teacher-output centre.
    """

    name = "dino"
    title = "DINO"
    encoder_inputs = ("pixel_values",)

    out_dim: int = checked(256, low=1, integer=True)
    student_temperature: float = checked(0.1, low=0.0, low_inclusive=False)
    teacher_temperature: float = checked(0.07, low=0.0, low_inclusive=False)
    warmup_teacher_temperature: float = checked(0.04, low=0.0, low_inclusive=False)
    warmup_teacher_temperature_fraction: float = checked(0.3, low=0.0, high=1.0)
    teacher_momentum: float = checked(0.996, low=0.0, high=1.0)
    final_teacher_momentum: float = checked(1.0, low=0.0, high=1.0)
    center_momentum: float = checked(0.9, low=0.0, high=1.0)


def teacher_temperature(step: int, warmup_steps: int, start: float = 0.04, end: float = 0.07) -> float:
    """Teacher temperature: linear warm-up from `start` to `end` over `warmup_steps` optimiser steps, then `end`."""
    if warmup_steps <= 0 or step >= warmup_steps:
        return end
    return start + (end - start) * max(step, 0) / warmup_steps


class WeightNormedLinear(nn.Module):
    """DINO's weight-normalised last layer (`weight_norm` with the gain fixed to 1, `norm_last_layer=True`), no bias.

    Every output column is used at unit norm, so for L2-normalised inputs the outputs are cosines in [-1, 1]. In
    InSub it is shared by the M heads and applied to their mean bottleneck embedding: being linear, that equals the
    mean of the M heads' outputs through it, at the cost of one head.

    Args:
        in_dim: q, the bottleneck size.
        out_dim: K, DINO's output dimension (65536 for ImageNet).

    Shapes: `(..., q)` -> `(..., K)`.
    """

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(in_dim, out_dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.weight.shape[0])
        nn.init.uniform_(self.weight, -bound, bound)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return z @ torch.nn.functional.normalize(self.weight, dim=0)  # unit columns


class DINOObjective(Objective):
    """DINO on the mean head output.

    Each crop's output is `prototypes`, DINO's weight-normalised last layer shared by the heads, applied to the mean
    of its M head embeddings. The teacher (`teacher` + `teacher_prototypes`) is an EMA of the student without
    gradients; `loss` holds the teacher centre. The two views are the global crops; `local_pixel_values`
    `(B, N, C, h, w)` adds N local crops for the student. Schedules per optimiser step (`step_begin`, `step_end`,
    called by `InSubTrainer`): the teacher temperature warms up, then the centre and the teacher move, so a resumed
    run continues them from the global step.

    References:
        Caron et al., "Emerging Properties in Self-Supervised Vision Transformers", ICCV 2021.
    """

    config_class = DINOConfig
    extra_inputs = ("local_pixel_values",)
    initialized_modules = (WeightNormedLinear,)

    def __init__(self, config, student: Student):
        super().__init__(config, student)
        options = config.objective_options
        self.prototypes = WeightNormedLinear(config.head_output_size, options.out_dim)
        self.teacher = student.follower_copy().requires_grad_(False)
        self.teacher_prototypes = copy.deepcopy(self.prototypes).requires_grad_(False)
        self.loss = DINOLoss(options.out_dim, options.center_momentum, options.student_temperature)
        # a tensor the schedule fills in place: a Python float would be a constant of the compiled graph, which
        # torch.compile would recompile at every step of the warm-up
        self.register_buffer("teacher_temperature", torch.tensor(options.warmup_teacher_temperature), persistent=False)
        self.warmup_fraction = options.warmup_teacher_temperature_fraction
        self.temperatures = (options.warmup_teacher_temperature, options.teacher_temperature)
        self.momenta = (options.teacher_momentum, options.final_teacher_momentum)

    @torch.no_grad()
    def sync_with_student(self, student: Student) -> None:
        self.teacher.load_state_dict(student.weights_state())
        self.teacher_prototypes.load_state_dict(self.prototypes.state_dict())

    def step_begin(self, step: int, total_steps: int) -> None:
        self.teacher_temperature.fill_(
            teacher_temperature(step, round(self.warmup_fraction * total_steps), *self.temperatures)
        )

    def step_end(self, student: Student, step: int, total_steps: int) -> None:
        self.loss.update_center()
        momentum = cosine_momentum(step, total_steps, *self.momenta)
        ema_update_(self.teacher, student, momentum)
        ema_update_(self.teacher_prototypes, self.prototypes, momentum)

    def forward(
        self, student: Student, views: dict[str, torch.Tensor], local_pixel_values: torch.Tensor | None = None
    ) -> ObjectiveOutput:
        """views: the two global crops `pixel_values` `(2B, C, H, W)`; local crops `(B, N, C, h, w)`."""
        if "pixel_values" not in views:
            raise ValueError(
                f"InSubConfig.objective='dino' needs an image encoder (pixel_values); this encoder reads "
                f"{sorted(views)}."
            )
        globals_ = views["pixel_values"]
        representation = student.encoder(**views)  # (2B, d)
        z = student.embed_heads(representation)  # (2B, M, q)
        outputs = list(self.prototypes(z.mean(dim=1)).chunk(2))  # 2 x (B, K)
        if local_pixel_values is not None:
            outputs += self._local_outputs(student, local_pixel_values, globals_)
        with torch.no_grad():
            teacher = self.teacher_prototypes(self.teacher.embed_heads(self.teacher.encoder(**views)).mean(dim=1))
        loss = self.loss(torch.stack(outputs), torch.stack(teacher.chunk(2)), self.teacher_temperature)
        return ObjectiveOutput(loss.mean(), z, representation)

    def _local_outputs(self, student: Student, local: torch.Tensor, globals_: torch.Tensor) -> list[torch.Tensor]:
        """The student's outputs of the N local crops `(B, N, C, h, w)`: N x `(B, K)`."""
        b = globals_.shape[0] // 2
        if local.dim() != 5 or local.shape[0] != b:
            raise ValueError(
                f"local_pixel_values must be (batch={b}, crops, channels, height, width), got {tuple(local.shape)}."
            )
        if max(local.shape[-2:]) > min(globals_.shape[-2:]):
            raise ValueError(
                f"local crops ({tuple(local.shape[-2:])}) are larger than the global crops "
                f"({tuple(globals_.shape[-2:])}); local crops must not exceed the global crop size."
            )
        n = local.shape[1]
        crops = local.transpose(0, 1).reshape(n * b, *local.shape[2:])  # view-major
        # the local crops are smaller than the encoder's image_size on purpose
        z_local = student.embed_heads(student.encoder(pixel_values=crops, interpolate_pos_encoding=True))  # (N*B, M, q)
        return list(self.prototypes(z_local.mean(dim=1)).chunk(n))

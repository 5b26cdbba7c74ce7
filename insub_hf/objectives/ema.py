"""A target network that follows the student as an exponential moving average (DINO's teacher, BYOL's target)."""

from __future__ import annotations

import math

import torch
from torch import nn

from ..validation import check_range


def cosine_momentum(step: int, total_steps: int, base: float = 0.996, final: float = 1.0) -> float:
    """Teacher momentum at optimiser step `step` of `total_steps`: `final - (final - base) (cos(pi s / S) + 1) / 2`,
    so `base` at step 0 and `final` at the last step."""
    check_range("teacher momentum", base, low=0.0, high=1.0)
    check_range("final teacher momentum", final, low=0.0, high=1.0)
    progress = min(max(step, 0) / max(total_steps, 1), 1.0)
    return final - (final - base) * (math.cos(math.pi * progress) + 1) / 2


@torch.no_grad()
def ema_update_(teacher: nn.Module, student: nn.Module, momentum: float) -> None:
    """`teacher <- momentum * teacher + (1 - momentum) * student`, parameter by parameter, in place.

    Buffers (BatchNorm statistics) are not averaged: each network keeps its own, as in DINO.
    """
    teacher_params = list(teacher.parameters())
    student_params = list(student.parameters())
    if len(teacher_params) != len(student_params):
        raise ValueError(
            f"ema_update_: the teacher has {len(teacher_params)} parameter tensors, the student {len(student_params)}; "
            "they must share the architecture."
        )
    for t, s in zip(teacher_params, student_params):
        if t.shape != s.shape:
            raise ValueError(f"ema_update_: teacher parameter {tuple(t.shape)} vs student {tuple(s.shape)}.")
        t.mul_(momentum).add_(s.detach(), alpha=1 - momentum)

"""DINO's teacher: EMA update, momentum and temperature schedules, and the Trainer callback that runs them."""

from __future__ import annotations

import math

import torch
from torch import nn
from transformers import TrainerCallback

from .validation import check_range


def cosine_momentum(step: int, total_steps: int, base: float = 0.996, final: float = 1.0) -> float:
    """Teacher momentum at optimiser step `step` of `total_steps`: `final - (final - base) (cos(pi s / S) + 1) / 2`,
    so `base` at step 0 and `final` at the last step."""
    check_range("teacher momentum", base, low=0.0, high=1.0)
    check_range("final teacher momentum", final, low=0.0, high=1.0)
    progress = min(max(step, 0) / max(total_steps, 1), 1.0)
    return final - (final - base) * (math.cos(math.pi * progress) + 1) / 2


def teacher_temperature(step: int, warmup_steps: int, start: float = 0.04, end: float = 0.07) -> float:
    """Teacher temperature: linear warm-up from `start` to `end` over `warmup_steps` optimiser steps, then `end`."""
    if warmup_steps <= 0 or step >= warmup_steps:
        return end
    return start + (end - start) * max(step, 0) / warmup_steps


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


class DINOScheduleCallback(TrainerCallback):
    """Drives a DINO `InSubForPreTraining` inside the Trainer.

    Before each optimiser step it sets the teacher temperature for that step; after it (once per step, so gradient
    accumulation is covered) it moves the centre and the teacher. Both schedules are functions of the global step
    and the planned number of steps, so a resumed run continues them where the checkpoint left off; the teacher and
    the centre themselves are model weights and buffers, saved and restored with every checkpoint.
    """

    @staticmethod
    def _model(kwargs) -> nn.Module | None:
        model = kwargs.get("model")
        model = getattr(model, "module", model)
        return model if hasattr(model, "dino_step_begin") else None

    def on_step_begin(self, args, state, control, **kwargs):
        model = self._model(kwargs)
        if model is not None:
            model.dino_step_begin(state.global_step, state.max_steps)

    def on_step_end(self, args, state, control, **kwargs):
        model = self._model(kwargs)
        if model is not None:
            model.dino_step_end(state.global_step - 1, state.max_steps)

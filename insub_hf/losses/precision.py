"""Losses computed in float32 under mixed precision."""

from __future__ import annotations

import functools
from typing import Callable, TypeVar

import torch

F = TypeVar("F", bound=Callable)


def upcast_half(value):
    """bf16 / fp16 tensors -> float32; float32 and float64 stay as they are."""
    return value.float() if isinstance(value, torch.Tensor) and value.dtype in (torch.float16, torch.bfloat16) else value


def in_float32(loss: F) -> F:
    """Runs `loss` with its half-precision tensor arguments cast to float32 and autocast off inside.

    Under bf16 autocast a matmul keeps ~3 significant digits: the logits of a contrastive loss over 2B candidates
    (NT-Xent at temperature 0.2 reaches |logit| 5) and the small spreads the diversity hinge compares to alpha would
    carry that error into the gradient. The losses' inputs are `(B, M, q)` embeddings, so float32 costs nothing next
    to the encoder. Outside autocast (and for float32 inputs) this changes nothing.
    """

    @functools.wraps(loss)
    def wrapper(*args, **kwargs):
        device = next((a.device.type for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), "cpu")
        with torch.autocast(device, enabled=False):
            return loss(*map(upcast_half, args), **{k: upcast_half(v) for k, v in kwargs.items()})

    return wrapper  # type: ignore[return-value]

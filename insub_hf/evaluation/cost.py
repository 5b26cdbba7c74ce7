"""What a model costs to train: parameters and peak training memory of one step."""

from __future__ import annotations

import torch


def count_parameters(model: torch.nn.Module) -> int:
    """Number of parameters (shared weights counted once)."""
    return sum(p.numel() for p in model.parameters())


def training_memory_mb(model: torch.nn.Module, step, optimizer_state_per_param: int = 2) -> float:
    """Peak memory of one training step in MiB.

    On CUDA: the allocator's peak while `step()` runs. On the CPU, where torch keeps no allocator statistics,
    the step's memory is counted exactly instead: parameters + gradients + optimizer state (AdamW keeps
    `optimizer_state_per_param` = 2 tensors per parameter) + every tensor autograd saves for the backward pass.

    Args:
        model: the model being trained.
        step: a callable running forward and backward of one batch (it must call `.backward()`).
    """
    device = next(model.parameters()).device
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() / 2**20
    saved = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        saved += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step()
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    return (saved + (2 + optimizer_state_per_param) * params) / 2**20

"""What a model costs to train: parameters, peak training memory of one step, and the device it ran on."""

from __future__ import annotations

import torch


def count_parameters(model: torch.nn.Module) -> int:
    """Number of parameters (shared weights counted once)."""
    return sum(p.numel() for p in model.parameters())


def device_description() -> str:
    """`"cuda"`, or `"cpu (N threads)"`: what a results file records about where it was measured."""
    return "cuda" if torch.cuda.is_available() else f"cpu ({torch.get_num_threads()} threads)"


def training_memory_mb(model: torch.nn.Module, step, optimizer_state_per_param: int = 2) -> float:
    """Peak memory of one training step in MiB.

    On CUDA: the allocator's peak while `step()` runs. On the CPU, where torch keeps no allocator statistics,
    the step's memory is counted exactly instead: parameters + gradients + optimizer state (AdamW keeps
    `optimizer_state_per_param` = 2 tensors per parameter) + every tensor autograd saves for the backward pass.
    The model's buffers (e.g. BatchNorm running statistics, which a train-mode step moves) are restored afterwards,
    so measuring a trained model leaves it as it was; gradients are left to the caller.

    Args:
        model: the model being trained.
        step: a callable running forward and backward of one batch (it must call `.backward()`).
    """
    buffers = {name: buffer.clone() for name, buffer in model.named_buffers()}
    try:
        return _step_memory_mb(model, step, optimizer_state_per_param)
    finally:
        with torch.no_grad():
            for name, buffer in model.named_buffers():
                buffer.copy_(buffers[name])


def _step_memory_mb(model: torch.nn.Module, step, optimizer_state_per_param: int) -> float:
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

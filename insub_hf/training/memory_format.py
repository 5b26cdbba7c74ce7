"""Whether convolutions may train in channels_last (NHWC) on this CPU.

oneDNN's AVX2 kernels for channels_last convolution backward hang (several threads) or crash (one thread) on narrow
layers, e.g. a strided 1x1 convolution of 1-4 channels, as in a CIFAR ResNet at width 1/16 or 1/32. Which shapes hang
changes from one torch release to the next (torch 2.14.1: 4 -> 8 channels at 28x28; 2.15.0: 1 -> 2 and 2 -> 4 at
32x32), so no shape rule holds; the AVX-512 kernels run every one of them. channels_last is therefore used on a CPU
only where oneDNN runs its AVX-512 (or newer) kernels: the CPU has AVX-512 and `ONEDNN_MAX_CPU_ISA` does not cap it
lower. GPUs (cuDNN) are not affected.
"""

from __future__ import annotations

import os

# values of ONEDNN_MAX_CPU_ISA (or its old name DNNL_MAX_CPU_ISA) that leave oneDNN its AVX-512 kernels
UNCAPPED = ("", "ALL", "DEFAULT")
AVX512_LEVELS = ("AVX512", "AVX10", "AMX")


def onednn_max_isa() -> str:
    """The ISA cap set in the environment for oneDNN ('' when none is set)."""
    return (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "").strip().upper()


def channels_last_hazard(capability: str | None = None, max_isa: str | None = None) -> str | None:
    """Why channels_last is unsafe for training on this CPU, or None where it is safe.

    Args:
        capability: the CPU's vector level as torch reports it (`torch.backends.cpu.get_cpu_capability()`, e.g.
            'AVX2', 'AVX512'); read from torch when None.
        max_isa: the oneDNN ISA cap (`ONEDNN_MAX_CPU_ISA`); read from the environment when None.
    """
    if capability is None:
        import torch

        capability = torch.backends.cpu.get_cpu_capability()
    max_isa = onednn_max_isa() if max_isa is None else max_isa.strip().upper()
    if not capability.upper().startswith("AVX512"):
        return f"this CPU runs oneDNN's {capability} kernels (no AVX-512)"
    if max_isa not in UNCAPPED and not max_isa.startswith(AVX512_LEVELS):
        return f"ONEDNN_MAX_CPU_ISA={max_isa} caps oneDNN below its AVX-512 kernels"
    return None


def resolve_channels_last(requested: bool | None, on_cpu: bool, field: str = "channels_last") -> bool:
    """The layout to train in: `requested`, or where it is None, channels_last on a GPU and on a CPU where it is
    safe. Asking for channels_last on a CPU where it is unsafe raises a ValueError naming `field`."""
    if requested is False or not on_cpu:
        return requested is not False
    hazard = channels_last_hazard()
    if hazard and requested:
        raise ValueError(
            f"{field}=True on the CPU: {hazard}, and oneDNN's AVX2 channels_last convolution kernels hang or crash on "
            "narrow layers (an upstream bug). Leave it unset (None: channels_last only where oneDNN runs AVX-512) or "
            "set it to False."
        )
    return hazard is None


def training_memory_format(on_cpu: bool):
    """`torch.channels_last` where `resolve_channels_last(None, on_cpu)` allows it, else the default layout."""
    import torch

    return torch.channels_last if resolve_channels_last(None, on_cpu) else torch.contiguous_format

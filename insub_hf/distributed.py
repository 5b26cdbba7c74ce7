"""What InSub needs from torch.distributed: batch-level losses over the global batch, and checks that every process
runs the same model. Processes are started by `accelerate launch` or `torchrun`; nothing here launches any."""

from __future__ import annotations

import json

import torch
import torch.distributed as dist
from torch.distributed import _functional_collectives as funcol
from torch import nn


def world() -> tuple[int, int]:
    """`(rank, world_size)`; `(0, 1)` when torch.distributed is not initialised."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def gather_batch(*tensors: torch.Tensor) -> tuple[list[torch.Tensor], int]:
    """Concatenates each tensor `(n, ..., k_i)` of every process along dim 0, with gradients flowing back to each
    process's part.

    Uses torch.distributed's autograd-aware all-gather, whose backward sums the gradients every process computes
    for a part. With DDP averaging the parameter gradients over W processes, a loss that is the mean over this
    process's anchors then has exactly the gradient of the mean over all W * n anchors (for a batch-level term that
    every process computes in full, likewise). Every process must hold the same n, and all must call it together (a
    collective): a loss computed on one process only, while the others wait elsewhere, would block. The tensors
    travel as one (joined along their last dim), so a call costs one size check and one gather.

    Returns:
        The gathered tensors `(W * n, ..., k_i)` in rank order and the offset `rank * n` of this process's rows;
        the tensors themselves and 0 in one process.
    """
    rank, size = world()
    if size == 1:
        return list(tensors), 0
    n = tensors[0].shape[0]
    if any(t.shape[:-1] != tensors[0].shape[:-1] for t in tensors):
        shapes = [tuple(t.shape) for t in tensors]
        raise ValueError(f"gather_batch: the tensors must agree in all but the last dim, got {shapes}.")
    if not torch.compiler.is_compiling():  # compiled: no size exchange (its .item() would split the graph); the
        # Trainer's equal per-process batches (dataloader_drop_last) are relied on
        _check_same_batch(n, tensors[0].device)
    joined = _all_gather_with_gradients(torch.cat(tensors, dim=-1))
    return list(joined.split([t.shape[-1] for t in tensors], dim=-1)), rank * n


def _all_gather_with_gradients(tensor: torch.Tensor) -> torch.Tensor:
    """`(n, k)` of each process -> `(W * n, k)` in rank order; the backward sums every process's gradient of this
    process's rows (a reduce-scatter). torch's functional collective: it traces under torch.compile, where
    `torch.distributed.nn.functional.all_gather` (deprecated for it) splits the graph."""
    gather = getattr(funcol, "all_gather_single_autograd", None) or funcol.all_gather_tensor_autograd
    return gather(tensor, 0, dist.group.WORLD)


def _check_same_batch(n: int, device: torch.device) -> None:
    """Raises on every process unless all hold `n` rows."""
    _, size = world()
    sizes = [torch.zeros(1, dtype=torch.long, device=device) for _ in range(size)]
    dist.all_gather(sizes, torch.tensor([n], device=device))
    sizes = [int(s) for s in sizes]
    if len(set(sizes)) != 1:
        raise ValueError(
            f"gather_batch: processes hold different batch sizes {sizes}; a global contrastive batch needs the same "
            "per-process batch (use dataloader_drop_last=True and a global batch divisible by the world size)."
        )


def check_same_across_processes(name: str, value: dict) -> None:
    """Raises on every process if `value` (JSON-serialisable) differs between processes, naming the keys that differ.

    A model config that differs between processes (another M, another encoder) would otherwise hang DDP or train
    something that is none of them.
    """
    rank, size = world()
    if size == 1:
        return
    text = json.dumps(value, sort_keys=True, default=str)
    texts: list[str | None] = [None] * size
    dist.all_gather_object(texts, text)
    if len(set(texts)) == 1:
        return
    values = [json.loads(t) for t in texts]
    keys = sorted({k for v in values for k in v if len({json.dumps(w.get(k), sort_keys=True) for w in values}) > 1})
    detail = "; ".join(f"{k}: " + ", ".join(f"rank {r}={v.get(k)!r}" for r, v in enumerate(values)) for k in keys)
    raise ValueError(f"{name} differs across the {size} processes ({detail}); every process must use the same one.")


def convert_sync_batchnorm(model: nn.Module) -> nn.Module:
    """Replaces every BatchNorm by `nn.SyncBatchNorm` (batch statistics over all processes), in place.

    torch's SyncBatchNorm runs on GPU (CUDA, XPU, HPU) only; on CPU processes this refuses with the options.
    """
    _, size = world()
    has_batchnorm = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    device = next(model.parameters()).device
    if size > 1 and has_batchnorm and device.type == "cpu":
        raise ValueError(
            "InSubTrainingArguments.sync_batchnorm=True: torch's SyncBatchNorm runs on GPU only and these processes "
            "train on CPU. Set sync_batchnorm=False (per-process statistics) or InSubConfig.head_norm='none'."
        )
    return nn.SyncBatchNorm.convert_sync_batchnorm(model)

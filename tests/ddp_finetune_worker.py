"""Run by tests/test_finetuning_conventions.py under `torchrun --nproc_per_node 2` (gloo): two fine-tuning steps of
a classifier loaded from a pretraining checkpoint, wrapped in DistributedDataParallel *without*
`find_unused_parameters`; DDP fails on the second step if any parameter got no gradient. Writes each rank's last loss.

    torchrun --standalone --nproc_per_node 2 tests/ddp_finetune_worker.py OUT_DIR

Not collected by pytest (no test_ prefix).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import tiny_config  # noqa: E402

from insub_hf import InSubForImageClassification, InSubForPreTraining  # noqa: E402


def main(out: Path) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    checkpoint = out / "pretrained"
    if rank == 0:
        torch.manual_seed(0)
        InSubForPreTraining(tiny_config(num_heads=2)).save_pretrained(checkpoint)
    dist.barrier()
    model = InSubForImageClassification.from_pretrained(checkpoint, num_labels=3).train()
    ddp = DistributedDataParallel(model)  # find_unused_parameters=False, the default
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(rank)
    for _ in range(2):
        optimizer.zero_grad()
        images, labels = torch.randn(4, 3, 32, 32, generator=generator), torch.randint(0, 3, (4,), generator=generator)
        loss = ddp(pixel_values=images, labels=labels).loss
        loss.backward()
        optimizer.step()
    (out / f"rank{rank}.txt").write_text(f"{loss.item()}\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))

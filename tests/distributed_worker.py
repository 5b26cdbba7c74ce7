"""Run by tests/test_distributed.py, once in a single process and once under `torchrun --nproc_per_node 2` (gloo).

    python tests/distributed_worker.py equivalence OUT_DIR   # Trainer steps + loss gradients, results per rank
    python tests/distributed_worker.py errors OUT_DIR        # the bad-input messages each rank raised
    python tests/distributed_worker.py defaults OUT_DIR      # arguments as a user writes them, without use_cpu

Not collected by pytest (no test_ prefix).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import tiny_config  # noqa: E402

from insub_hf import InSubForPreTraining, InSubTrainer, InSubTrainingArguments  # noqa: E402
from insub_hf.distributed import world  # noqa: E402
from insub_hf.losses import (  # noqa: E402
    DINOLoss, barlow_twins_loss, nt_xent_loss, scd_loss, self_genomenet_loss, vicreg_loss,
)

GLOBAL_BATCH = 8
STEPS = 2


class TwoViews(torch.utils.data.Dataset):
    """GLOBAL_BATCH fixed image pairs: no augmentation, so every process sees the same numbers."""

    def __init__(self):
        generator = torch.Generator().manual_seed(1)
        self.views = torch.randn(2, GLOBAL_BATCH, 3, 32, 32, generator=generator)

    def __len__(self) -> int:
        return GLOBAL_BATCH

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"pixel_values": self.views[0, i], "pixel_values_2": self.views[1, i]}


class RecordingTrainer(InSubTrainer):
    """Keeps this process's loss of every micro-batch and the gradients before the first optimiser step."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.losses: list[float] = []
        self.first_grads: dict[str, torch.Tensor] = {}

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        self.losses.append(float((loss[0] if return_outputs else loss).detach()))
        return loss

    def optimizer_step_hook(self, model) -> None:
        if not self.first_grads:
            self.first_grads = {
                name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None
            }


def training_arguments(out: Path, **overrides) -> InSubTrainingArguments:
    kwargs = dict(
        output_dir=str(out / "trainer"), global_batch_size=GLOBAL_BATCH, max_steps=STEPS, learning_rate=1e-2,
        max_grad_norm=0.0, optim="sgd", logging_steps=1, save_strategy="no", report_to="none", use_cpu=True, seed=0,
        dataloader_drop_last=True, disable_tqdm=True, lr_scheduler_type="constant",
        ddp_backend="gloo" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else None,
    )
    kwargs.update(overrides)
    return InSubTrainingArguments(**kwargs)


def trainer_steps(out: Path) -> None:
    """Two optimiser steps of SimCLR with M=3 heads on the global batch of 8."""
    from transformers import TrainerCallback

    torch.manual_seed(0)
    model = InSubForPreTraining(tiny_config(head_norm="none"))
    trainer = RecordingTrainer(model=model, args=training_arguments(out), train_dataset=TwoViews())

    class GradHook(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            trainer.optimizer_step_hook(model)

    trainer.add_callback(GradHook())
    trainer.train()
    rank = world()[0]
    tensors = {f"grad.{k}": v.contiguous() for k, v in trainer.first_grads.items()}
    tensors.update({f"param.{k}": v.detach().contiguous() for k, v in model.named_parameters()})
    tensors["losses"] = torch.tensor(trainer.losses, dtype=torch.float64)
    save_file(tensors, str(out / f"trainer_rank{rank}.safetensors"))


def loss_gradients(out: Path, rank: int, size: int) -> None:
    """SCD, Self-GenomeNet, VICReg, Barlow Twins and NT-Xent (eager and torch.compile'd: the gather must trace) losses of this process's
    share and the gradient of each share's inputs; the DINO centre after one update from this process's share."""
    generator = torch.Generator().manual_seed(2)
    h = torch.randn(2, GLOBAL_BATCH, 12, generator=generator)
    p = torch.randn(2, GLOBAL_BATCH, 3, 6, generator=generator)
    context = torch.randn(2, GLOBAL_BATCH, 7, 5, generator=generator)
    projections = torch.randn(2, 5, 5, generator=generator)
    z = torch.randn(2, GLOBAL_BATCH, 6, generator=generator)
    ntxent = lambda a, b: nt_xent_loss(a, b, 0.5).mean()  # noqa: E731
    share = slice(rank * GLOBAL_BATCH // size, (rank + 1) * GLOBAL_BATCH // size)
    results = {}
    for name, inputs, fn in (
        ("scd", [h[0], h[1], p[0], p[1]], lambda a, b, c, d: scd_loss(a, b, c, d, beta=0.5)),
        ("genomenet", [context[0], context[1], projections], lambda a, b, w: self_genomenet_loss(a, b, w).mean()),
        ("ntxent", [z[0], z[1]], ntxent),
        ("vicreg", [z[0], z[1]], vicreg_loss),
        ("barlow_twins", [z[0], z[1]], barlow_twins_loss),
        ("ntxent_compiled", [z[0], z[1]], torch.compile(ntxent, backend="aot_eager", fullgraph=True)),
    ):
        local = [x[share].clone().requires_grad_(True) for x in inputs[: len(inputs) - (name == "genomenet")]]
        if name == "genomenet":
            local.append(projections.clone().requires_grad_(True))
        loss = fn(*local)
        loss.backward()
        results[f"{name}.loss"] = loss.detach().reshape(1)
        for i, x in enumerate(local):
            results[f"{name}.grad{i}"] = x.grad
    # DINO: the teacher centre moves by the mean teacher output over every process's share
    center = DINOLoss(out_dim=5, center_momentum=0.9)
    teacher = torch.randn(2, GLOBAL_BATCH, 5, generator=generator)
    center(torch.randn(3, GLOBAL_BATCH, 5, generator=generator)[:, share], teacher[:, share], 0.04)
    center.update_center()
    results["dino.center"] = center.center
    save_file(results, str(out / f"losses_rank{rank}.safetensors"))


def errors(out: Path, rank: int) -> None:
    """Each bad input in turn; the message this process raised."""
    messages = {}
    try:
        training_arguments(out, global_batch_size=7)
    except ValueError as error:
        messages["global_batch_size"] = str(error)
    args = training_arguments(out)
    try:
        InSubTrainer(model=InSubForPreTraining(tiny_config(num_heads=3 + rank)), args=args, train_dataset=TwoViews())
    except ValueError as error:
        messages["config"] = str(error)
    try:
        InSubTrainer(
            model=InSubForPreTraining(tiny_config()), args=training_arguments(out, sync_batchnorm=True),
            train_dataset=TwoViews(),
        )
    except ValueError as error:
        messages["sync_batchnorm"] = str(error)
    (out / f"errors_rank{rank}.json").write_text(json.dumps(messages))


def defaults(out: Path, rank: int) -> None:
    """What a user's command gets on a machine without a GPU: arguments that never say use_cpu or ddp_backend (as
    the examples' flags leave them), and plain transformers `TrainingArguments` that leave each process alone."""
    from transformers import TrainingArguments

    found = {}
    plain = TrainingArguments(output_dir=str(out / "plain"), report_to="none", max_steps=1)
    try:
        InSubTrainer(model=InSubForPreTraining(tiny_config()), args=plain, train_dataset=TwoViews())
    except RuntimeError as error:
        found["plain"] = str(error)
    args = InSubTrainingArguments(output_dir=str(out / "insub"), report_to="none", max_steps=1)
    found.update(parallel_mode=args.parallel_mode.value, world_size=args.world_size, backend=args.ddp_backend,
                 process_group=torch.distributed.get_world_size())
    (out / f"defaults_rank{rank}.json").write_text(json.dumps(found))


def main() -> None:
    scenario, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    if scenario == "equivalence":
        trainer_steps(out)
        loss_gradients(out, *world())
    elif scenario == "errors":
        training_arguments(out).world_size  # initialises the process group
        errors(out, world()[0])
    elif scenario == "defaults":
        defaults(out, int(os.environ["RANK"]))
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    # leave together and shut the gloo group down, so that no process exits with its threads still running
    # (which aborted a rank now and then: "terminate called without an active exception")
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()

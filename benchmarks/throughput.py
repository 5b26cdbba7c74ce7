"""SimCLR training throughput, side by side in one run: insub-hf with M = 1, 5, 10 heads against lightly's SimCLR
(its NTXentLoss and SimCLRProjectionHead) on the same backbone, batch, precision and optimizer.

Backbone: the CIFAR-stem ResNet-18 (`CifarResNetModel`) on Fashion-MNIST (28x28 grey; Debian's full 60,000 images
when installed, else the bundled 5,000). Heads: insub-hf Linear-2048-BN-ReLU-Linear-128 per head; lightly's
SimCLRProjectionHead(d, 2048, 128). Optimizer: fused AdamW (the Trainer's default) for both. Precision: bf16
autocast on a GPU, float32 on CPU, for both. Memory layout: channels_last for both backbones
where InSubTrainer would use it (a GPU, or a CPU where oneDNN runs AVX-512: `insub_hf.training.memory_format`).

Each library's own data path is what is compared end to end:
- insub-hf: `InSubTrainer.train` on plain image tensors, the two views made per batch on the device by
  `BatchTwoViews`, data loader workers and pinned memory as `fast_path_arguments` sets them.
- lightly: its documented loop: a DataLoader over PIL images with `SimCLRTransform` (per sample, torchvision) in
  the same number of workers, then forward of each view, NTXentLoss, backward, step.

Rows: end-to-end samples/s (each sample gives two views), the step alone on views already on the device (forward +
backward + optimizer step), the step's memory peak (GPU: allocator peak; CPU: counted exactly, see
`training_memory_mb`), and on a GPU the share of wall time the GPU runs kernels during end-to-end training
(torch.profiler, union of kernel intervals). Targets, printed with the ratios: on a GPU, insub-hf M=5 end to end
>= 1.3x lightly, step M=10 / M=1 <= 1.03, GPU busy >= 90%; on CPU, insub-hf M=1 end to end >= lightly.

    pip install -e ".[bench]"
    python benchmarks/throughput.py                # GPU: width 1, batch 512; CPU: width 0.25, batch 64
    python benchmarks/throughput.py --compile      # both models through torch.compile
    python benchmarks/throughput.py --epoch        # also one epoch of the training set, insub-hf M=1 and M=5
"""

from __future__ import annotations

import argparse
import datetime
import os
import tempfile
import time
from contextlib import nullcontext

import numpy as np
import torch
from PIL import Image
from torch import nn
from transformers import PrinterCallback, set_seed

from head_overhead import interleaved_best  # noqa: E402  (same folder: the one timing rule of the benchmarks)
from measuring import Window, WindowCallback, synchronize  # noqa: E402  (same folder)
from insub_hf import InSubConfig, InSubForPreTraining
from insub_hf.encoders.presets import named_encoder
from insub_hf.data import IMAGE_DATASET_PRESETS, BatchTwoViews, image_tensor_dataset
from insub_hf.data.image_datasets import _fashion_mnist_arrays, resolve_fashion_mnist_source
from insub_hf.encoders.modeling_resnet_cifar import CifarResNetConfig, CifarResNetModel
from insub_hf.evaluation.cost import device_description, training_memory_mb
from insub_hf.training.memory_format import training_memory_format
from insub_hf.training.trainer import InSubTrainer, InSubTrainingArguments, fast_path_arguments

PRESET = IMAGE_DATASET_PRESETS["fashion_mnist"]
LEARNING_RATE, WEIGHT_DECAY, TEMPERATURE, CROP_SCALE = 1e-3, 1e-4, 0.2, (0.2, 1.0)


# ---------------------------------------------------------------- lightly's SimCLR, as its examples build it

class LightlySimCLR(nn.Module):
    """The backbone `(B, C, H, W) -> (B, d)` and lightly's SimCLRProjectionHead `(B, d) -> (B, 128)`."""

    def __init__(self, backbone_config: CifarResNetConfig):
        super().__init__()
        from lightly.models.modules import SimCLRProjectionHead

        self.backbone = CifarResNetModel(backbone_config)
        self.projection_head = SimCLRProjectionHead(backbone_config.hidden_size, 2048, 128)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.projection_head(self.backbone(pixel_values=x).pooler_output.flatten(1))


class PILViews(torch.utils.data.Dataset):
    """lightly's input: PIL images through `SimCLRTransform`, which returns the two views of a sample.

    `images`: uint8 `(N, H, W)` (grey) or `(N, H, W, 3)` (RGB)."""

    def __init__(self, images: np.ndarray, transform):
        self.images, self.transform = images, transform
        self.mode = "L" if images.ndim == 3 else "RGB"

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        return self.transform(Image.fromarray(self.images[i], mode=self.mode))


def lightly_transform():
    """SimCLRTransform with insub-hf's augmentation: crop scale 0.2-1, flip 0.5, jitter 0.4/0.4/0.4/0.1 (p 0.8), no
    blur; normalised with Fashion-MNIST's statistics."""
    from lightly.transforms import SimCLRTransform

    mean, std = PRESET.normalization()
    return SimCLRTransform(
        input_size=PRESET.image_size, min_scale=CROP_SCALE[0], cj_strength=0.5, gaussian_blur=0.0,
        normalize={"mean": list(mean), "std": list(std)},
    )


def insub_config(args, num_heads: int) -> InSubConfig:
    return InSubConfig(
        encoder_config=named_encoder("resnet18_cifar", PRESET.image_size, 1, args.width), num_heads=num_heads,
        head_hidden_sizes=[2048], head_output_size=128, objective_config={"temperature": TEMPERATURE},
        diversity_weight=1.5 if num_heads > 1 else 0.0,
    )


def insub_end_to_end(args, num_heads: int, train_set, device: torch.device, epochs: float | None = None):
    """samples/s of `InSubTrainer.train` (or, with `epochs`, the wall seconds of that many epochs) and the busy
    share."""
    set_seed(0)
    model = InSubForPreTraining(insub_config(args, num_heads))
    window = Window(device, args.warmup, args.steps, args.profile_steps)
    speed = fast_path_arguments(args.bf16, args.compile, args.workers)
    with tempfile.TemporaryDirectory() as out:
        training = InSubTrainingArguments(
            output_dir=out, per_device_train_batch_size=args.batch_size, learning_rate=LEARNING_RATE,
            weight_decay=WEIGHT_DECAY, dataloader_drop_last=True, report_to=[], save_strategy="no",
            logging_steps=10**9, disable_tqdm=True, seed=0, **speed,
            **({"num_train_epochs": epochs} if epochs else {"max_steps": window.total}),
        )
        trainer = InSubTrainer(
            model=model, args=training, train_dataset=train_set,
            batch_views=BatchTwoViews(PRESET.image_size, *PRESET.normalization(), num_channels=1, crop_scale=CROP_SCALE),
            callbacks=[] if epochs else [WindowCallback(window)],
        )
        trainer.remove_callback(PrinterCallback)  # its end-of-training line would break the table
        start = time.perf_counter()
        trainer.train()
        synchronize(device)
        if epochs:
            return time.perf_counter() - start
    return args.batch_size * args.steps / window.seconds, window.busy.share


def lightly_end_to_end(args, images_u8: np.ndarray, device: torch.device):
    """samples/s of lightly's training loop and the busy share."""
    set_seed(0)
    model, criterion, optimizer = lightly_model(args, device)
    loader = torch.utils.data.DataLoader(
        PILViews(images_u8, lightly_transform()), batch_size=args.batch_size, shuffle=True, drop_last=True,
        num_workers=args.workers, pin_memory=device.type == "cuda", persistent_workers=args.workers > 0,
    )
    step_fn = lightly_step(model, criterion, optimizer, args, device)
    window, step = Window(device, args.warmup, args.steps, args.profile_steps), 0
    while step < window.total:
        for x0, x1 in loader:
            step_fn(x0.to(device, non_blocking=True), x1.to(device, non_blocking=True))
            step += 1
            window.after_step(step)
            if step == window.total:
                break
    return args.batch_size * args.steps / window.seconds, window.busy.share


def lightly_model(args, device: torch.device):
    from lightly.loss import NTXentLoss

    backbone = CifarResNetConfig(depth=18, width_multiplier=args.width, num_channels=1, image_size=PRESET.image_size)
    model = LightlySimCLR(backbone).to(device).to(memory_format=training_memory_format(device.type == "cpu"))
    model = torch.compile(model) if args.compile else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY, fused=True)
    return model, NTXentLoss(temperature=TEMPERATURE), optimizer


def optimizer_step(loss_of, optimizer, args, device):
    """`step(x0, x1)`: the loss `loss_of(x0, x1)` (in bf16 autocast when `args.bf16`), backward, optimizer step."""
    precision = (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if args.bf16 else nullcontext

    def step(x0, x1):
        with precision():
            loss = loss_of(x0, x1)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def lightly_step(model, criterion, optimizer, args, device):
    return optimizer_step(lambda x0, x1: criterion(model(x0), model(x1)), optimizer, args, device)


def insub_step(model, optimizer, args, device):
    return optimizer_step(lambda x0, x1: model(pixel_values=x0, pixel_values_2=x1).loss, optimizer, args, device)


def step_rows(args, device: torch.device) -> tuple[dict, dict]:
    """Seconds per optimizer step on views already on the device, and the step's memory peak (MiB), per row."""
    x0 = torch.randn(args.batch_size, 1, PRESET.image_size, PRESET.image_size, device=device)
    x1 = torch.randn_like(x0)
    step_fns, memory = {}, {}
    for m in args.heads:
        set_seed(0)
        model = InSubForPreTraining(insub_config(args, m)).to(device).to(
            memory_format=training_memory_format(device.type == "cpu"))
        optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY, fused=True)
        runnable = torch.compile(model) if args.compile else model
        step_fns[f"insub-hf M={m}"] = insub_step(runnable, optimizer, args, device)
        memory[f"insub-hf M={m}"] = step_memory(model, insub_step(memory_view(model, runnable), optimizer, args, device), x0, x1)
    set_seed(0)
    model, criterion, optimizer = lightly_model(args, device)
    step_fns["lightly SimCLR"] = lightly_step(model, criterion, optimizer, args, device)
    eager = getattr(model, "_orig_mod", model)
    memory["lightly SimCLR"] = step_memory(
        eager, lightly_step(memory_view(eager, model), criterion, optimizer, args, device), x0, x1
    )
    calls = {name: (lambda fn=fn: fn(x0, x1)) for name, fn in step_fns.items()}
    # all threads, as training uses (torch.utils.benchmark's default is one)
    return interleaved_best(calls, args.rounds, args.min_run_time, torch.get_num_threads()), memory


def memory_view(eager: nn.Module, runnable: nn.Module) -> nn.Module:
    """The model whose step memory is measured: on a GPU the one that trains (compiled or not, the allocator sees
    both); on CPU the eager one, whose saved tensors `training_memory_mb` counts (it cannot see into a compiled
    graph)."""
    return runnable if next(eager.parameters()).device.type == "cuda" else eager


def step_memory(model: nn.Module, step, x0, x1) -> float:
    step(x0, x1)  # the optimizer state exists from here on, as in training
    return training_memory_mb(model, lambda: step(x0, x1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    cuda = torch.cuda.is_available()
    parser.add_argument("--width", type=float, default=1.0 if cuda else 0.25, help="ResNet-18 width multiplier.")
    parser.add_argument("--batch_size", type=int, default=512 if cuda else 64, help="Samples per step.")
    parser.add_argument("--heads", type=int, nargs="+", default=[1, 5, 10], help="insub-hf rows: values of M.")
    parser.add_argument("--warmup", type=int, default=15 if cuda else 3, help="End-to-end steps before timing.")
    parser.add_argument("--steps", type=int, default=40 if cuda else 12, help="End-to-end steps timed.")
    parser.add_argument("--profile_steps", type=int, default=10, help="GPU: steps profiled for the busy share.")
    parser.add_argument("--rounds", type=int, default=None,
                        help="End-to-end and step rounds, best of (default 2; 1 with --compile: each run compiles).")
    parser.add_argument("--min_run_time", type=float, default=2.0, help="Seconds of timing per step measurement.")
    parser.add_argument("--bf16", type=lambda s: s.lower() in ("1", "true", "yes"), default=None,
                        help="bf16 autocast (default: on where the GPU supports it).")
    parser.add_argument("--compile", action="store_true", help="torch.compile both models.")
    parser.add_argument("--workers", type=int, default=None,
                        help="Data loader workers of both (default: fast_path_arguments' choice).")
    parser.add_argument("--epoch", action="store_true", help="Also time one epoch of the training set, M=1 and M=5.")
    parser.add_argument("--data_source", default="auto", choices=("auto", "debian", "bundled"))
    args = parser.parse_args()
    args.rounds = args.rounds or (1 if args.compile else 2)
    device = torch.device("cuda" if cuda else "cpu")

    import lightly

    source = resolve_fashion_mnist_source(args.data_source)
    images_u8 = _fashion_mnist_arrays(source)["train_images"]  # (N, 28, 28) uint8
    images = torch.tensor(images_u8).unsqueeze(1).float() / 255
    train_set = image_tensor_dataset(images)  # what insub-hf trains on: plain images, views made per batch
    speed = fast_path_arguments(args.bf16, args.compile, args.workers)
    args.bf16, args.workers = speed["bf16"], speed["dataloader_num_workers"]  # resolved once, for both libraries
    print(f"{datetime.date.today()}  device: {device_description()}  torch {torch.__version__}, lightly "
          f"{lightly.__version__}, {torch.get_num_threads()} threads")
    print(f"Fashion-MNIST ({source}, {len(images)} images), CIFAR ResNet-18 width {args.width:g}, batch "
          f"{args.batch_size} x 2 views, bf16 {speed['bf16']}, compile {args.compile}, loader workers "
          f"{speed['dataloader_num_workers']}, {training_memory_format(device.type == 'cpu')}, fused AdamW")

    rows = [f"insub-hf M={m}" for m in args.heads] + ["lightly SimCLR"]
    end_to_end, busy = {name: 0.0 for name in rows}, {}
    for _ in range(args.rounds):  # interleaved rounds, best of: drift of a shared machine hits every row alike
        for m in args.heads:
            rate, busy_share = insub_end_to_end(args, m, train_set, device)
            end_to_end[f"insub-hf M={m}"] = max(end_to_end[f"insub-hf M={m}"], rate)
            busy[f"insub-hf M={m}"] = busy_share
        rate, busy_share = lightly_end_to_end(args, images_u8, device)
        end_to_end["lightly SimCLR"] = max(end_to_end["lightly SimCLR"], rate)
        busy["lightly SimCLR"] = busy_share
    steps, memory = step_rows(args, device)

    print("\nrow               end to end (samples/s)   step alone (samples/s)   step memory (MiB)   GPU busy")
    for name in rows:
        share = f"{100 * busy[name]:.1f}%" if busy[name] is not None else "n/a (CPU)"
        print(f"  {name:<16}{end_to_end[name]:>22.0f}   {args.batch_size / steps[name]:>22.0f}   "
              f"{memory[name]:>17.1f}   {share:>8}")

    first, top = f"insub-hf M={args.heads[0]}", f"insub-hf M={args.heads[-1]}"
    step_ratio = steps[top] / steps[first]
    print(f"\nratios: step {top} / {first} = {step_ratio:.3f} (time; target <= 1.03 on a GPU)")
    for name in rows[:-1]:
        print(f"  end to end {name} / lightly = {end_to_end[name] / end_to_end['lightly SimCLR']:.2f}x")
    if cuda:
        m5 = end_to_end.get("insub-hf M=5", float("nan")) / end_to_end["lightly SimCLR"]
        least_busy = min(busy[name] for name in rows[:-1])
        print(f"GPU targets: insub-hf M=5 / lightly end to end {m5:.2f}x (>= 1.3: {'met' if m5 >= 1.3 else 'NOT met'});"
              f" step M=10/M=1 {step_ratio:.3f} (<= 1.03: {'met' if step_ratio <= 1.03 else 'NOT met'}); "
              f"GPU busy, least of the insub-hf rows {100 * least_busy:.1f}% (>= 90%: "
              f"{'met' if least_busy >= 0.9 else 'NOT met'})")
    else:
        m1 = end_to_end[first] / end_to_end["lightly SimCLR"]
        print(f"CPU target: insub-hf M=1 end to end at least lightly's: {m1:.2f}x ({'met' if m1 >= 1 else 'NOT met'})")

    if args.epoch:
        for m in (1, 5):
            seconds = insub_end_to_end(args, m, train_set, device, epochs=1)
            print(f"one epoch of {len(images)} images, insub-hf M={m}, batch {args.batch_size}: {seconds:.1f} s "
                  f"({len(images) / seconds:.0f} samples/s, start-up and compilation included)")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()

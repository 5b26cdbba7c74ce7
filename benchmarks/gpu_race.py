"""The speed race (stage 1 of the GPU kit, `benchmarks/gpu_run.py`): SimCLR on a CIFAR-shaped data set, insub-hf
with M heads through `InSubTrainer` against lightly's SimCLR on the same encoder, batch and precision, in one run.

insub-hf trains with the settings a user sets, nothing of its own: `InSubTrainingArguments(bf16=..., torch_compile=...,
channels_last=..., data_on_device=True)` (fused AdamW is the Trainer's default), the two views made per batch on the
device (`BatchTwoViews`). lightly trains with its documented loop: PIL images through `SimCLRTransform` in loader
workers, one forward per view, `NTXentLoss`, the same fused AdamW, bf16 autocast, channels_last and compile.

Data: `--images` uint8 images of `(3, 32, 32)` drawn on the device (speed does not depend on the pixels); lightly's
loop reads the same pixels from host memory, as its examples do.

Each row is appended to `OUT/speed.jsonl` the moment it is measured, and `OUT/speed.md` is rewritten, so a run
stopped by its deadline keeps every finished row. Columns (`COLUMNS`):
- warmup_s: wall seconds of the first `--warmup` steps (compilation included);
- e2e_samples_s: samples per second of the next `--steps` steps, end to end (data, views, step);
- step_samples_s: the same for the step alone, on views already made (forward, backward, optimiser step);
- epoch_s: seconds per `--epoch_images` images at the end-to-end rate; `measured_epoch_s`: a real epoch of the
  `--images` set through `InSubTrainer` (the `epoch` row: the second epoch of two, so compilation is left out);
- step_tflop: FLOPs of one step (forward and backward; `torch.utils.flop_counter`, 2 per multiply-add);
- tflops: step_tflop over the end-to-end step time; peak_share: that over the GPU's dense bf16 peak (datasheet where
  known, else the matmul measured in this run: `peak_source`); gpu_busy: share of wall time with a kernel running
  over `--profile_steps` steps (torch.profiler); host_syncs_per_step: host reads that waited for the GPU in the
  end-to-end window (`torch.cuda.set_sync_debug_mode("warn")`), per step, and sync_sites where the code made them;
  peak_mem_mib: the allocator's peak.

    python benchmarks/gpu_race.py --out runs/race                  # a GPU: ResNet-18, batch 512, bf16, compiled
    python benchmarks/gpu_race.py --out runs/race --tiny           # a CPU check of the whole path in seconds
"""

from __future__ import annotations

import argparse
import json
import os
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
from transformers import PrinterCallback, set_seed

from measuring import Window, WindowCallback, synchronize  # noqa: E402  (same folder)
from throughput import LightlySimCLR, PILViews  # noqa: E402  (same folder)
from insub_hf import InSubConfig, InSubForPreTraining
from insub_hf.encoders.presets import named_encoder
from insub_hf.data import BatchTwoViews, DeviceImages, IMAGE_STATS
from insub_hf.encoders.modeling_resnet_cifar import CifarResNetConfig
from insub_hf.training.trainer import InSubTrainer, InSubTrainingArguments

COLUMNS = (
    "row", "heads", "batch", "bf16", "compile", "warmup_s", "e2e_samples_s", "step_samples_s", "epoch_s",
    "measured_epoch_s", "step_tflop", "tflops", "peak_share", "peak_source", "gpu_busy", "host_syncs_per_step",
    "peak_mem_mib", "status", "sync_sites",
)
# the captured step beside today's compiled one, M = 5 first, then lightly and the real epochs, then M = 10 and 1
ROWS = ("5c", "5", "lightly", "epochc", "epoch", "10c", "1c", "10", "1")
TINY_ROWS = ("5c", "5", "lightly", "10", "1", "epoch")  # a check of the path: one captured row is enough
LEARNING_RATE, WEIGHT_DECAY, TEMPERATURE, CROP_SCALE = 1e-3, 1e-4, 0.2, (0.2, 1.0)
IMAGE_SIZE, CHANNELS = 32, 3
# Dense (no sparsity) bf16 tensor-core peaks from the vendors' datasheets, TFLOP/s, by device name
DENSE_BF16_PEAK = {"H100 PCIe": 756.0, "H100 NVL": 835.0, "H100": 989.4, "H200": 989.4, "A100": 312.0, "L40S": 362.1}


def datasheet_peak(name: str) -> float | None:
    for key, value in DENSE_BF16_PEAK.items():  # the longest names first: "H100 PCIe" before "H100"
        if key in name:
            return value
    return None


def matmul_tflops(device: torch.device) -> float | None:
    """bf16 TFLOP/s of an 8192^3 matmul, best of 10 (None on CPU)."""
    if device.type != "cuda":
        return None
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn_like(a)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(10):
        synchronize(device)
        start = time.perf_counter()
        a @ b
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2 * 8192**3 / best / 1e12


class Rows:
    """Rows appended to `out/speed.jsonl` as they come, and `out/speed.md` rewritten with all of them."""

    def __init__(self, out: Path, header: dict):
        self.out, self.rows = out, []
        out.mkdir(parents=True, exist_ok=True)
        (out / "speed.jsonl").write_text(json.dumps({"header": header}) + "\n")
        self.header = header

    def add(self, row: dict) -> None:
        row = {name: row.get(name) for name in COLUMNS}
        self.rows.append(row)
        with open(self.out / "speed.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        shown = lambda v: "" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)  # noqa: E731
        lines = [" ".join(f"{k}={v}" for k, v in self.header.items()), "",
                 "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(shown(r[name]) for name in COLUMNS) + " |" for r in self.rows]
        (self.out / "speed.md").write_text("\n".join(lines) + "\n")
        print(f"[race] {row['row']}: " + ", ".join(f"{k} {shown(v)}" for k, v in row.items() if k != "row"),
              flush=True)


def insub_config(args, num_heads: int) -> InSubConfig:
    """The race's SimCLR InSub model: the CIFAR ResNet-18 (`--width`), M heads Linear-2048-BN-ReLU-Linear-128, the
    paper's hinge weight where M > 1."""
    return InSubConfig(
        encoder_config=named_encoder(f"resnet{args.depth}_cifar", IMAGE_SIZE, CHANNELS, args.width), num_heads=num_heads,
        head_hidden_sizes=[2048], head_output_size=128, objective_config={"temperature": TEMPERATURE},
        diversity_weight=1.5 if num_heads > 1 else 0.0,
    )


def autocast(args, device: torch.device):
    return torch.autocast(device.type, dtype=torch.bfloat16) if args.bf16 else nullcontext()


def step_flops(loss_of, args, device) -> float:
    """TFLOP of one forward and backward of `loss_of()` (counted on the eager model)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter, autocast(args, device):
        loss_of().backward()
    return counter.get_total_flops() / 1e12


def make_views(args):
    return BatchTwoViews(IMAGE_SIZE, *IMAGE_STATS["cifar10"], num_channels=CHANNELS, crop_scale=CROP_SCALE)


class Timer(WindowCallback):
    """Times an `InSubTrainer` run (`measuring.Window`): warm-up steps, a window of measured steps (then the step
    alone, on fixed views, with the trainer's own model and optimiser), profiled steps; with `timed_epoch`, the last
    epoch instead."""

    def __init__(self, args, device: torch.device, timed_epoch: bool = False):
        super().__init__(Window(device, args.warmup, args.steps, args.profile_steps, at_window_end=self.measure_step))
        self.args, self.device, self.trainer, self.timed_epoch = args, device, None, timed_epoch
        self.step_s = self.epoch_s = None

    def on_epoch_begin(self, args, state, control, **kwargs):
        synchronize(self.device)
        self.epoch_start = time.perf_counter()

    def on_epoch_end(self, args, state, control, **kwargs):
        synchronize(self.device)
        self.epoch_s = time.perf_counter() - self.epoch_start  # the last epoch's, at the end

    def on_step_end(self, args, state, control, **kwargs):
        if not self.timed_epoch:
            super().on_step_end(args, state, control, **kwargs)

    def measure_step(self) -> None:
        self.step_s = self.step_alone()

    def step_alone(self) -> float:
        """Seconds per optimiser step of the trainer's model (compiled if it is) on one fixed pair of views; a
        captured step (`capture_step`) on one fixed batch, its views made inside it."""
        trainer, a = self.trainer, self.args
        images = trainer.train_dataset.__getitems__(list(range(a.batch_size)))
        if trainer.args.capture_step:
            model = getattr(trainer.model, "_orig_mod", trainer.model)

            def captured():
                torch.compiler.cudagraph_mark_step_begin()
                with trainer.compute_loss_context_manager():
                    trainer.captured_step(model, images["pixel_values"])
                model.zero_grad(set_to_none=True)  # as the Trainer leaves it between steps: the same graph

            return timed(captured, a.step_repeats, self.device)
        views = trainer.make_views(images)
        model, optimizer = trainer.model_wrapped, trainer.optimizer

        def step():
            with autocast(a, self.device):
                loss = model(**views).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return timed(step, a.step_repeats, self.device)


def timed(step, repeats: int, device: torch.device) -> float:
    step()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    synchronize(device)
    return (time.perf_counter() - start) / repeats


def peak_memory_mib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None


def reset_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def insub_row(args, num_heads: int, images: DeviceImages, device: torch.device, out: Path, epoch: bool = False,
              captured: bool = False):
    """One insub-hf row through `InSubTrainer` (`epoch`: two epochs of the whole set, the second timed; `captured`:
    the whole step as one graph, `capture_step=True`, replayed as a CUDA graph on a GPU; without `--compile` the graph
    dynamo traced runs as it is, a quick check of the path)."""
    set_seed(0)
    config = insub_config(args, num_heads)
    eager = InSubForPreTraining(config).to(device)
    fake = torch.randn(args.batch_size, CHANNELS, IMAGE_SIZE, IMAGE_SIZE, device=device)
    flops = step_flops(lambda: eager(pixel_values=fake, pixel_values_2=fake).loss, args, device)
    eager = None  # its memory back before the timed model is built
    reset_memory(device)
    set_seed(0)
    timer = Timer(args, device, timed_epoch=epoch)
    total = args.warmup + args.steps + (args.profile_steps if device.type == "cuda" else 0)
    training = InSubTrainingArguments(
        output_dir=str(out / "trainer"), per_device_train_batch_size=args.batch_size, learning_rate=LEARNING_RATE,
        weight_decay=WEIGHT_DECAY, dataloader_drop_last=True, report_to=[], save_strategy="no",
        logging_steps=10**9, disable_tqdm=True, seed=0, bf16=args.bf16, torch_compile=args.compile,
        data_on_device=True, **({"num_train_epochs": 2} if epoch else {"max_steps": total}),
        **(captured_arguments(args, device) if captured else {}),
    )
    trainer = InSubTrainer(model=InSubForPreTraining(config), args=training, train_dataset=images,
                           batch_views=make_views(args), callbacks=[timer])
    trainer.remove_callback(PrinterCallback)
    timer.trainer = trainer
    trainer.train()
    synchronize(device)
    window = timer.window
    name = ("epoch" if epoch else str(num_heads)) + ("c" if captured else "")
    row = dict(row=row_title(name), heads=num_heads, step_tflop=flops,
               peak_mem_mib=peak_memory_mib(device), gpu_busy=window.busy.share, **sync_columns(window, args))
    if epoch:
        return {**row, "measured_epoch_s": timer.epoch_s, "e2e_samples_s": len(images) / timer.epoch_s}
    return {**row, "warmup_s": window.warmup_seconds, "e2e_samples_s": args.batch_size * args.steps / window.seconds,
            "step_samples_s": args.batch_size / timer.step_s}


def lightly_row(args, pixels: np.ndarray, device: torch.device) -> dict:
    """lightly's documented loop over the same pixels (host memory, `(N, H, W, C)` uint8)."""
    from lightly.loss import NTXentLoss
    from lightly.transforms import SimCLRTransform

    set_seed(0)
    backbone = CifarResNetConfig(depth=args.depth, width_multiplier=args.width, num_channels=CHANNELS, image_size=IMAGE_SIZE)
    layout = torch.channels_last if device.type == "cuda" else torch.contiguous_format
    eager = LightlySimCLR(backbone).to(device).to(memory_format=layout)
    criterion = NTXentLoss(temperature=TEMPERATURE)
    fake = torch.randn(args.batch_size, CHANNELS, IMAGE_SIZE, IMAGE_SIZE, device=device)
    flops = step_flops(lambda: criterion(eager(fake), eager(fake)), args, device)
    eager.zero_grad(set_to_none=True)
    reset_memory(device)
    model = torch.compile(eager) if args.compile else eager
    optimizer = torch.optim.AdamW(eager.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY,
                                  fused=device.type == "cuda")
    mean, std = IMAGE_STATS["cifar10"]
    transform = SimCLRTransform(input_size=IMAGE_SIZE, min_scale=CROP_SCALE[0], cj_strength=0.5, gaussian_blur=0.0,
                                normalize={"mean": list(mean), "std": list(std)})
    loader = torch.utils.data.DataLoader(
        PILViews(pixels, transform), batch_size=args.batch_size, shuffle=True, drop_last=True,
        num_workers=args.workers, pin_memory=device.type == "cuda", persistent_workers=args.workers > 0,
    )

    def step(x0, x1):
        with autocast(args, device):
            loss = criterion(model(x0), model(x1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    last, step_s = {}, []  # the step alone is timed on the last pair of views when the window ends
    window = Window(device, args.warmup, args.steps, args.profile_steps,
                    at_window_end=lambda: step_s.append(timed(lambda: step(*last["views"]), args.step_repeats, device)))
    done = 0
    while done < window.total:
        for views in loader:  # SimCLRTransform's two views per sample: a batch is [views 1, views 2]
            last["views"] = [v.to(device, non_blocking=True).to(memory_format=layout) for v in views[:2]]
            step(*last["views"])
            done += 1
            window.after_step(done)
            if done == window.total:
                break
    return dict(row="lightly SimCLR", heads=1, step_tflop=flops, warmup_s=window.warmup_seconds,
                e2e_samples_s=args.batch_size * args.steps / window.seconds, step_samples_s=args.batch_size / step_s[0],
                gpu_busy=window.busy.share, peak_mem_mib=peak_memory_mib(device), **sync_columns(window, args))


def captured_arguments(args, device: torch.device) -> dict:
    """The training arguments of a captured row: one graph per step, replayed as a CUDA graph where compiled on a GPU."""
    if not args.compile:
        return {"capture_step": True, "torch_compile_backend": "eager"}
    return {"capture_step": True, **({"torch_compile_mode": "reduce-overhead"} if device.type == "cuda" else {})}


def sync_columns(window: Window, args) -> dict:
    """host_syncs_per_step and sync_sites of a row's end-to-end window (None off a GPU)."""
    count = window.syncs.count
    return {"host_syncs_per_step": None if count is None else count / args.steps,
            "sync_sites": "; ".join(window.syncs.sites) or None}


def row_title(name: str) -> str:
    """`--rows` entry -> the row's name in the table."""
    titles = {"lightly": "lightly SimCLR", "epoch": "insub-hf M=5 epoch", "epochc": "insub-hf M=5 captured epoch"}
    if name in titles:
        return titles[name]
    return f"insub-hf M={name[:-1]} captured" if name.endswith("c") else f"insub-hf M={name}"


def finish(row: dict, args, peak: float | None, peak_source: str | None) -> dict:
    """The columns read off a measured row: epoch seconds, TFLOP/s, share of the peak."""
    rate = row.get("e2e_samples_s")
    if rate:
        row["epoch_s"] = args.epoch_images / rate
        row["tflops"] = row["step_tflop"] * rate / args.batch_size
        row["peak_share"] = row["tflops"] / peak if peak else None
    return {**row, "batch": args.batch_size, "bf16": args.bf16, "compile": args.compile,
            "peak_source": peak_source, "status": row.get("status", "ok")}


def parse(argv=None):
    cuda = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="Folder of speed.jsonl and speed.md.")
    parser.add_argument("--tiny", action="store_true", help="A CPU check of the whole path: ResNet-10 width 0.0625, "
                        "batch 16, 64 images, 2 + 2 steps, no compile.")
    parser.add_argument("--rows", nargs="+", default=None,
                        help="Rows in the order run (what matters most first): a number of heads M, lightly, epoch "
                        "(M=5 over a real epoch); a trailing c (5c, epochc) captures the whole step as one graph "
                        f"(capture_step). Default: {' '.join(ROWS)}; --tiny: {' '.join(TINY_ROWS)}.")
    parser.add_argument("--width", type=float, default=1.0, help="ResNet-18 width multiplier.")
    parser.add_argument("--depth", type=int, default=18, choices=(10, 18), help="The CIFAR ResNet's depth.")
    parser.add_argument("--batch_size", type=int, default=512)
    parser.add_argument("--images", type=int, default=50_000, help="Images in the CIFAR-shaped set.")
    parser.add_argument("--epoch_images", type=int, default=50_000, help="Images per epoch in the epoch_s column.")
    parser.add_argument("--warmup", type=int, default=10, help="Steps before timing (compilation happens here).")
    parser.add_argument("--steps", type=int, default=30, help="End-to-end steps timed.")
    parser.add_argument("--profile_steps", type=int, default=10, help="GPU: steps profiled for the busy share.")
    parser.add_argument("--step_repeats", type=int, default=20, help="Steps timed for the step-alone column.")
    parser.add_argument("--bf16", type=lambda s: s.lower() in ("1", "true", "yes"), default=None,
                        help="bf16 autocast (default: where the GPU has it).")
    parser.add_argument("--compile", type=lambda s: s.lower() in ("1", "true", "yes"), default=None,
                        help="torch.compile every row (default: on a GPU).")
    parser.add_argument("--workers", type=int, default=None, help="lightly's loader workers (default: min(8, "
                        "cores - 1) on a GPU, 0 on CPU).")
    parser.add_argument("--deadline", type=float, default=None, help="Unix time after which no row starts.")
    args = parser.parse_args(argv)
    args.rows = args.rows or list(TINY_ROWS if args.tiny else ROWS)
    if args.tiny:
        args.width, args.depth, args.batch_size, args.images, args.epoch_images = 0.0625, 10, 16, 64, 64
        args.warmup, args.steps, args.profile_steps, args.step_repeats = 2, 2, 2, 2
    args.bf16 = (cuda and torch.cuda.is_bf16_supported()) if args.bf16 is None else args.bf16
    args.compile = cuda if args.compile is None else args.compile
    args.workers = (min(8, max(1, (os.cpu_count() or 2) - 1)) if cuda else 0) if args.workers is None else args.workers
    return args


def main(argv=None) -> None:
    args = parse(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    measured = matmul_tflops(device)
    peak = datasheet_peak(name) if device.type == "cuda" else None
    peak_source = "datasheet" if peak else ("matmul" if measured else None)
    peak = peak or measured
    header = dict(device=name, torch=torch.__version__, matmul_bf16_tflops=measured and round(measured, 1),
                  peak_tflops=peak, width=args.width, images=args.images)
    rows = Rows(Path(args.out), header)
    generator = torch.Generator(device=device).manual_seed(0)
    pixels = torch.randint(0, 256, (args.images, CHANNELS, IMAGE_SIZE, IMAGE_SIZE), dtype=torch.uint8,
                           device=device, generator=generator)
    images = DeviceImages(pixels)
    for name in args.rows:
        if args.deadline is not None and time.time() > args.deadline:
            rows.add(finish({"row": row_title(name), "status": "not reached: deadline"}, args, peak, peak_source))
            continue
        try:
            if name == "lightly":
                row = lightly_row(args, pixels.permute(0, 2, 3, 1).cpu().numpy(), device)
            elif name.rstrip("c") == "epoch":
                row = insub_row(args, 5, images, device, Path(args.out), epoch=True, captured=name.endswith("c"))
            else:
                row = insub_row(args, int(name.rstrip("c")), images, device, Path(args.out),
                                captured=name.endswith("c"))
        except Exception as error:  # a failed row is a row: the next ones still run
            row = {"row": row_title(name), "status": f"failed: {type(error).__name__}: {str(error)[:300]}"}
        rows.add(finish(row, args, peak, peak_source))
        torch._dynamo.reset()  # each row compiles its own graphs; cached ones would not be its cost


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()

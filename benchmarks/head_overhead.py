"""What the M heads cost, measured side by side in one run on a ViT-tiny/32px encoder.

Prints: train-step time and memory for M = 1, 3, 5, 10 (ratios to M = 1); the heads alone (forward + backward,
M = 10) batched vs a Python loop of M modules vs a naive 3-D einsum, at two batch sizes; inference with all heads
vs the plain encoder; a DINO train step (multi-crop, EMA teacher and centre update included) with M = 5 vs M = 1.
Targets: step M=10/M=1 <= 1.04, inference heads/encoder <= 1.03, DINO step M=5/M=1 <= 1.04, batched heads at
least as fast as the loop on CPU (>= 1.5x on a GPU).

Memory: on a GPU the peak of `torch.cuda.max_memory_allocated`; on the CPU (where torch keeps no allocator
statistics) parameters + gradients + AdamW state + the activations saved for backward, counted exactly with
saved-tensor hooks. The optimizer is fused AdamW, the Trainer's default (`adamw_torch_fused`).

    python benchmarks/head_overhead.py [--batch_size 32] [--min_run_time 2] [--layers 12] [--rounds 3]
"""

from __future__ import annotations

import argparse

import torch
import torch.utils.benchmark as bench

from insub_hf import BatchedHeads, InSubConfig, InSubForPreTraining
from insub_hf.evaluation.cost import training_memory_mb

VIT_TINY_32 = dict(
    model_type="vit", image_size=32, patch_size=4, hidden_size=192, num_hidden_layers=12, num_attention_heads=3,
    intermediate_size=768,
)


def timed(fn, min_run_time: float, num_threads: int = 1) -> float:
    """Median seconds per call, with `num_threads` CPU threads (torch.utils.benchmark's default: one)."""
    fn()  # warm-up
    timer = bench.Timer("fn()", globals={"fn": fn}, num_threads=num_threads)
    return timer.blocked_autorange(min_run_time=min_run_time).median


def train_step_fn(model, optimizer, x1, x2, local=None):
    """One optimiser step, then the objective's per-step update the Trainer callback runs (DINO: centre and EMA
    teacher)."""
    extra = {} if local is None else {"local_pixel_values": local}

    def step():
        optimizer.zero_grad(set_to_none=True)
        model(pixel_values=x1, pixel_values_2=x2, **extra).loss.backward()
        optimizer.step()
        model.step_end(0, 100)

    return step


def interleaved_best(step_fns: dict, rounds: int, min_run_time: float, num_threads: int = 1) -> dict:
    """Best median per key over interleaved rounds: drift of a shared machine then hits every key alike."""
    steps = {key: float("inf") for key in step_fns}
    for _ in range(rounds):
        for key, fn in step_fns.items():
            steps[key] = min(steps[key], timed(fn, min_run_time, num_threads))
    return steps


def dino_rows(encoder: dict, args, device) -> tuple[float, float]:
    """DINO train step (2 global 32 px + N local 16 px crops, EMA teacher) with M = 5 vs M = 1."""
    b = args.batch_size
    x1, x2 = torch.randn(b, 3, 32, 32, device=device), torch.randn(b, 3, 32, 32, device=device)
    local = torch.randn(b, args.local_crops, 3, 16, 16, device=device)
    step_fns, memory = {}, {}
    for m in (1, 5):
        torch.manual_seed(0)
        config = InSubConfig(
            encoder_config=encoder, num_heads=m, objective="dino", head_output_size=256,
            objective_config={"out_dim": args.dino_out_dim},
        )
        model = InSubForPreTraining(config).to(device)
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4, fused=True)
        step_fns[m] = train_step_fn(model, optimizer, x1, x2, local)
        step_fns[m]()
        memory[m] = training_memory_mb(model, step_fns[m])
    steps = interleaved_best(step_fns, args.rounds, args.min_run_time)
    print(f"\nDINO train step (2 x 32px + {args.local_crops} x 16px crops, K={args.dino_out_dim}, EMA teacher)"
          "   time (ms)   ratio to M=1   memory (MB)   ratio to M=1")
    for m in (1, 5):
        print(f"  M={m:<3}{' ' * 68}{1e3 * steps[m]:9.1f}   {steps[m] / steps[1]:12.3f}   {memory[m]:11.1f}"
              f"   {memory[m] / memory[1]:12.3f}")
    return steps[5] / steps[1], memory[5] / memory[1]


def naive_einsum_heads(heads: BatchedHeads):
    """The same heads as a plain 3-D einsum per layer (the layout the batched one is measured against)."""
    w0 = heads.weights[0].permute(1, 0, 2)  # (M, d, h)

    def forward(x):
        h = torch.einsum("bd,mdh->bmh", x, w0)
        b, m, width = h.shape
        h = torch.relu(heads.norms[0](h.reshape(b, m * width))).view(b, m, width)
        return torch.einsum("bmh,mhq->bmq", h, heads.weights[1]) + heads.biases[1]

    return forward


def heads_fwd_bwd(forward, x):
    def run():
        out = forward(x)
        out.sum().backward()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch_size", type=int, default=32, help="Samples per train step (two views each).")
    parser.add_argument("--layers", type=int, default=12, help="ViT depth (ViT-tiny: 12).")
    parser.add_argument("--min_run_time", type=float, default=2.0, help="Seconds of timing per measurement.")
    parser.add_argument("--heads", type=int, nargs="+", default=[1, 3, 5, 10], help="Values of M to compare.")
    parser.add_argument("--rounds", type=int, default=3, help="Interleaved timing rounds of the train steps.")
    parser.add_argument("--local_crops", type=int, default=6, help="DINO rows: local crops per image.")
    parser.add_argument("--dino_out_dim", type=int, default=4096, help="DINO rows: K of each head's last layer.")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"device: {device}, torch threads: {torch.get_num_threads()}, ViT-tiny/32px depth {args.layers}, "
          f"batch {args.batch_size} x 2 views, heads 192-2048-BN-ReLU-128")

    encoder = dict(VIT_TINY_32, num_hidden_layers=args.layers)
    x1 = torch.randn(args.batch_size, 3, 32, 32, device=device)
    x2 = torch.randn(args.batch_size, 3, 32, 32, device=device)
    memory, step_fns = {}, {}
    for m in args.heads:
        torch.manual_seed(0)
        model = InSubForPreTraining(InSubConfig(encoder_config=encoder, num_heads=m)).to(device)
        # The Trainer's default optimizer on torch >= 2.8 (`adamw_torch_fused`).
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        step_fns[m] = train_step_fn(model, optimizer, x1, x2)
        step_fns[m]()  # creates the gradients and the optimizer state
        memory[m] = training_memory_mb(model, step_fns[m])
    steps = interleaved_best(step_fns, args.rounds, args.min_run_time)
    print("\ntrain step            time (ms)   ratio to M=1   memory (MB)   ratio to M=1")
    for m in args.heads:
        print(f"  M={m:<3}             {1e3 * steps[m]:9.1f}   {steps[m] / steps[args.heads[0]]:12.3f}"
              f"   {memory[m]:11.1f}   {memory[m] / memory[args.heads[0]]:12.3f}")

    print("\nheads alone, M=10, forward+backward   batched (ms)   loop (ms)   einsum (ms)   loop/batched   einsum/batched")
    for batch in (32, 256):
        torch.manual_seed(0)
        heads = BatchedHeads(192, [2048], 128, 10).to(device)
        loop = heads.as_modules()
        x = torch.randn(batch, 192, device=device, requires_grad=True)
        t_batched = timed(heads_fwd_bwd(heads, x), args.min_run_time)
        t_loop = timed(heads_fwd_bwd(lambda v: torch.stack([mlp(v) for mlp in loop], dim=1), x), args.min_run_time)
        t_einsum = timed(heads_fwd_bwd(naive_einsum_heads(heads), x), args.min_run_time)
        print(f"  batch {batch:<4}                         {1e3 * t_batched:12.2f}   {1e3 * t_loop:9.2f}"
              f"   {1e3 * t_einsum:11.2f}   {t_loop / t_batched:12.2f}x   {t_einsum / t_batched:13.2f}x")

    m = max(args.heads)
    torch.manual_seed(0)
    model = InSubForPreTraining(InSubConfig(encoder_config=encoder, num_heads=m)).to(device).eval()
    batch = torch.randn(256, 3, 32, 32, device=device)
    with torch.no_grad():
        t_encoder = timed(lambda: model.insub.get_representation(pixel_values=batch), args.min_run_time)
        t_heads = timed(lambda: model.insub(pixel_values=batch), args.min_run_time)
    print(f"\ninference, batch 256   encoder {1e3 * t_encoder:.1f} ms   encoder + {m} heads {1e3 * t_heads:.1f} ms"
          f"   ratio {t_heads / t_encoder:.3f}")
    dino_step, _ = dino_rows(encoder, args, device)
    m_top = args.heads[-1]
    print(f"\nratios vs targets: step M={m_top}/M={args.heads[0]} {steps[m_top] / steps[args.heads[0]]:.3f} "
          f"(target <= 1.04); inference heads/encoder {t_heads / t_encoder:.3f} (target <= 1.03); "
          f"DINO step M=5/M=1 {dino_step:.3f} (target <= 1.04)")


if __name__ == "__main__":
    main()

"""What serving the calibrated `uncertainty` costs a forward, measured side by side in one run on the CPU: the released
image model's forward with `uncertainty` (the k-NN search, the calibration, and the guard that the fit still matches
the weights) against the encoder and heads alone, at batch 1 and batch 256, interleaved round by round so that a busy
machine slows both alike; and whether a compiled forward with `uncertainty` is one graph (`torch._dynamo.explain`).
Target: at most 1.10x at both batch sizes; no graph break.

    python benchmarks/uncertainty_cost.py [--folder model_cards/insub-resnet10-fashion-mnist] [--rounds 7]

About 1 minute on a quiet 2-core machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from insub_hf import InSubModel


def timed(call, repeats: int) -> float:
    """Seconds per call of `call()`, over `repeats` calls."""
    start = time.perf_counter()
    for _ in range(repeats):
        call()
    return (time.perf_counter() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", default="model_cards/insub-resnet10-fashion-mnist")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds; the median ratio is reported")
    options = parser.parse_args()

    model = InSubModel.from_pretrained(options.folder).eval()
    block = model.config.uncertainty
    print(f"[cost] {options.folder}: reading {block['reading']!r}, a bank of {block['bank_size']} rows, k = "
          f"{block['k']}, {sum(p.numel() for p in model.parameters()):,} weights, {torch.get_num_threads()} threads",
          flush=True)
    channels, size = model.config.encoder_config.num_channels, 28
    generator = torch.Generator().manual_seed(0)
    verdicts = []
    with torch.no_grad():
        for batch, repeats in ((1, 200), (256, 3)):
            images = torch.rand(batch, channels, size, size, generator=generator)

            def heads_alone():
                model.embed_heads(model.get_representation(pixel_values=images))

            def with_uncertainty():
                assert model(pixel_values=images).uncertainty is not None

            with_uncertainty(), heads_alone()  # warm: the fit's one SHA-256 check happens here
            ratios, times = [], []
            for round_ in range(options.rounds):
                alone, served = timed(heads_alone, repeats), timed(with_uncertainty, repeats)
                ratios.append(served / alone)
                times.append((alone, served))
                print(f"[cost] batch {batch}, round {round_ + 1}/{options.rounds}: heads alone {1e3 * alone:.2f} ms, "
                      f"with uncertainty {1e3 * served:.2f} ms ({served / alone:.3f}x)", flush=True)
            ratio = statistics.median(ratios)
            verdicts.append(ratio <= 1.10)
            print(f"[cost] batch {batch}: median {ratio:.3f}x (target <= 1.10: {'met' if ratio <= 1.10 else 'missed'})",
                  flush=True)
        torch._dynamo.reset()
        explained = torch._dynamo.explain(model)(pixel_values=torch.rand(4, channels, size, size))
    print(f"[cost] compiled forward with uncertainty: {explained.graph_count} graph(s), "
          f"{explained.graph_break_count} break(s) {[str(r.reason) for r in explained.break_reasons]}", flush=True)
    print(f"[cost] verdict: ratio {'met' if all(verdicts) else 'missed'} at every batch size; "
          f"{'one graph' if explained.graph_break_count == 0 else 'graph breaks'}")


if __name__ == "__main__":
    main()

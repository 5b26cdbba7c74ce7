"""How the calibrated `uncertainty` should combine the k-NN distance and the heads' spread, measured: for each model
of `insub-hf demo` runs, each candidate rule's AUROC against every OOD set the demo reports (MNIST, uniform and
Gaussian noise) beside the single readings, and against the outliers the fit makes for itself (the only ones a rule
may be chosen on), and each rule's share of test images above 0.95 once ranked among held-out calibration rows.

    python benchmarks/combination_rules.py RUN_DIR [RUN_DIR ...] [--output FILE.json]

Rules (each a monotone score of the two oriented readings, standardised or ranked on one half of the held-out
calibration rows, A, then conformally ranked on the other half, B):
  knn       the k-NN distance alone
  spread    the oriented spread alone
  max_z     the larger of the two, each standardised by median and IQR on A (the rule up to this change)
  min_p     the larger of the two ranks on A (the minimum of the two conformal p-values)
  fisher    -log p_knn - log p_spread (Fisher's)
  chosen    Fisher's over the components a choice on the made outliers (pixels shuffled, and 4 x 4 tiles shuffled)
            keeps: one alone where it beats both together there by over 1 AUROC point (`chosen_on_made`)

The package serves `fisher` (`conformal.fisher`) with the components whose direction held.

About 1 minute per model on a quiet 2-core machine.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from insub_hf import InSubModel
from insub_hf.data import load_fashion_mnist
from insub_hf.evaluation.ood_sets import load_sklearn_digits
from insub_hf.evaluation.ood_detector import InSubOODDetector
from insub_hf.jobs.demo import DemoArguments, demo_evaluation_data
from insub_hf.jobs.experiment import calibration_split
from insub_hf.uncertainty.conformal import centre_and_scale, combined, conformal_rank, fisher, surprise
from insub_hf.uncertainty.fitting import shuffled_within, representations_and_spread, rows
from insub_hf.uncertainty.knn import BANK, knn_distance
from insub_hf.uncertainty.separation import pairwise_auroc


def tiles_shuffled(inputs: dict[str, torch.Tensor], main: str, generator: torch.Generator,
                   tiles: int = 4) -> dict[str, torch.Tensor] | None:
    """Outliers with local structure kept and the whole broken: each image cut into a `tiles` x `tiles` grid
    (`pixel_values (B, C, H, W)`, H and W divisible by `tiles`) or each DNA window into `tiles ** 2` blocks
    (`dna_one_hot (B, L, 4)`, L divisible), the pieces of each input put back in its own random order; None for
    text and for sizes that do not divide."""
    x = inputs[main]
    pieces = tiles * tiles
    if main == "pixel_values" and x.shape[2] % tiles == 0 and x.shape[3] % tiles == 0:
        b, c, h, w = x.shape
        grid = x.reshape(b, c, tiles, h // tiles, tiles, w // tiles).permute(0, 2, 4, 1, 3, 5)
        grid = grid.reshape(b, pieces, c, h // tiles, w // tiles)
    elif main == "dna_one_hot" and x.shape[1] % pieces == 0:
        grid = x.reshape(x.shape[0], pieces, x.shape[1] // pieces, x.shape[2])
    else:
        return None
    order = torch.rand(x.shape[0], pieces, generator=generator).argsort(dim=1).to(x.device)
    moved = grid.gather(1, order.view(*order.shape, *[1] * (grid.dim() - 2)).expand_as(grid))
    if main == "pixel_values":
        moved = moved.reshape(b, tiles, tiles, c, h // tiles, w // tiles).permute(0, 3, 1, 4, 2, 5).reshape(x.shape)
    else:
        moved = moved.reshape(x.shape)
    return {**inputs, main: moved}


def rule_scores(rule: str, a: torch.Tensor, x: torch.Tensor, chosen: list[int]) -> torch.Tensor:
    """`(N,)` of rule `rule` for components `x (2, N)` (knn, oriented spread) with reference `a (2, n_a)`; `chosen`:
    the components the "chosen" rule combines (`chosen_on_made`)."""
    if rule == "knn":
        return x[0].double()
    if rule == "spread":
        return x[1].double()
    if rule == "max_z":
        return combined(x, centre_and_scale(a)).double()
    reference = a.sort(dim=1).values
    if rule == "min_p":
        return surprise(reference, x).amax(dim=0)
    if rule == "fisher":
        return fisher(reference, x).double()
    if rule == "chosen":
        return fisher(reference[chosen], x[chosen]).double()
    raise ValueError(rule)


def chosen_on_made(reference: torch.Tensor, made: torch.Tensor, margin: float = 0.01) -> list[int]:
    """The components a rule picked on the made outliers would combine: all of them, unless one alone tells the
    reference rows `reference (C, n)` from the outliers `made (C, m)` better by more than `margin` of AUROC."""
    def auroc(chosen):
        return pairwise_auroc(fisher(reference[chosen], reference[chosen]).numpy(),
                              fisher(reference[chosen], made[chosen]).numpy())
    alone = {c: auroc([c]) for c in range(reference.shape[0])}
    best = max(alone, key=alone.get)
    return [best] if alone[best] > auroc(list(alone)) + margin else list(alone)


RULES = ("knn", "spread", "max_z", "min_p", "fisher", "chosen")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=Path)
    parser.add_argument("--model", type=Path, action="append", default=[],
                        help="a released image folder: fitted again on the bundled Fashion-MNIST, scored on its test "
                             "images against MNIST, noise and 8x8 digits")
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--reference", choices=("bank", "held"), default="bank",
                        help="A: bank rows (each searched without itself) or half of the held-out rows")
    options = parser.parse_args()
    measured = {}
    for run in [*options.runs, *options.model]:
        if run in options.model:
            args = DemoArguments(data_source="bundled")
            evaluation, _ = demo_evaluation_data(load_fashion_mnist("bundled"), args)
            shape = tuple(evaluation.test_images.shape[1:])
            evaluation.ood_images["digits8x8"] = load_sklearn_digits(1000, shape, seed=2)
            kept, held = calibration_split(len(evaluation.train_images), 0.3, 0)
            models = {"released": run}
        else:
            saved = json.loads((run / "run_arguments.json").read_text())
            args = DemoArguments(**{k: v for k, v in saved.items() if k in DemoArguments.__dataclass_fields__})
            data = load_fashion_mnist(args.data_source, args.train_per_class, args.test_per_class, seed=saved["seed"])
            evaluation, _ = demo_evaluation_data(data, args)
            kept, held = calibration_split(len(evaluation.train_images), args.calibration_fraction, saved["seed"])
            models = {"insub_m5": run / "insub_m5" / "model"}
        for name, folder in models.items():
            model = InSubModel.from_pretrained(folder).eval()
            calibration = evaluation.inputs(evaluation.train_images[held])
            fitted = model.fit_uncertainty(evaluation.inputs(evaluation.train_images[kept]), calibration,
                                           show_progress=False)
            direction = fitted.direction or model.config.uncertainty.get("direction") or -1
            detector = InSubOODDetector(model)

            def components(inputs):
                s = detector.score(inputs)
                return torch.stack([s["knn"], direction * s["head_spread"] if fitted.direction is None
                                    else s["head_spread"]])

            held_scores = components(calibration)
            bank_inputs = evaluation.inputs(evaluation.train_images[kept])
            if options.reference == "held":
                half = held_scores.shape[1] // 2
                a, b = held_scores[:, :half], held_scores[:, half:]
                made_from = rows(calibration, torch.arange(half))
            else:
                own = torch.randperm(len(kept), generator=torch.Generator().manual_seed(0))[:2000]
                made_from = rows(bank_inputs, own)
                representation, spread = representations_and_spread(model, made_from, 256)
                bank = getattr(model, BANK).bank.cpu()
                own_knn = knn_distance(torch.nn.functional.normalize(representation, dim=-1), bank, model.config.uncertainty["k"] + 1)
                a, b = torch.stack([own_knn, direction * spread]), held_scores
            test = components(evaluation.inputs(evaluation.test_images))
            sets = {n: components(evaluation.inputs(x)) for n, x in evaluation.ood_images.items()}
            generator = torch.Generator().manual_seed(0)
            made = {"shuffled": components(shuffled_within(made_from, "pixel_values", generator)),
                    "tiles": components(tiles_shuffled(made_from, "pixel_values", generator))}
            chosen = chosen_on_made(a.sort(dim=1).values, torch.cat(list(made.values()), dim=1))
            row = {"direction": fitted.direction, "chosen": chosen}
            for rule in RULES:
                def score(x):
                    return rule_scores(rule, a, x, chosen)

                base = score(test)
                served = conformal_rank(base.float(), score(b).float().sort().values)
                cell = {"flag_rate": float((served > 0.95).float().mean())}
                for n, x in sets.items():
                    cell[n] = round(100 * pairwise_auroc(base.numpy(), score(x).numpy()), 2)
                own = score(a).numpy()
                for n, x in made.items():  # against the rows they were made from (A), as the fit can
                    cell["made:" + n] = round(100 * pairwise_auroc(own, score(x).numpy()), 2)
                row[rule] = cell
            measured[f"{run.name}/{name}"] = row
            print(run.name, name, "direction", fitted.direction, "chosen", chosen, flush=True)
            for rule in RULES:
                print(f"  {rule:7s}", "  ".join(f"{k} {v}" for k, v in row[rule].items()), flush=True)
    print("points under the better single reading (knn, spread) per OOD set; worst, then the sum over cells; "
          "then the mean AUROC against the made outliers (the only evidence a rule may be chosen on):", flush=True)
    for rule in RULES[2:]:
        gaps, made = [], []
        for row in measured.values():
            for name, value in row[rule].items():
                if name.startswith("made:"):
                    made.append(value)
                elif name != "flag_rate":
                    gaps.append(max(row["knn"][name], row["spread"][name]) - value)
        print(f"  {rule:7s} worst {max(gaps):5.2f}  sum {sum(max(g, 0) for g in gaps):6.2f}  within 2 points on "
              f"{sum(g <= 2 for g in gaps)} of {len(gaps)} cells  made outliers {sum(made) / len(made):.2f}", flush=True)
    if options.output:
        options.output.write_text(json.dumps(measured, indent=1))


if __name__ == "__main__":
    main()

"""The paper's comparison with one command: pretrain every method through the same Trainer (cached per run),
evaluate each with the same harness, write a markdown table (with per-seed paired differences to the baseline), a
JSON file of every number and PNG plots. The protocol (data, methods, run cache) is `jobs.comparison`.

The default protocol converges on a CPU: a CIFAR-stem ResNet-10 at width 0.25 pretrained with SimCLR for 3 epochs
on the full Fashion-MNIST (Debian's copy; the bundled 5,000 images otherwise), views made per batch on the device,
then a linear probe on the frozen encoder."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..data import IMAGE_DATASET_PRESETS
from ..evaluation.cost import device_description
from ..evaluation.harness import HarnessArguments
from ..evaluation.probes import ProbeArguments
from ..evaluation.report import paired_differences
from ..evaluation.results import ComparisonRow
from .cards import HubCard, run_card
from .arguments import ProtocolArguments, job_seeds, training_arguments
from .comparison import RunCache, convergence_warnings, evaluate_cell, load_protocol_data
from .experiment import Experiment
from .methods import METHODS, method_members
from ..recipes import IMAGE
from ..training.trainer import InSubTrainingArguments
from ..validation import checked

# The image recipe's training (`recipes.IMAGE`); the comparison's own output folder
TRAINING_DEFAULTS = IMAGE.training_arguments(output_dir="runs/compare")


@dataclass
class ComparisonArguments(ProtocolArguments):
    """What to compare beyond the protocol's recipe and data (probe and harness settings have their own groups, the
    training `InSubTrainingArguments`; its output_dir holds the results, plots and the run cache)."""

    methods: list[str] = checked(
        default_factory=lambda: list(METHODS), help=f"Any of {tuple(METHODS)}.", choices=tuple(METHODS)
    )
    num_heads: list[int] = checked(
        default_factory=lambda: [IMAGE.num_heads], help="Values of M, each method's own: InSub's heads (Finetune-InSub: a probe per head), SSL-Ensemble's and "
        "BatchEnsemble's members (full table: 3 5 10).", low=2,
        integer=True,
    )
    seeds: list[int] | None = checked(
        None, "Pretraining seeds, each cell trains with its own (default: the Trainer's --seed); several give mean "
        "+- std and per-seed differences to the baseline.", low=0, integer=True, optional=True,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        simclr_only = [m for m in self.methods if METHODS[m].objective_overrides]
        if simclr_only and self.objective != "simclr":
            raise ValueError(
                f"ComparisonArguments.methods={self.methods} includes {simclr_only}, SimCLR's cosine control; with "
                f"objective={self.objective!r} leave it out (e.g. --methods baseline insub)."
            )


def check_comparison(args: ComparisonArguments, training_args: InSubTrainingArguments) -> None:
    """What the comparison needs of its argument groups together: a batch that every M divides (BatchEnsemble gives
    each member an equal share) and, to push, an InSub model."""
    batch = training_args.per_device_train_batch_size
    for m in args.num_heads:
        if batch % m:
            raise ValueError(
                f"InSubTrainingArguments.per_device_train_batch_size={batch} must be a multiple of every "
                f"ComparisonArguments.num_heads value (BatchEnsemble gives each member an equal share), got M={m}."
            )
    if training_args.push_to_hub and "insub" not in args.methods:
        raise ValueError(
            f"InSubTrainingArguments.push_to_hub=True pushes the InSub model; add 'insub' to "
            f"ComparisonArguments.methods (got {args.methods})."
        )


def run_comparison(
    args: ComparisonArguments, training_args: InSubTrainingArguments | None = None,
    probe_args: ProbeArguments | None = None, harness_args: HarnessArguments | None = None,
) -> dict:
    """Runs every (method, M, seed) trained with `training_args` (default: `TRAINING_DEFAULTS`), then writes
    `results.json`, `results.md` and the plots to its output_dir; with `--push_to_hub`, pushes the first InSub model
    with its numbers and the full tables."""
    from ..evaluation.plots import write_plots
    from ..evaluation.report import markdown_report

    training_args = training_args or training_arguments(TRAINING_DEFAULTS)
    args.seeds = job_seeds(args.seeds, training_args)
    check_comparison(args, training_args)
    probe_args, harness_args = probe_args or ProbeArguments(), harness_args or HarnessArguments()
    # checks the token and the output folder before any training
    experiment = Experiment("compare", training_args, asdict(args), TRAINING_DEFAULTS,
                            overwrite=args.overwrite_output_dir)
    start = time.time()
    loaded = load_protocol_data(args)
    data = loaded.evaluation
    print(f"[compare] data: {loaded.description}", flush=True)
    cache = RunCache(experiment, args, loaded)
    rows, plot_arrays = [], {}
    for seed in args.seeds:
        for method in args.methods:
            for m in args.num_heads if METHODS[method].uses_m else [None]:
                name = METHODS[method].row_name(m, harness_args.mc_dropout_passes)
                print(f"[compare] seed {seed}: {name}", flush=True)
                measured, arrays = evaluate_cell(method, m, seed, cache, data, probe_args, harness_args)
                rows.append(ComparisonRow(name, method, m, seed, measured))
                test = measured.test
                print(
                    f"[compare] seed {seed}: {name}: accuracy {100 * test.accuracy:.2f}% | k-NN "
                    f"{100 * measured.knn_accuracy:.2f}% | ECE {100 * test.ece:.2f}% | NLL {test.nll:.3f}", flush=True,
                )
                plot_arrays.setdefault(name, arrays)
    warnings = convergence_warnings(rows, len(data.train_images), args.dataset)
    results = {
        "probe_args": asdict(probe_args), "harness_args": asdict(harness_args),
        "data": {"source": loaded.description, "train": len(data.train_images), "test": len(data.test_images),
                 "ood": {k: len(v) for k, v in data.ood_images.items()}, "num_classes": data.num_classes},
        "device": device_description(),
        "rows": [row.to_dict() for row in rows], "paired_differences": paired_differences(rows),
        "warnings": warnings, "wall_seconds": round(time.time() - start, 1),
    }
    recorded = {"args": experiment.arguments, **results}  # what results.json holds
    report = markdown_report(recorded, rows)
    out = experiment.output_dir
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(report)
    write_plots(rows, plot_arrays, out)
    experiment.finish(
        results,
        f"{report}\n" + "".join(f"[compare] warning: {w}\n" for w in warnings)
        + f"[compare] wrote {out}/results.md, results.json and plots in {results['wall_seconds']:.0f} s",
    )
    if experiment.push_target is not None:
        push_comparison(experiment, args, results, rows, cache, out)
    return recorded


def push_comparison(
    experiment: Experiment, args: ComparisonArguments, results: dict, rows: list[ComparisonRow], cache: RunCache,
    out: Path,
):
    """Pushes the first InSub row's model with its numbers as model-index metrics, and the full comparison
    (results.md, results.json) under `evaluation/` in the repo. Returns the upload's `CommitInfo`."""
    row = next(r for r in rows if r.method == "insub")
    [(config, seed)] = method_members(args, "insub", row.num_heads, row.seed)
    model, _ = cache.get(config, seed)
    card = comparison_card(out, row.name, args.dataset, model)
    return experiment.push(model, card, commit_message=f"{row.name}: model and insub-hf compare results")


def comparison_card(out: Path, row: str, dataset: str, model=None) -> HubCard:
    """What the model of the comparison row `row` in `out` is pushed with: the card its results give
    (`cards.card_from_results`), the data's image processor, and the full comparison (results.md, results.json)
    under `evaluation/`."""
    return run_card(out / "results.json", row, model, processor=IMAGE_DATASET_PRESETS[dataset].image_processor(),
                    report=True)


ARGUMENT_GROUPS = (ComparisonArguments, InSubTrainingArguments, ProbeArguments, HarnessArguments)
run = run_comparison

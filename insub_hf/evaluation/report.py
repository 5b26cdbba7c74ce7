"""Markdown tables of a comparison run, like the paper's (mean +- std over seeds when there are several). Rows are
`ComparisonRow`s; a value is read by its path through the row's `MethodResults` (fields, then dict keys)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from .results import ComparisonRow


def _by_name(rows: list[ComparisonRow]) -> dict[str, list[ComparisonRow]]:
    groups: dict[str, list[ComparisonRow]] = defaultdict(list)
    for row in rows:
        groups[row.name].append(row)
    return groups


def _get(row: ComparisonRow, path: tuple[str, ...]):
    """The value at `path` in `row.results` (None where a part is missing)."""
    node = row.results
    for key in path:
        node = node.get(key) if isinstance(node, dict) else getattr(node, key, None)
        if node is None:
            return None
    return node


def _cell(rows: list[dict], path: tuple[str, ...], scale: float = 1.0, digits: int = 2) -> str:
    values = [_get(r, path) for r in rows]
    values = [scale * v for v in values if v is not None]
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{np.mean(values):.{digits}f} ± {np.std(values, ddof=1):.{digits}f}"


def _corruption_mean(key: str):
    """A row's corruption `key` (accuracy, ece) averaged over severities (None without corruptions)."""
    def get(row: ComparisonRow):
        per_severity = [getattr(v, key) for v in row.results.corruption_mean.values()]
        return float(np.mean(per_severity)) if per_severity and None not in per_severity else None
    return get


def _at(*path: str):
    return lambda row: _get(row, path)


# (label, value of a row, scale, digits, lower is better) of every metric the paired differences cover
PAIRED_METRICS = (
    ("Acc", _at("test", "accuracy"), 100, 2, False),
    ("k-NN Acc", _at("knn_accuracy"), 100, 2, False),
    ("ECE", _at("test", "ece"), 100, 2, True),
    ("ECE (T)", _at("test", "ece_scaled"), 100, 2, True),
    ("TACE", _at("test", "tace"), 100, 2, True),
    ("NLL", _at("test", "nll"), 1, 3, True),
    ("NLL (T)", _at("test", "nll_scaled"), 1, 3, True),
    ("AURC", _at("selective", "aurc"), 100, 2, True),
    ("Brier", _at("test", "brier"), 1, 3, True),
    ("Corr. Acc", _corruption_mean("accuracy"), 100, 2, False),
    ("Corr. ECE", _corruption_mean("ece"), 100, 2, True),
)
# OOD scores every method has (the head spread has no baseline value: `spread_against_chance` reports it)
PAIRED_OOD_SCORES = (("msp", "MSP"), ("entropy", "entropy"), ("knn", "k-NN"), ("uncertainty", "calibrated"))


def _ood_metrics(rows: list[ComparisonRow]) -> tuple:
    sets = sorted({name for row in rows for name in row.results.ood})
    return tuple((f"AUROC {s} {label}", _at("ood", s, key), 100, 2, False) for s in sets
                 for key, label in PAIRED_OOD_SCORES)


def paired_differences(rows: list[ComparisonRow], reference: str = "baseline") -> dict[str, dict[str, dict]]:
    """Per-seed paired differences `method - reference` (same seed) for every metric of `PAIRED_METRICS` (test
    calibration, corruptions averaged over types and severities) and the OOD AUROC of every `PAIRED_OOD_SCORES`.

    Returns:
        row name -> metric label -> `{"per_seed": {seed: difference}, "mean", "std" (ddof 1; None for one seed),
        "better_on": seeds where the method is better, "seeds": how many}` in the table's units (%, NLL as is).
        Rows whose seed has no reference row are skipped.
    """
    references = {row.seed: row for row in rows if row.method == reference}
    out: dict[str, dict[str, dict]] = {}
    for name, group in _by_name([r for r in rows if r.method != reference]).items():
        for label, value, scale, _, lower_better in PAIRED_METRICS + _ood_metrics(rows):
            per_seed = {}
            for row in group:
                ref = references.get(row.seed)
                mine, theirs = value(row), value(ref) if ref else None
                if mine is not None and theirs is not None:
                    per_seed[row.seed] = scale * (mine - theirs)
            if not per_seed:
                continue
            values = list(per_seed.values())
            better = [seed for seed, d in per_seed.items() if (d < 0 if lower_better else d > 0)]
            out.setdefault(name, {})[label] = {
                "per_seed": per_seed, "mean": float(np.mean(values)),
                "std": float(np.std(values, ddof=1)) if len(values) > 1 else None,
                "better_on": better, "seeds": len(values),
            }
    return out


def spread_against_chance(rows: list[ComparisonRow]) -> dict[str, dict[str, dict]]:
    """The head spread's OOD AUROC (in the direction fixed per model on validation noise) per seed against chance
    (50%): row name -> OOD set -> `{"per_seed": {seed: AUROC %}, "mean", "better_on": seeds above 50, "seeds"}`."""
    out: dict[str, dict[str, dict]] = {}
    for name, group in _by_name(rows).items():
        for ood_set in sorted({s for row in group for s in row.results.ood}):
            per_seed = {row.seed: 100 * value for row in group
                        if (value := _get(row, ("ood", ood_set, "head_spread"))) is not None}
            if per_seed:
                out.setdefault(name, {})[ood_set] = {
                    "per_seed": per_seed, "mean": float(np.mean(list(per_seed.values()))),
                    "better_on": [seed for seed, v in per_seed.items() if v > 50], "seeds": len(per_seed),
                }
    return out


def _verdict(cell: dict) -> str:
    if len(cell["better_on"]) == cell["seeds"]:
        return "better on all seeds"
    if not cell["better_on"]:
        return "worse on all seeds"
    return f"better on {len(cell['better_on'])}/{cell['seeds']}"


def _cells_table(first: str, cells_by_name: dict[str, dict[str, dict]], labels: list[str], digits: dict,
                 signed: bool = True) -> str:
    lines = []
    for name, cells in cells_by_name.items():
        line = [name]
        for label in labels:
            cell = cells.get(label)
            if cell is None:
                line.append("–")
                continue
            d = digits[label]
            sign = "+" if signed else ""
            seeds = ", ".join(f"{v:{sign}.{d}f}" for v in cell["per_seed"].values())
            # the spread of the differences once three seeds give it some meaning
            spread = f" ± {cell['std']:.{d}f}" if cell.get("std") is not None and cell["seeds"] >= 3 else ""
            line.append(f"{cell['mean']:{sign}.{d}f}{spread} ({seeds}): {_verdict(cell)}")
        lines.append(line)
    return _table([first, *labels], lines)


def paired_table(differences: dict[str, dict[str, dict]], rows: list[ComparisonRow], ood: bool | None = None) -> str:
    """Markdown: one line per method, one cell per metric: `mean (d_seed0, d_seed1, ...)` (`mean ± std (...)` from
    three seeds on, std with ddof 1), then the verdict.
    `ood`: only the OOD AUROC columns (True), only the others (False), or all (None)."""
    digits = {label: d for label, _, _, d, _ in PAIRED_METRICS + _ood_metrics(rows)}
    labels = [label for label in digits if any(label in cells for cells in differences.values())
              and (ood is None or label.startswith("AUROC") == ood)]
    return _cells_table("Method - Baseline", differences, labels, digits)


def spread_table(spread: dict[str, dict[str, dict]]) -> str:
    """Markdown of `spread_against_chance`: AUROC % per OOD set, `mean (seed values)`, and on how many seeds it is
    above chance."""
    sets = sorted({s for cells in spread.values() for s in cells})
    return _cells_table("Head spread AUROC (%) vs 50", spread, sets, dict.fromkeys(sets, 1), signed=False).replace(
        "better on", "above chance on").replace("worse on all seeds", "at or below chance on all seeds")


def _table(header: list[str], lines: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join(out)


# (key, label) of the uncertainty scores the retrieval, crop and FPR95 tables show
TABLE_SCORES = (("msp", "MSP"), ("knn", "k-NN"), ("head_spread", "head spread"), ("uncertainty", "calibrated"))


def uncertainty_table(groups: dict[str, list[ComparisonRow]]) -> str:
    """Markdown: calibration after temperature scaling, selective prediction, retrieval uncertainty and the crop
    test per method (`docs/evaluation.md` defines each)."""
    header = ["Method", "T", "ECE", "ECE (T)", "NLL", "NLL (T)", "AURC", "AUGRC",
              *[f"R-AUROC {label}" for _, label in TABLE_SCORES], *[f"crop rho {label}" for _, label in TABLE_SCORES]]
    lines = [[name, _cell(rows, ("test", "temperature")), _cell(rows, ("test", "ece"), 100),
              _cell(rows, ("test", "ece_scaled"), 100), _cell(rows, ("test", "nll"), digits=3),
              _cell(rows, ("test", "nll_scaled"), digits=3), _cell(rows, ("selective", "aurc"), 100),
              _cell(rows, ("selective", "augrc"), 100),
              *[_cell(rows, ("retrieval", key), 100, 1) for key, _ in TABLE_SCORES],
              *[_cell(rows, ("crop", key, "spearman"), digits=2) for key, _ in TABLE_SCORES]]
             for name, rows in groups.items()]
    return "\n".join([
        "Calibration after temperature scaling (one T per method, fitted by NLL on the probe's validation split of the "
        "training images; ECE and AURC in %), selective prediction (AURC, AUGRC of the max probability; lower is "
        "better), retrieval (R-AUROC %: the score predicting that the test image's nearest training image has "
        "another class) and the crop test (Spearman rho of crop fraction and score; negative = smaller crops less "
        "certain, as they should be):", "", _table(header, lines)])


def fpr95_table(groups: dict[str, list[ComparisonRow]], ood_sets: list[str]) -> str:
    """Markdown: FPR at 95 % TPR (%) per OOD set and score (lower is better)."""
    return "\n".join(["FPR at 95 % TPR (%; lower is better) per OOD set and score:", "", _table(
        ["Method", *[f"{s}: {label}" for s in ood_sets for _, label in TABLE_SCORES]],
        [[name, *[_cell(rows, ("ood_fpr95", s, key), 100, 1) for s in ood_sets for key, _ in TABLE_SCORES]]
         for name, rows in groups.items()])])


def markdown_report(results: dict, rows: list[ComparisonRow]) -> str:
    """The comparison as markdown: main table (calibration, OOD by max probability, diversity, cost), OOD by every
    score, semi-supervised probes and corruptions averaged over types. `results`: what results.json holds besides
    the rows (args, data, device, wall_seconds, paired_differences)."""
    groups = _by_name(rows)
    ood_sets = list(results["data"]["ood"])
    first = next(iter(groups.values()))[0].results if groups else None
    seeds = sorted({r.seed for r in rows})
    parts = [
        f"Data: {results['args']['dataset']}, {results['data']['train']} train / {results['data']['test']} test "
        f"images; OOD sets {', '.join(f'{k} ({v})' for k, v in results['data']['ood'].items())}; seeds {seeds}; "
        f"device {results['device']}; {results['wall_seconds'] / 60:.1f} min. Ensembles average member "
        "probabilities; metrics in %, NLL and Brier as is; AUROC by max softmax probability, in-distribution "
        "positive; Disagr./err: pairwise disagreement over member error (Fort et al.); cost per method "
        "(SSL-Ensemble: sum over its members).",
        "",
        _table(
            ["Method", "Members", "Acc", "k-NN Acc", "ECE", "TACE", "NLL", "Brier", *[f"AUROC {s}" for s in ood_sets],
             "Disagr./err", "Params (M)", "s/step", "Memory (MB)"],
            [
                [name, str(rows[0].results.members), _cell(rows, ("test", "accuracy"), 100),
                 _cell(rows, ("knn_accuracy",), 100),
                 _cell(rows, ("test", "ece"), 100), _cell(rows, ("test", "tace"), 100),
                 _cell(rows, ("test", "nll"), digits=3), _cell(rows, ("test", "brier"), digits=3),
                 *[_cell(rows, ("ood", s, "msp"), 100) for s in ood_sets],
                 _cell(rows, ("test", "disagreement_over_error"), digits=3),
                 _cell(rows, ("cost", "parameters"), 1e-6, 3), _cell(rows, ("cost", "seconds_per_step"), digits=3),
                 _cell(rows, ("cost", "peak_memory_mb"), digits=0)]
                for name, rows in groups.items()
            ],
        ),
    ]
    parts += ["", "Training (mean over seeds; first member of an ensemble): final ssl loss, how much it still fell over the last "
              "fifth of the steps, and the share of head spreads below alpha (where the diversity hinge acts):", "",
              _table(["Method", "ssl loss", "late drop (%)", "hinge active (%)"],
                     [[name, _cell(rows, ("training", "ssl_loss_final"), digits=3),
                       _cell(rows, ("training", "ssl_loss_late_drop"), 100, 1),
                       _cell(rows, ("training", "hinge_active_mean"), 100, 1)] for name, rows in groups.items()])]
    differences = results.get("paired_differences")
    if differences:
        parts += ["", "Paired differences to the baseline of the same seed (mean, then per seed; ECE, TACE, NLL, "
                  "Brier: lower is better; corruptions: mean over types and severities):", "",
                  paired_table(differences, rows, ood=False), "",
                  "OOD AUROC (%), paired differences to the baseline of the same seed, by score:", "",
                  paired_table(differences, rows, ood=True)]
    spread = spread_against_chance(rows)
    if spread:
        parts += ["", "Head spread (label-free; InSub only, no baseline value): OOD AUROC per seed against chance:", "",
                  spread_table(spread)]
    scores = [("msp", "MSP"), ("entropy", "entropy"), ("mutual_information", "MI"),
              ("knn", "k-NN (label-free)"), ("knn_heads", "k-NN heads (label-free)"),
              ("head_spread", "head spread (label-free, direction fixed on validation noise)"),
              ("uncertainty", "calibrated (label-free: the model's own, k-NN and spread combined)")]
    parts += ["", "OOD AUROC (%) by score (probe: MSP, entropy, MI; label-free, no probe: k-th neighbour distance to the "
              "training representations and in each head's space, and the head spread read in the direction fixed per model on validation noise):", "", _table(
        ["Method", *[f"{s}: {label}" for s in ood_sets for _, label in scores]],
        [[name, *[_cell(rows, ("ood", s, key), 100) for s in ood_sets for key, _ in scores]]
         for name, rows in groups.items()],
    )]
    parts += ["", uncertainty_table(groups), "", fpr95_table(groups, ood_sets)]
    flagged = {name: rows for name, rows in groups.items() if any(r.results.flag_rate is not None for r in rows)}
    if flagged:  # the calibrated reading's promise, checked on the test images
        parts += ["", "Test images whose calibrated `uncertainty` is above 0.95 (%; about 5 by construction), per "
                  "seed:", "", _table(["Method", "mean", "per seed"], [
                      [name, _cell(rows, ("flag_rate",), 100, 1),
                       ", ".join("–" if r.results.flag_rate is None else f"{100 * r.results.flag_rate:.1f}"
                                 for r in rows)] for name, rows in flagged.items()])]
    fractions = list(first.semi_supervised) if first else []
    if fractions:
        parts += ["", "Semi-supervised linear probes (labels used: Acc / ECE / NLL):", "", _table(
            ["Method", *[f"{f} {m}" for f in fractions for m in ("Acc", "ECE", "NLL")]],
            [[name, *[_cell(rows, ("semi_supervised", f, key), scale, d) for f in fractions
                      for key, scale, d in (("accuracy", 100, 2), ("ece", 100, 2), ("nll", 1, 3))]]
             for name, rows in groups.items()],
        )]
    corruptions = first.corruptions if first else {}
    if corruptions:
        severities = list(first.corruption_mean)
        parts += ["", f"Corruptions ({len(corruptions)} types, mean over types; Acc / ECE per severity):", "", _table(
            ["Method", *[f"s{s} {m}" for s in severities for m in ("Acc", "ECE")]],
            [[name, *[_cell(rows, ("corruption_mean", s, key), 100) for s in severities for key in ("accuracy", "ece")]]
             for name, rows in groups.items()],
        )]
        parts += ["", "Corrupted vs clean test images, AUROC (%) per severity: probe MSP / label-free k-NN:", "", _table(
            ["Method", *[f"s{s} {m}" for s in severities for m in ("MSP", "k-NN")]],
            [[name, *[_cell(rows, ("corruption_mean", s, key), 100) for s in severities for key in ("auroc_msp", "auroc_knn")]]
             for name, rows in groups.items()],
        )]
    return "\n".join(parts) + "\n"

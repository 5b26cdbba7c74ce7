"""Markdown tables of a comparison run, like the paper's (mean +- std over seeds when there are several)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np


def _by_name(rows: list[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        groups[row["name"]].append(row)
    return groups


def _get(row: dict, path: tuple[str, ...]):
    for key in path:
        if not isinstance(row, dict) or key not in row:
            return None
        row = row[key]
    return row


def _cell(rows: list[dict], path: tuple[str, ...], scale: float = 1.0, digits: int = 2) -> str:
    values = [_get(r, path) for r in rows]
    values = [scale * v for v in values if v is not None]
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{np.mean(values):.{digits}f} ± {np.std(values, ddof=1):.{digits}f}"


def _table(header: list[str], lines: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join(out)


def markdown_report(results: dict) -> str:
    """The comparison as markdown: main table (calibration, OOD by max probability, diversity, cost), OOD by every
    score, semi-supervised probes and corruptions averaged over types."""
    groups = _by_name(results["rows"])
    ood_sets = list(results["data"]["ood"])
    first = next(iter(groups.values()))[0] if groups else {}
    seeds = sorted({r["seed"] for r in results["rows"]})
    parts = [
        f"Data: {results['args']['dataset']}, {results['data']['train']} train / {results['data']['test']} test "
        f"images; OOD sets {', '.join(f'{k} ({v})' for k, v in results['data']['ood'].items())}; seeds {seeds}; "
        f"device {results['device']}; {results['wall_seconds'] / 60:.1f} min. Ensembles average member "
        "probabilities; metrics in %, NLL and Brier as is; AUROC by max softmax probability, in-distribution "
        "positive; Disagr./err: pairwise disagreement over member error (Fort et al.); cost per method "
        "(SSL-Ensemble: sum over its members).",
        "",
        _table(
            ["Method", "Members", "Acc", "ECE", "TACE", "NLL", "Brier", *[f"AUROC {s}" for s in ood_sets],
             "Disagr./err", "Params (M)", "s/step", "Memory (MB)"],
            [
                [name, str(rows[0]["members"]), _cell(rows, ("test", "accuracy"), 100),
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
    scores = [("msp", "MSP"), ("neg_entropy", "entropy"), ("neg_mutual_information", "MI"),
              ("neg_head_sigma", "head sigma (label-free)")]
    parts += ["", "OOD AUROC (%) by score:", "", _table(
        ["Method", *[f"{s}: {label}" for s in ood_sets for _, label in scores]],
        [[name, *[_cell(rows, ("ood", s, key), 100) for s in ood_sets for key, _ in scores]]
         for name, rows in groups.items()],
    )]
    fractions = list(first.get("semi_supervised", {}))
    if fractions:
        parts += ["", "Semi-supervised linear probes (labels used: Acc / ECE / NLL):", "", _table(
            ["Method", *[f"{f} {m}" for f in fractions for m in ("Acc", "ECE", "NLL")]],
            [[name, *[_cell(rows, ("semi_supervised", f, key), scale, d) for f in fractions
                      for key, scale, d in (("accuracy", 100, 2), ("ece", 100, 2), ("nll", 1, 3))]]
             for name, rows in groups.items()],
        )]
    corruptions = first.get("corruptions", {})
    if corruptions:
        severities = list(first["corruption_mean"])
        parts += ["", f"Corruptions ({len(corruptions)} types, mean over types; Acc / ECE per severity):", "", _table(
            ["Method", *[f"s{s} {m}" for s in severities for m in ("Acc", "ECE")]],
            [[name, *[_cell(rows, ("corruption_mean", s, key), 100) for s in severities for key in ("accuracy", "ece")]]
             for name, rows in groups.items()],
        )]
    return "\n".join(parts) + "\n"

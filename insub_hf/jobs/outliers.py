"""`insub-hf score --fdr Q`: which inputs of the scored split are outliers, the false discovery rate among them held
at Q (Benjamini-Hochberg over the model's conformal p-values, `uncertainty.pvalues`), listed by file where the data
came from files (an image folder), else by row and text."""

from __future__ import annotations

import torch

from ..uncertainty.pvalues import OutlierSelection, conformal_pvalues


def item_name(item, row: int) -> str:
    """A flagged input as a user finds it again: its file (an image decoded from a file), its text, else its row."""
    if isinstance(item, str):
        return item if len(item) <= 120 else item[:117] + "..."
    return getattr(item, "filename", "") or f"row {row}"


def listed_outliers(items: list, uncertainty: torch.Tensor, block: dict, fdr: float, split: str) -> dict:
    """The outliers among `items` (the scored split, in order) by their served `uncertainty (N,)` under the model's
    `uncertainty` block, at false discovery rate `fdr`: what `outliers.json` holds."""
    selection = OutlierSelection.of(conformal_pvalues(uncertainty, block), fdr)
    return {"fdr": fdr, "split": split, "tested": len(selection.pvalues) - len(selection.unserved),
            "unserved": len(selection.unserved),
            "flagged": [{"row": int(i), "input": item_name(items[i], int(i)), "pvalue": float(selection.pvalues[i])}
                        for i in selection.flagged]}


def outliers_lines(listed: dict, shown: int = 20) -> list[str]:
    """What the CLI prints of `listed_outliers`: a summary line, then up to `shown` flagged inputs."""
    flagged = listed["flagged"]
    lines = [f"[score] --fdr {listed['fdr']}: {len(flagged)} of the {listed['tested']:,} {listed['split']} inputs "
             f"flagged as outliers (Benjamini-Hochberg on the conformal p-values: at most {100 * listed['fdr']:g} % "
             "of the flagged are expected to be in-distribution)"
             + (f"; {listed['unserved']} outside the calibrated lengths, not tested" if listed["unserved"] else "")]
    lines += [f"  {entry['input']}  (p = {entry['pvalue']:.4g})" for entry in flagged[:shown]]
    if len(flagged) > shown:
        lines.append(f"  ... and {len(flagged) - shown} more in outliers.json")
    return lines

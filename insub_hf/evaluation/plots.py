"""PNG plots of a comparison run: reliability diagrams, metrics vs M, head spread over training, OOD score
histograms and corruption curves. matplotlib is imported here only (no plotting import at package import)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:  # pragma: no cover - matplotlib is a dependency
        raise ImportError("Plots need matplotlib: pip install matplotlib") from error
    return plt


def reliability_diagrams(arrays: dict[str, dict], path: Path) -> None:
    plt = _pyplot()
    names = list(arrays)
    fig, axes = plt.subplots(1, len(names), figsize=(3 * len(names), 3.2), squeeze=False)
    for ax, name in zip(axes[0], names):
        bins = arrays[name]["reliability"]
        centers = ((bins.edges[:-1] + bins.edges[1:]) / 2).numpy()
        acc = np.nan_to_num(bins.accuracy.numpy())
        ax.bar(centers, acc, width=1 / len(centers), edgecolor="k", label="accuracy")
        ax.plot([0, 1], [0, 1], "r--", label="perfect")
        ax.set(title=name, xlabel="confidence", xlim=(0, 1), ylim=(0, 1))
    axes[0][0].set_ylabel("accuracy")
    axes[0][0].legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def metrics_vs_m(rows: list, path: Path) -> None:
    """Accuracy, ECE, NLL against M per method (the baseline drawn at M = 1 for every curve); `rows`:
    `ComparisonRow`s."""
    plt = _pyplot()
    baseline = [r for r in rows if r.method == "baseline"]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    for ax, (key, label) in zip(axes, (("accuracy", "accuracy"), ("ece", "ECE"), ("nll", "NLL"))):
        for method in ("ssl_ensemble", "batch_ensemble", "insub", "finetune_insub"):
            points = {}
            for r in baseline:
                points.setdefault(1, []).append(getattr(r.results.test, key))
            for r in (r for r in rows if r.method == method):
                points.setdefault(r.num_heads, []).append(getattr(r.results.test, key))
            if len(points) > 1 or (points and not baseline):
                ms = sorted(points)
                ax.plot(ms, [np.mean(points[m]) for m in ms], "o-", label=method)
        ax.set(xlabel="M", title=label)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def sigma_over_training(arrays: dict[str, dict], path: Path) -> None:
    """Mean head spread over pretraining and, where logged, the share of spreads below alpha (hinge active)."""
    plt = _pyplot()
    keys = [("sigma_over_training", "mean sigma across heads", "head spread during pretraining")]
    if any(a.get("hinge_active_over_training") for a in arrays.values()):
        keys.append(("hinge_active_over_training", "share of sigma < alpha", "where the diversity hinge acts"))
    fig, axes = plt.subplots(1, len(keys), figsize=(5 * len(keys), 3.2), squeeze=False)
    for ax, (key, ylabel, title) in zip(axes[0], keys):
        for name, a in arrays.items():
            if a.get(key):
                steps, values = zip(*a[key])
                ax.plot(steps, values, label=name)
        ax.set(xlabel="step", ylabel=ylabel, title=title)
        if ax.has_data():
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def mechanism_plot(curves: dict[str, dict], alphas: dict[str, dict], path: Path) -> None:
    """Per objective (a column): sigma over training per run (top; `curves[objective][run]["sigma"] = [(step,
    sigma), ...]`) with each run's alpha dashed in its colour (`alphas[objective][run]`), and RankMe of the mean
    embedding on the collapse monitor's fixed batch (bottom; `["rankme"]`, where it was logged)."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, len(curves), figsize=(4.2 * len(curves), 6.2), squeeze=False)
    for column, (objective, runs) in enumerate(curves.items()):
        top, bottom = axes[0][column], axes[1][column]
        for name, curve in runs.items():
            steps, values = zip(*curve["sigma"])
            line = top.plot(steps, values, label=name)[0]
            if "lambda 0" not in name:
                top.axhline(alphas[objective][name], color=line.get_color(), linestyle="--", linewidth=0.8)
            if curve.get("rankme"):
                bottom.plot(*zip(*curve["rankme"]), label=name, color=line.get_color())
        top.set(xlabel="step", ylabel="mean sigma across heads", title=f"{objective} (dashed: alpha)")
        top.legend(fontsize=7)
        bottom.set(xlabel="step", ylabel="RankMe of the mean embedding", title=f"{objective}: collapse monitor")
        if bottom.has_data():
            bottom.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def ood_histograms(arrays: dict[str, dict], path: Path) -> None:
    """Histograms of the OOD scores `msp` (negative max probability), `knn` (k-NN distance) and `head_spread` (in
    the direction fixed on validation noise), each higher = more likely OOD, for the test set and each OOD set, per
    method."""
    plt = _pyplot()
    names = list(arrays)
    keys = ["msp", "knn", "head_spread"]
    axis = {"msp": "negative max probability of the probe", "knn": "k-NN cosine distance (label-free)",
            "head_spread": "uncertainty: the heads' spread, oriented"}
    fig, axes = plt.subplots(len(names), len(keys), figsize=(4.5 * len(keys), 2.4 * len(names)), squeeze=False)
    for i, name in enumerate(names):
        for j, key in enumerate(keys):
            ax = axes[i][j]
            for split, scores in arrays[name]["scores"].items():
                if key in scores:
                    ax.hist(scores[key].numpy(), bins=40, alpha=0.5, label=split, density=True)
            ax.set_title(f"{name}: {key}", fontsize=8)
            ax.set_xlabel(f"{axis[key]} (higher = more likely OOD)", fontsize=7)
            ax.set_ylabel("density", fontsize=7)
            if ax.has_data():
                ax.legend(fontsize=6)
            elif key == "head_spread":  # a single-head model has no spread across heads
                ax.text(0.5, 0.5, "no head spread:\nthis score needs M > 1 heads", ha="center", va="center",
                        transform=ax.transAxes, fontsize=9)
                ax.set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def corruption_curves(rows: list, path: Path) -> None:
    """Accuracy and ECE under corruption against severity, one curve per method (`ComparisonRow`s)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    seen = set()
    for r in rows:
        mean = r.results.corruption_mean
        if r.name in seen or not mean:
            continue
        seen.add(r.name)
        severities = sorted(mean, key=int)
        for ax, key in zip(axes, ("accuracy", "ece")):
            ax.plot([int(s) for s in severities], [getattr(mean[s], key) for s in severities], "o-", label=r.name)
    for ax, key in zip(axes, ("accuracy", "ECE")):
        ax.set(xlabel="severity", title=f"{key} under corruption (mean over types)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_plots(rows: list, arrays: dict[str, dict], out: Path) -> list[Path]:
    """Writes every plot of a comparison (`rows`: its `ComparisonRow`s) to `out`; returns the paths."""
    paths = [out / name for name in ("reliability.png", "metrics_vs_m.png", "sigma_over_training.png",
                                     "ood_scores.png", "corruptions.png")]
    reliability_diagrams(arrays, paths[0])
    metrics_vs_m(rows, paths[1])
    sigma_over_training(arrays, paths[2])
    ood_histograms(arrays, paths[3])
    corruption_curves(rows, paths[4])
    return paths


def certainty_strip(images, scores, path: Path, count: int = 10, title: str = "") -> None:
    """Two rows of images `(N, C, H, W)` in [0, 1]: the `count` with the highest score (most certain, top) and the
    `count` with the lowest (bottom), each captioned with its score."""
    plt = _pyplot()
    order = np.argsort(np.asarray(scores))
    picks = [order[::-1][:count], order[:count]]
    fig, axes = plt.subplots(2, count, figsize=(1.2 * count, 2.9), squeeze=False)
    for row, indices in enumerate(picks):
        for ax, i in zip(axes[row], indices):
            image = np.asarray(images[i]).transpose(1, 2, 0)
            ax.imshow(image.squeeze(-1) if image.shape[-1] == 1 else image, cmap="gray", vmin=0, vmax=1)
            ax.set_title(f"{float(scores[i]):.2f}", fontsize=7)
            ax.axis("off")
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

"""The calibration and OOD metrics as `evaluate` modules on the Hub: `evaluate.load("ORG/insub_calibration")` and
`evaluate.load("ORG/insub_ood")` load them without insub-hf.

Each module is one flat script, bundled from the package's own `evaluate.Metric` class and the plain metric
functions it calls (`insub_hf.bundling`, as the model code beside a checkpoint is), so the numbers are the package's
by construction. A Hub metric is a Space whose script is named after the repo.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..bundling import PACKAGE, Bundler, assemble, grouped_imports, source_file

# Hub name -> the class (in this package) its script holds, and one line of what it measures
METRIC_MODULES = {
    "insub_calibration": ("evaluation.evaluate_metrics.CalibrationMetrics",
                          "accuracy, NLL, ECE (15 equal-width bins), TACE and Brier score of probability rows"),
    "insub_ood": ("evaluation.evaluate_metrics.OODAUROC",
                  "OOD AUROC and FPR95 of a score, its orientation named (higher='in' or 'ood')"),
}


def metric_script(name: str) -> str:
    """The flat script of the Hub metric `name` (`METRIC_MODULES`): its class and what it reaches, nothing else."""
    target = METRIC_MODULES[name][0]
    module, cls = f"{PACKAGE}.{target.rsplit('.', 1)[0]}", target.rsplit(".", 1)[1]
    bundler = Bundler(lambda m: source_file(m).read_text(encoding="utf-8"))
    keep, imports = bundler.closure([(module, cls)])
    body, _, _ = assemble(bundler, [module], keep, name)
    source = (f'"""{name}: {METRIC_MODULES[name][1]}. Bundled by insub-hf from its `{target}` and the metric '
              'functions it calls (documented there)."""\n\nfrom __future__ import annotations\n\n'
              + grouped_imports(imports) + "\n" + body)
    return re.sub(r"\n{4,}", "\n\n\n", source)


def metric_card(name: str, repo_id: str) -> str:
    """The Space's README: its front matter and how to load and call the metric."""
    cls = METRIC_MODULES[name][0].rsplit(".", 1)[1]
    example = ('metric.compute(predictions=[[0.9, 0.1], [0.2, 0.8]], references=[0, 0])' if name == "insub_calibration"
               else 'metric.compute(predictions=[0.9, 0.8, 0.3, 0.1], references=[1, 1, 0, 0], higher="in")')
    return (f"---\ntitle: {name}\nsdk: static\ntags:\n- evaluate\n- metric\n- insub-hf\n---\n\n# {name}\n\n"
            f"{METRIC_MODULES[name][1]} (insub-hf's `{cls}`; needs `evaluate`, `datasets`, `numpy`, "
            f"`torch`, `scikit-learn`, not insub-hf).\n\n```python\nimport evaluate\n\nmetric = evaluate.load(\"{repo_id}\")\n"
            f"print({example})\n```\n")


def write_metric_modules(folder: str | Path, org: str) -> dict[str, Path]:
    """Writes each metric's Space folder (`<name>.py` and README.md) under `folder`; returns repo id -> folder."""
    out = {}
    for name in METRIC_MODULES:
        target = Path(folder) / name
        target.mkdir(parents=True, exist_ok=True)
        (target / f"{name}.py").write_text(metric_script(name), encoding="utf-8")
        (target / "README.md").write_text(metric_card(name, f"{org}/{name}"), encoding="utf-8")
        out[f"{org}/{name}"] = target
    return out

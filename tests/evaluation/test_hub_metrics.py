"""The calibration and OOD metrics as `evaluate` modules: `insub-hf release metrics --hub_org ORG` pushes one Space
per metric to a Hub on 127.0.0.1, and a fresh process without insub-hf loads each with `evaluate.load("ORG/NAME")`
and gets the package's numbers on a hand-checked example."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from insub_hf.evaluation.hub_metrics import METRIC_MODULES, metric_script
from insub_hf.evaluation.metrics import brier_score, expected_calibration_error, fpr_at_tpr, nll, ood_auroc

from ..conftest import cli_error
from ..hub_server import LocalHub

# two probability rows, both labelled 0: accuracy 1/2; NLL (-ln 0.9 - ln 0.2) / 2; in-distribution scores 0.9, 0.8
# above both OOD ones 0.3, 0.1: AUROC 1, FPR95 0
PROBS, LABELS = [[0.9, 0.1], [0.2, 0.8]], [0, 0]
SCORES, IS_IN = [0.9, 0.8, 0.3, 0.1], [1, 1, 0, 0]

LOAD = """
import json, sys
sys.modules["insub_hf"] = None  # a user of the Hub metrics: no insub-hf
import evaluate
calibration = evaluate.load("someone/insub_calibration")
ood = evaluate.load("someone/insub_ood")
print(json.dumps({"calibration": calibration.compute(predictions=%r, references=%r),
                  "ood": ood.compute(predictions=%r, references=%r, higher="in")}))
""" % (PROBS, LABELS, SCORES, IS_IN)


def test_each_metric_script_is_standalone_and_holds_its_one_metric():
    for name in METRIC_MODULES:
        source = metric_script(name)
        assert "insub_hf" not in source.split('"""', 2)[2]  # the docstring names it; the code imports none of it
        compile(source, name, "exec")
        assert source.count("(evaluate.Metric):") == 1


def test_pushed_metric_modules_load_with_evaluate_without_insub_hf_and_give_the_package_s_numbers(
        tmp_path, monkeypatch, capsys):
    from huggingface_hub import HfApi

    from insub_hf_cli import main

    with LocalHub() as hub:
        monkeypatch.setattr("insub_hf.hub.upload.HfApi", lambda token=None: HfApi(endpoint=hub.endpoint, token=token))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        assert main(["release", "metrics", "--hub_org", "someone", "--output_dir", str(tmp_path / "metrics"),
                     "--hub_token", "hf_test"]) == 0
        assert sorted(hub.repos) == ["spaces/someone/insub_calibration", "spaces/someone/insub_ood"]
        env = {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0",
               "HF_MODULES_CACHE": str(tmp_path / "modules")}
        result = subprocess.run([sys.executable, "-c", LOAD], env=env, cwd=tmp_path, capture_output=True, text=True,
                                timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    probs, labels = np.array(PROBS), np.array(LABELS)
    calibration = got["calibration"]
    assert calibration["accuracy"] == 0.5  # hand-worked
    assert calibration["nll"] == pytest.approx((-np.log(0.9) - np.log(0.2)) / 2)
    assert calibration["ece"] == pytest.approx(expected_calibration_error(probs, labels, 15))
    assert calibration["brier"] == pytest.approx(brier_score(probs, labels)) and calibration["nll"] == pytest.approx(
        nll(probs, labels))
    scores, is_in = np.array(SCORES), np.array(IS_IN)
    assert got["ood"] == pytest.approx({"auroc": 1.0, "fpr95": 0.0})
    assert got["ood"]["auroc"] == ood_auroc(scores[is_in == 1], scores[is_in == 0])
    assert got["ood"]["fpr95"] == fpr_at_tpr(scores[is_in == 1], scores[is_in == 0])


def test_the_metrics_command_refuses_an_org_with_a_slash(capsys, tmp_path):
    line = cli_error(["release", "metrics", "--hub_org", "a/b", "--output_dir", str(tmp_path / "m")], capsys)
    assert "MetricsArguments.hub_org must name one Hub user or organisation, got 'a/b'" in line

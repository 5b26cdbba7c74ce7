import json

import pytest

from insub_hf import InSubConfig
from insub_hf.jobs.mechanism import TRAINING_DEFAULTS, MechanismArguments, run_mechanism, summarize, verdict
from insub_hf.jobs.arguments import training_arguments
from insub_hf.recipes import DNA


def test_summary_and_verdict_worked_by_hand():
    free = summarize([(1, 0.08), (2, 0.05), (3, 0.03)], alpha=0.04, weight=0.0, hinge_active=0.5)
    hinge = summarize([(1, 0.08), (2, 0.04), (3, 0.045)], alpha=0.04, weight=1.0, hinge_active=0.3)
    assert (free["first_sigma"], free["min_sigma"], free["final_sigma"]) == (0.08, 0.03, 0.03)
    v = verdict({"lambda 0": free, "hinge": hinge})
    # 0.03 < 0.5 * 0.08 (pulled together), 0.03 < alpha 0.04 (work for the hinge), 0.045 / 0.03 = 1.5
    assert v["pulls_together"] and v["hinge_has_work"] and v["hinge_keeps"] == pytest.approx(1.5)
    idle = summarize([(1, 0.08), (2, 0.07)], alpha=0.04, weight=0.0, hinge_active=0.0)
    v = verdict({"raw mean, lambda 0": idle, "raw mean, hinge": hinge}, "raw mean, ")
    assert not v["pulls_together"] and not v["hinge_has_work"]


def test_the_job_trains_lambda_0_and_the_hinge_and_reports_their_logged_spreads(tmp_path):
    args = MechanismArguments(objectives=["genomenet"], num_heads=3)
    training = training_arguments(TRAINING_DEFAULTS, output_dir=str(tmp_path), max_steps=3, logging_steps=1)
    results = run_mechanism(args, training)["genomenet"]
    assert set(results["runs"]) == {"lambda 0", "hinge"}
    for name, run in results["runs"].items():
        folder = tmp_path / run["run"]
        config = InSubConfig.from_pretrained(folder / "model")
        state = json.loads((folder / "checkpoint-3" / "trainer_state.json").read_text())
        assert state["train_batch_size"] == DNA.training["per_device_train_batch_size"]  # the DNA recipe's batch
        assert config.diversity_weight == run["weight"] == (0.0 if name == "lambda 0" else 1.5)
        logs = [json.loads(line) for line in (folder / "train_log.jsonl").read_text().splitlines()]
        logs = [entry for entry in logs if "mean_sigma" in entry]
        assert [entry["step"] for entry in logs] == [1, 2, 3]
        assert run["final_sigma"] == logs[-1]["mean_sigma"] and run["first_sigma"] == logs[0]["mean_sigma"]
        if name == "lambda 0":  # the hinge is computed but does not enter the loss
            assert logs[-1]["loss"] == pytest.approx(logs[-1]["ssl_loss"], rel=1e-5)
        else:
            assert logs[-1]["loss"] == pytest.approx(logs[-1]["ssl_loss"] + 1.5 * logs[-1]["diversity_loss"], rel=1e-5)
    saved = json.loads((tmp_path / "mechanism.json").read_text())["results"]["genomenet"]
    assert saved["verdicts"][""] == verdict(results["runs"])
    for run in saved["runs"].values():  # the collapse monitor's RankMe over training, beside sigma
        assert [step for step, _ in run["rankme_over_training"]] == [1, 2, 3]
        assert all(1 <= value <= 64 for _, value in run["rankme_over_training"])
    assert (tmp_path / "mechanism.png").stat().st_size > 0

    with pytest.raises(FileExistsError, match="overwrite_output_dir"):  # a finished table is not replaced silently
        run_mechanism(args, training)
    weights = {name: (tmp_path / run["run"] / "model" / "model.safetensors").stat().st_mtime_ns
               for name, run in results["runs"].items()}
    again = run_mechanism(MechanismArguments(**{**vars(args), "overwrite_output_dir": True}), training)["genomenet"]
    assert again["runs"] == results["runs"]  # finished runs are loaded, not retrained
    assert weights == {name: (tmp_path / run["run"] / "model" / "model.safetensors").stat().st_mtime_ns
                       for name, run in results["runs"].items()}

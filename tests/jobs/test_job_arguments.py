"""Every job refuses a bad argument before any work, naming the field, and never overwrites a finished run."""

import dataclasses
import hashlib
import importlib
import os
import re
import typing
from pathlib import Path

import pytest

import insub_hf_cli as cli
from insub_hf.evaluation.harness import HarnessArguments
from insub_hf.evaluation.probes import ProbeArguments
from insub_hf.training.trainer import InSubTrainingArguments
from insub_hf.validation import field_rule

from ..conftest import cli_error

NUMERIC = (int, float)


def argument_groups():
    """The jobs' own argument groups (`InSubTrainingArguments` checks its fields in its __post_init__)."""
    groups = {ProbeArguments, HarnessArguments}
    for module, _ in cli.COMMANDS.values():
        groups.update(importlib.import_module(f"insub_hf.{module}").ARGUMENT_GROUPS)
    groups.discard(InSubTrainingArguments)
    return sorted(groups, key=lambda g: g.__name__)


def _is_numeric(annotation) -> bool:
    if annotation in NUMERIC:
        return True
    return any(_is_numeric(a) for a in typing.get_args(annotation) if a is not type(None))


@pytest.mark.parametrize("group", argument_groups(), ids=lambda g: g.__name__)
def test_every_numeric_field_of_every_job_argument_group_is_checked(group):
    hints = typing.get_type_hints(group)
    unchecked = [
        f.name for f in dataclasses.fields(group) if _is_numeric(hints[f.name]) and field_rule(f) is None
    ]
    assert not unchecked, f"{group.__name__}: numeric fields without a check: {unchecked}"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["demo", "--num_train_epochs", "-1"], "InSubTrainingArguments.num_train_epochs must be a number > 0, got -1"),
        (["text", "--learning_rate", "-0.1"], "InSubTrainingArguments.learning_rate must be a number >= 0, got -0.1"),
        (["demo", "--num_heads", "0"], "DemoArguments.num_heads must be an integer >= 2, got 0"),
        (["demo", "--per_device_train_batch_size", "0"],
         "InSubTrainingArguments.per_device_train_batch_size must be an integer >= 1, got 0"),
        (["compare", "--num_heads", "3", "--per_device_train_batch_size", "32"],
         "InSubTrainingArguments.per_device_train_batch_size=32 must be a multiple of every ComparisonArguments.num_heads"),
        (["demo", "--data_source", "web"], "argument --data_source/--data-source: invalid choice: 'web' (choose from"),
        (["compare", "--seeds", "0", "-3"], "ComparisonArguments.seeds must be an integer >= 0, got -3"),
        (["compare", "--probe_epochs", "0"], "ProbeArguments.probe_epochs must be an integer >= 1, got 0"),
        (["compare", "--corruptions", "fog", "smog"], "argument --corruptions: invalid choice: 'smog' (choose from"),
        (["ablation", "--alphas", "0.1", "0"], "AblationArguments.alphas must be a number > 0.0, got 0.0"),
        (["genomics", "--test_fraction", "1.5"], "GenomicsArguments.test_fraction must be a number > 0 and < 1"),
        (["text", "--folds", "1"], "TextArguments.folds must be an integer >= 2, got 1"),
        (["text", "--max_sentences", "0"], "TextArguments.max_sentences must be an integer >= 1, got 0"),
        # a repeated seed or setting would count one run twice in a table
        (["compare", "--seeds", "0", "0"], "ComparisonArguments.seeds lists 0 more than once, got [0, 0]"),
        (["ablation", "--seeds", "1", "2", "1"], "AblationArguments.seeds lists 1 more than once"),
        (["ablation", "--alphas", "0.02", "0.02"], "AblationArguments.alphas lists 0.02 more than once"),
        (["compare", "--methods", "insub", "baseline", "insub"], "ComparisonArguments.methods lists 'insub' more"),
    ],
)
def test_a_bad_argument_is_refused_before_any_work_naming_the_field(tmp_path, argv, message, capsys):
    out = tmp_path / "out"
    assert message in cli_error([*argv, "--output_dir", str(out)], capsys)
    assert not out.exists()  # nothing was written


def snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


@pytest.mark.parametrize("job", ["demo", "compare", "ablation", "genomics", "text"])
def test_a_finished_run_is_never_overwritten_without_overwrite_output_dir(tmp_path, job, capsys):
    out = tmp_path / "run"
    (out / "baseline" / "model").mkdir(parents=True)
    (out / "baseline" / "model" / "config.json").write_text('{"model_type": "insub"}')
    (out / "baseline" / "model" / "model.safetensors").write_bytes(b"trained weights")
    (out / ("ablation.json" if job == "ablation" else "results.json")).write_text('{"runs": []}')
    before = snapshot(out)
    error = cli_error([job, "--output_dir", str(out)], capsys)
    assert f"output_dir={str(out)!r} holds a finished run" in error and "--overwrite_output_dir" in error
    assert snapshot(out) == before


def test_an_output_dir_that_is_a_file_is_refused(tmp_path, capsys):
    target = tmp_path / "results"
    target.write_text("keep me")
    assert f"output_dir={str(target)!r} is a file" in cli_error(["demo", "--output_dir", str(target)], capsys)
    assert target.read_text() == "keep me"


@pytest.fixture
def unwritable(tmp_path):
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    if os.access(folder, os.W_OK):  # root writes anywhere a mode allows nothing: use a read-only file system
        if not os.path.isdir("/sys"):
            pytest.skip("running as root without a read-only /sys to write into")
        folder = Path("/sys/insub-hf-test-run")
    yield folder
    (tmp_path / "read-only").chmod(0o700)


@pytest.mark.parametrize("job", ["demo", "compare", "ablation", "mechanism", "genomics", "text"])
def test_an_output_dir_that_cannot_be_written_is_refused_before_the_data_are_read(unwritable, job, capsys):
    # the missing data files would be the error if the data were read first
    data = {"demo": ["--data_source", "debian"], "text": ["--corpus", "/no/such.txt"]}.get(job, [])
    error = cli_error([job, "--output_dir", str(unwritable), *data], capsys)
    assert re.search(f"output_dir={str(unwritable)!r} cannot be written .*Nothing was run", error)


def test_resume_refuses_other_settings_naming_them_and_changes_nothing(tmp_path):
    from insub_hf.jobs.arguments import training_arguments
    from insub_hf.jobs.experiment import Experiment
    from insub_hf.recipes import IMAGE

    defaults = IMAGE.training_arguments(output_dir=str(tmp_path))
    started = {"temperature": 0.2}
    Experiment("demo", training_arguments(defaults), started, defaults)
    (tmp_path / "baseline").mkdir()
    (tmp_path / "baseline" / "checkpoint-5").mkdir()  # a run under way
    before = snapshot(tmp_path)
    with pytest.raises(ValueError) as error:
        Experiment("demo", training_arguments(defaults, seed=1, lr_scheduler_type="linear", resume_from_checkpoint="true"),
                   {**started, "temperature": 0.5}, defaults)
    message = str(error.value)
    assert "holds a run started with other settings (lr_scheduler_type: None -> 'linear'; seed: 0 -> 1; " \
           "temperature: 0.2 -> 0.5)" in message
    assert snapshot(tmp_path) == before
    # what does not change the run (resuming itself, loader workers, logging) may differ
    Experiment("demo", training_arguments(defaults, dataloader_num_workers=2, logging_steps=50, resume_from_checkpoint="last"),
               started, defaults)
    # a job trains several runs: one checkpoint folder is not a value it takes
    with pytest.raises(ValueError, match=r"resume_from_checkpoint='.*checkpoint-5': a job continues each of its runs"):
        Experiment("demo", training_arguments(defaults, resume_from_checkpoint=str(tmp_path / "baseline" / "checkpoint-5")),
                   started, defaults)


@pytest.mark.parametrize("objective, command", [("scd", "insub-hf text"), ("genomenet", "insub-hf genomics")])
def test_the_demo_refuses_another_modality_and_names_its_command(objective, command):
    from insub_hf.jobs.demo import DemoArguments

    with pytest.raises(ValueError, match=rf"DemoArguments.objective='{objective}' trains on .*Run `{command}` instead"):
        DemoArguments(objective=objective)
    assert DemoArguments(objective="byol").objective == "byol"


def test_a_jobs_seeds_default_to_the_trainers_seed():
    from insub_hf.jobs.arguments import job_seeds, training_arguments
    from insub_hf.jobs.compare import ComparisonArguments
    from insub_hf.recipes import IMAGE

    args = training_arguments(IMAGE.training_arguments(output_dir="unused"), seed=7)
    assert ComparisonArguments().seeds is None  # so --seed is what a comparison reads when --seeds is not given
    assert job_seeds(None, args) == [7] and job_seeds(None, args, count=2) == [7, 8]
    assert job_seeds([0, 3], args) == [0, 3]

import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from transformers import AutoImageProcessor

from insub_hf import InSubForPreTraining, InSubModel
from insub_hf_cli import COMMANDS, main


def test_help_and_unknown_command(capsys):
    assert main(["--help"]) == 0
    listed = capsys.readouterr().out
    assert all(f"  {command} " in listed for command in COMMANDS)
    assert main(["train-everything"]) == 2
    assert "unknown command 'train-everything'; the commands are demo, compare" in capsys.readouterr().err


TRAINER_FLAGS = ("--learning_rate", "--lr_scheduler_type", "--warmup_steps", "--gradient_accumulation_steps",
                 "--report_to", "--push_to_hub", "--hub_model_id", "--bf16", "--torch_compile", "--seed")


@pytest.mark.parametrize("command", ["demo", "compare", "ablation", "mechanism", "text", "genomics"])
def test_every_pretraining_job_lists_the_trainers_own_flags_at_its_recipes_defaults(command, capsys):
    import importlib

    from insub_hf.cli import job_parser
    from insub_hf.jobs.arguments import training_arguments
    from insub_hf.training.trainer import InSubTrainingArguments

    with pytest.raises(SystemExit) as exit:
        main([command, "--help"])
    assert exit.value.code == 0
    printed = capsys.readouterr().out
    assert all(flag in printed for flag in TRAINER_FLAGS), [f for f in TRAINER_FLAGS if f not in printed]
    job = importlib.import_module(f"insub_hf.jobs.{command}")
    parsed = job_parser(command, job.ARGUMENT_GROUPS, job.TRAINING_DEFAULTS).parse_args_into_dataclasses(args=[])
    [training] = [group for group in parsed if isinstance(group, InSubTrainingArguments)]
    assert training.to_dict() == training_arguments(job.TRAINING_DEFAULTS).to_dict()  # the command line's = Python's
    assert f"(default: {job.TRAINING_DEFAULTS['learning_rate']})" in " ".join(printed.split())


def test_the_command_list_loads_neither_torch_nor_transformers():
    code = "import sys, insub_hf_cli; insub_hf_cli.main(['--help']); print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    listed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "mechanism" in listed and listed.strip().endswith("[]")


@pytest.mark.slow
def test_demo_end_to_end_on_a_tiny_budget(tmp_path, capsys):
    out = tmp_path / "demo"
    code = main([
        "demo", "--output_dir", str(out), "--data_source", "bundled", "--train_per_class", "8",
        "--test_per_class", "4", "--num_train_epochs", "2", "--per_device_train_batch_size", "16", "--width", "0.0625", "--ood_images", "20",
        "--head_hidden_size", "32", "--num_heads", "3", "--knn_k", "3", "--lr_scheduler_type", "constant",
        "--calibration_fraction", "0.25",  # 20 held-out images: the fewest a calibrated uncertainty takes
    ])
    assert code == 0
    printed = capsys.readouterr().out
    # the Trainer's own flag reached both runs (the recipe's is cosine) and is recorded with the results
    logged = [json.loads(line) for line in (out / "insub_m3" / "train_log.jsonl").read_text().splitlines()]
    assert [entry["learning_rate"] for entry in logged if "learning_rate" in entry] == [3e-3, 3e-3]
    assert json.loads((out / "run_arguments.json").read_text())["lr_scheduler_type"] == "constant"
    assert "[baseline] epoch 2 | ssl" in printed and "[insub_m3] epoch 2 | ssl" in printed and "k-NN acc" in printed
    assert "'loss'" not in printed  # the Trainer's log dicts go to the run's log file
    assert '"ssl_loss"' in (out / "baseline" / "train_log.jsonl").read_text()
    assert '"rankme"' in (out / "insub_m3" / "train_log.jsonl").read_text()  # the collapse monitor, in the log
    assert "probe acc" in printed and "mnist MSP / k-NN / spread" in printed and "gaussian MSP / k-NN / spread" in printed
    # one vocabulary: every score reads higher = more likely OOD, the spread's own direction said in words
    assert "insub_m3: every score above reads higher = more likely OOD; its `spread` columns read" in printed
    assert "baseline: every score" not in printed and "= OOD (" not in printed
    for picture in ("reliability", "uncertainty", "certainty_strip"):
        assert (out / f"{picture}.png").read_bytes()[:4] == b"\x89PNG"
    results = json.loads((out / "results.json").read_text())
    baseline, insub = results["runs"]
    assert set(insub["ood"]) == {"mnist", "uniform", "gaussian"} and 0 <= insub["test"]["accuracy"] <= 1
    # calibration after temperature scaling, selective prediction, retrieval, the crop test and FPR95, per model
    assert "ECE -> (T)" in printed and "R-AUROC k-NN / spread" in printed and "mnist FPR95 k-NN / spread" in printed
    assert insub["test"]["temperature"] > 0 and insub["selective"]["aurc"] >= insub["selective"]["augrc"]
    assert {"knn", "head_spread"} <= set(insub["crop"]) and set(insub["ood_fpr95"]) == set(insub["ood"])
    knn = baseline["ood"]["mnist"]["knn"]
    assert 0 <= knn <= 1 and f"{100 * knn:5.1f}" in printed  # the label-free AUROC the table prints
    spread = insub["ood"]["mnist"]["head_spread"]
    assert f"/ {100 * spread:5.1f}" in printed and "head_spread" not in baseline["ood"]["mnist"]
    calibration = insub["head_spread_calibration"][0]  # the printed AUROC is the chosen reading's, never below chance
    chosen = calibration["validation_auroc"] if calibration["direction"] == 1 else 1 - calibration["validation_auroc"]
    assert chosen >= 0.5 and f"that reading has AUROC {100 * chosen:.1f}%" in printed
    assert len(baseline["history"]) == len(insub["history"]) == 2
    assert baseline["history"][-1]["mean_sigma"] == 0.0 and baseline["history"][-1]["diversity_loss"] == 0.0
    assert insub["history"][-1]["mean_sigma"] > 0.0
    assert all(0.0 <= row["knn_accuracy"] <= 1.0 for row in baseline["history"] + insub["history"])
    model = InSubForPreTraining.from_pretrained(out / "insub_m3" / "model")
    assert model.config.num_heads == 3
    assert InSubForPreTraining.from_pretrained(out / "baseline" / "model").config.num_heads == 1
    assert torch.isfinite(model(torch.randn(2, 1, 28, 28), torch.randn(2, 1, 28, 28)).loss)
    assert any((out / "baseline").glob("checkpoint-*/model.safetensors"))  # resumable Trainer checkpoint
    # the checkpoints carry their image processor: the pipeline embeds an image file in a fresh process
    assert any((out / "baseline").glob("checkpoint-*/preprocessor_config.json"))
    from insub_hf.data import load_fashion_mnist

    image = load_fashion_mnist("bundled", test_per_class=1)["test"][0]["image"]
    image.save(tmp_path / "image.png")
    code = (f"import json, insub_hf; from transformers import pipeline; "
            f"print(json.dumps(pipeline('image-feature-extraction', model={str(out / 'insub_m3' / 'model')!r}, "
            f"trust_remote_code=True)"
            f"({str(tmp_path / 'image.png')!r})))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    features = torch.tensor(json.loads(run.stdout.strip().splitlines()[-1]))[0]
    processor = AutoImageProcessor.from_pretrained(out / "insub_m3" / "model")
    with torch.no_grad():
        fresh = InSubModel.from_pretrained(out / "insub_m3" / "model").eval()
        expected = fresh.get_representation(**processor(image, return_tensors="pt"))[0]
    torch.testing.assert_close(features, expected, rtol=1e-4, atol=1e-5)

    # the saved model's uncertainty was fitted by the demo (its bank, the spread's direction where it held against
    # shuffled images, the calibration scores of the held-out training images); its Hub folder loaded without
    # insub-hf tells test images from uniform noise (higher = OOD), and its card says what the number is
    block = fresh.config.uncertainty
    assert block["reading"] == "calibrated" and block["calibration_size"][1] == 20 and block["bank_size"] == 60
    assert insub["fitted_uncertainty"] == block and 0 <= insub["flag_rate"] <= 1
    assert "uncertainty" in insub["ood"]["uniform"] and "calibrated" in printed
    folder = tmp_path / "hub_folder"
    assert main(["hub", "--model_dir", str(out / "insub_m3" / "model"), "--results", str(out / "results.json"),
                 "--row", "insub_m3", "--repo_id", "someone/insub-demo", "--folder", str(folder)]) == 0
    card = (folder / "README.md").read_text()
    assert "uncertainty = out.uncertainty   # (B,): in [0, 1]: the share of held-out in-distribution inputs" in card
    assert "**calibrated, in [0, 1]**" in card and "the 20 calibration inputs" in card
    # what the run trained on and measured, from its own results.json
    assert "datasets:\n- zalando-datasets/fashion_mnist" in card and "training images of fashion_mnist: the bundled" in card
    assert "| Fashion-MNIST | test (40 images) | Accuracy |" in card and "- lr_scheduler_type: constant" in card
    images = load_fashion_mnist("bundled", test_per_class=10)["test"]["image"]
    for i, test_image in enumerate(images):
        test_image.save(tmp_path / f"test_{i}.png")
    run = subprocess.run([sys.executable, "-c", FRESH_UNCERTAINTY, str(folder), str(tmp_path), str(len(images))],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.strip().splitlines()[-1])["auroc"] > 0.5


FRESH_UNCERTAINTY = """
import json, sys
sys.modules["insub_hf"] = None  # the Hub folder alone: torch, transformers, safetensors, pillow
import numpy as np, torch
from PIL import Image
from transformers import AutoImageProcessor, AutoModel
folder, images, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
processor = AutoImageProcessor.from_pretrained(folder, trust_remote_code=True)
test = [Image.open(f"{images}/test_{i}.png") for i in range(count)]
rng = np.random.default_rng(0)
noise = [Image.fromarray(rng.integers(0, 256, (28, 28), dtype=np.uint8)) for _ in range(count)]
with torch.no_grad():
    seen = model(**processor(test, return_tensors="pt")).uncertainty
    unseen = model(**processor(noise, return_tensors="pt")).uncertainty
# AUROC of "higher uncertainty = OOD": the share of (noise, test) pairs ranked that way, ties counting half
auroc = ((unseen[:, None] > seen[None]).double() + 0.5 * (unseen[:, None] == seen[None]).double()).mean()
print(json.dumps({"auroc": float(auroc)}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["byol", "vicreg", "barlow_twins", "dino"])
def test_the_demo_runs_each_new_objective(tmp_path, capsys, objective):
    out = tmp_path / objective
    code = main([
        "demo", "--objective", objective, "--output_dir", str(out), "--data_source", "bundled", "--train_per_class",
        "4", "--test_per_class", "2", "--num_train_epochs", "1", "--per_device_train_batch_size", "16", "--width", "0.0625", "--ood_images",
        "10", "--head_hidden_size", "16", "--num_heads", "2", "--knn_k", "3", "--calibration_fraction", "0.5",
    ])
    assert code == 0
    printed = capsys.readouterr().out
    assert f"[{objective}_insub_m2] epoch 1 | ssl" in printed and "probe acc" in printed
    model = InSubForPreTraining.from_pretrained(out / f"{objective}_insub_m2" / "model")
    assert model.config.objective == objective and model.config.objective_config == \
        type(model.config.objective_options)().to_dict()  # the objective's defaults


@pytest.mark.slow
def test_ablation_scores_on_validation_data_only_and_reuses_the_comparison_cache(tmp_path, capsys, monkeypatch):
    from insub_hf.evaluation import MethodEvaluator

    from ..conftest import compare_argv

    cache = tmp_path / "compare"
    argv = compare_argv(cache, train_per_class=10, test_per_class=4, ood_images=10, probe_epochs=2, logging_steps=1,
                        methods="baseline", num_heads=3, per_device_train_batch_size=30)
    assert main(argv) == 0
    baseline_runs = sorted((cache / "cache").iterdir())
    out = tmp_path / "ablation"
    # the protocol's flags (the methods and their M are the comparison's own)
    shared = [flag for i, flag in enumerate(argv[1:], 1) if flag not in ("--methods", "--num_heads")
              and argv[i - 1] not in ("--methods", "--num_heads")]
    ablation = ["ablation", *shared, "--output_dir", str(out), "--cache_dir", str(cache), "--alphas", "0.05", "0.5",
                "--weights", "0.5", "2", "--ablation_heads", "3", "5"]
    assert main(ablation) == 0
    results = json.loads((out / "ablation.json").read_text())
    settings = [(row["alpha"], row["weight"], row["num_heads"]) for row in results["rows"]]
    best = results["best"]
    grid = [(a, w, 5) for a in (0.05, 0.5) for w in (0.5, 2.0)]
    assert settings[:5] == [(None, None, 1), *grid]
    assert settings[5:] == [(best["alpha"], best["weight"], 3)]
    # the rule, worked by hand from the validation rows: within 0.5 points of the baseline, the lowest NLL
    val = {(r["alpha"], r["weight"], r["num_heads"]): r["validation"] for r in results["rows"]}
    close = [s for s in grid if val[s]["accuracy"] >= val[(None, None, 1)]["accuracy"] - 0.005]
    chosen = min(close, key=lambda s: val[s]["nll"]) if close else max(grid, key=lambda s: val[s]["accuracy"])
    assert (best["alpha"], best["weight"]) == chosen[:2]
    assert "within 0.5 points of the baseline" in results["selection_rule"]
    # validation = 10% of the 100 training images; the test images are never scored
    assert all(row["validation"] for row in results["rows"]) and "test" not in results["rows"][0]
    active = {row["alpha"]: row["hinge_active_mean"] for row in results["rows"] if row["num_heads"] == 5}
    assert active[0.05] < active[0.5] == 1.0  # alpha 0.5 is above any spread these heads reach
    # the baseline run of the comparison was reused (same config, seed and data), not trained again
    assert baseline_runs[0] in sorted((cache / "cache").iterdir())
    assert len(list((cache / "cache").iterdir())) == 1 + 4 + 1
    table = (out / "ablation.md").read_text()
    assert table.startswith("Selection rule:") and "| 0.5 | 2 | 5 |" in table or "| 0.5 (chosen) | 2 | 5 |" in table
    assert (out / "ablation_training.png").read_bytes()[:4] == b"\x89PNG"
    # a re-run (e.g. after an interruption) takes every validation score from the evaluation cache
    assert len(list((cache / "evaluation_cache").iterdir())) == 1 + 6  # compare's test evaluation, 6 validations

    def evaluated_again(self):
        raise AssertionError("a cached evaluation was computed again")

    monkeypatch.setattr(MethodEvaluator, "run", evaluated_again)
    assert main([*ablation, "--overwrite_output_dir"]) == 0
    assert json.loads((out / "ablation.json").read_text())["rows"] == results["rows"]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_of_every_command_prints_its_arguments(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    printed = capsys.readouterr().out
    # argparse wraps long help lines, also inside "(default: ...)"
    assert printed.startswith(f"usage: insub-hf {command}") and "(default: " in " ".join(printed.split())


def test_a_help_once_printed_is_printed_again_without_torch_or_transformers(tmp_path):
    import os
    import subprocess
    import sys

    code = """
import json, sys
import insub_hf_cli
try:
    insub_hf_cli.main(sys.argv[1:])
except SystemExit as exit_:
    assert exit_.code == 0
print(json.dumps(sorted(m for m in ("torch", "transformers", "insub_hf") if m in sys.modules)), file=sys.stderr)
"""
    env = {**os.environ, "INSUB_HF_CACHE": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", code, "release", "text", "--help"], capture_output=True, text=True,
                           env=env) for _ in range(2)]
    assert all(run.returncode == 0 for run in runs), runs[0].stderr[-2000:]
    first, again = runs
    assert first.stdout.startswith("usage: insub-hf release text") and "--uncertainty" in first.stdout
    assert again.stdout == first.stdout
    assert json.loads(first.stderr.strip().splitlines()[-1]) == ["insub_hf", "torch", "transformers"]
    assert json.loads(again.stderr.strip().splitlines()[-1]) == []  # the kept text: no torch, nothing imported
    assert len(list((tmp_path / "help").iterdir())) == 1


def test_a_literal_percent_in_a_help_text_is_printed_as_written(capsys):
    from dataclasses import dataclass, field

    from insub_hf.cli import job_parser

    @dataclass
    class Budget:
        epochs: int = field(default=3, metadata={"help": "every baseline probe over 85% after %(default)s."})

    job_parser("compare", (Budget,)).print_help()
    # a literal % is escaped for argparse; its own %(default)s is still filled in
    assert "every baseline probe over 85% after 3." in " ".join(capsys.readouterr().out.split())



@pytest.mark.parametrize("script", sorted(p.name for p in (Path(__file__).parents[2] / "examples").glob("*.py")))
def test_every_example_script_prints_its_help(script, capsys, monkeypatch):
    path = Path(__file__).parents[2] / "examples" / script
    monkeypatch.setattr(sys, "argv", [str(path), "--help"])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(path), run_name="__main__")
    assert done.value.code == 0
    assert "--output_dir" in capsys.readouterr().out


@pytest.mark.slow
def test_genomics_end_to_end_on_a_tiny_budget(tmp_path, capsys):
    rng = __import__("random").Random(0)
    fasta = tmp_path / "upstream.fasta"
    fasta.write_text("".join(f">s{i}\n{''.join(rng.choice('ACGT') for _ in range(120))}\n" for i in range(40)))
    labelled = tmp_path / "labelled.csv"
    labelled.write_text("sequence,label\n" + "".join(
        f"{''.join(rng.choice('ACGT') for _ in range(60))},{i % 2}\n" for i in range(40)))
    out = tmp_path / "genomics"
    assert main([
        "genomics", "--output_dir", str(out), "--pretrain_fasta", str(fasta), "--labelled", str(labelled),
        "--crop_length", "60", "--num_train_epochs", "1", "--per_device_train_batch_size", "16", "--num_heads", "2", "--conv_filters", "8",
        "--lstm_hidden_size", "8", "--head_output_size", "8", "--finetune_epochs", "1",
    ]) == 0
    results = json.loads((out / "results.json").read_text())["results"]
    printed = capsys.readouterr().out
    for name in ("baseline", "insub_m2"):
        for protocol in ("linear_probe", "finetune"):
            numbers = results[name][protocol]
            assert 0 <= numbers["accuracy"] <= 1 and numbers["nll"] > 0
            assert f"{100 * numbers['accuracy']:8.2f}" in printed


def test_version_prints_the_package_version_without_loading_torch():
    from insub_hf.version import __version__

    code = ("import sys, insub_hf_cli; status = insub_hf_cli.main(['--version']); "
            "print(status, sorted({'torch', 'transformers'} & set(sys.modules)))")
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert printed.splitlines() == [f"insub-hf {__version__}", "0 []"]


def test_an_abbreviated_or_unknown_flag_is_refused_in_one_line_with_status_2(capsys):
    for argv, unknown in ((["demo", "--num_head", "3"], "--num_head 3"), (["compare", "--colour", "red"], "--colour red")):
        with pytest.raises(SystemExit) as exit_:
            main(argv)  # argparse abbreviations would have taken --num_head as --num_heads
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert f"insub-hf {argv[0]}: error: unrecognized arguments: {unknown}" in err and "Traceback" not in err


def test_paths_are_checked_first_in_one_line(tmp_path, capsys):
    from ..conftest import cli_error, tiny_config

    assert f"--model_dir {str(tmp_path / 'nope')!r}: no such folder." in cli_error(
        ["hub", "--model_dir", str(tmp_path / "nope")], capsys)
    run = tmp_path / "run"  # a run folder given for its model folder
    InSubModel(tiny_config()).save_pretrained(run / "insub_m3" / "model")
    error = cli_error(["hub", "--model_dir", str(run)], capsys)
    assert f"--model_dir {str(run)!r} holds no config.json; did you mean {str(run / 'insub_m3' / 'model')!r}?" in error
    (tmp_path / "weights.bin").write_bytes(b"")
    assert "is a file; give a folder" in cli_error(["hub", "--model_dir", str(tmp_path / "weights.bin")], capsys)
    assert f"--pretrain_fasta {str(tmp_path / 'x.fa')!r}: no such file." in cli_error(
        ["genomics", "--pretrain_fasta", str(tmp_path / "x.fa"), "--output_dir", str(tmp_path / "g")], capsys)
    assert not (tmp_path / "g").exists()
    assert "the following arguments are required: --model_dir" in cli_error(["hub"], capsys)


def test_help_reads_like_the_hugging_face_tools(capsys):
    with pytest.raises(SystemExit):
        main(["hub", "--help"])
    printed = capsys.readouterr().out
    assert printed.startswith("usage: insub-hf hub [options]\n\nA saved model and its evaluation results")  # described
    assert "\nmodel and results:\n" in printed and "\nhub:\n" in printed  # argument groups
    assert "Required. A saved InSub model" in " ".join(printed.split())
    assert "(default: None)" not in printed
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    printed = " ".join(capsys.readouterr().out.split())
    for group in ("model and data:", "training (transformers' TrainingArguments;", "evaluation:"):
        assert group in printed
    assert "--data_source {auto,bundled,debian}" in printed  # a closed set is argparse's choices
    # one boolean style: an optional boolean (bf16: None = automatic) reads as every other one does
    assert "--bf16 [{true,false}]" in printed and "--batch_views [{true,false}]" in printed
    assert "--bf16 BF16" not in printed


def test_a_boolean_flag_alone_is_true_and_takes_false():
    from insub_hf.cli import job_parser
    from insub_hf.jobs import demo

    parser = job_parser("demo", demo.ARGUMENT_GROUPS, demo.TRAINING_DEFAULTS)
    for argv, expected in (([], None), (["--bf16"], True), (["--bf16", "false"], False)):
        _, training = parser.parse_args_into_dataclasses(args=argv)
        assert training.bf16 is expected or (expected is None and training.bf16 in (True, False))


def test_every_install_hint_names_a_real_extra():
    import configparser
    import re
    from pathlib import Path

    import insub_hf

    setup = configparser.ConfigParser()
    setup.read(Path(insub_hf.__file__).parents[1] / "setup.cfg")
    extras = set(setup["options.extras_require"])
    hints = [(path, extra) for path in Path(insub_hf.__file__).parent.rglob("*.py")
             for extra in re.findall(r'insub-hf\[(\w+)\]', path.read_text())]
    assert hints and {extra for _, extra in hints} <= extras, [h for h in hints if h[1] not in extras]
    assert not [path for path in Path(insub_hf.__file__).parent.rglob("*.py") if 'pip install -e' in path.read_text()]

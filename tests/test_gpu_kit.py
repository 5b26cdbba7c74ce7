"""The GPU kit (benchmarks/gpu_prepare.py, gpu_run.py, gpu_race.py) runs whole on the CPU at a tiny size: every stage
writes its table with its columns, the comparison scores both models, and the release comes back as a checked Hub
folder; the prepare script's size check counts what travels and refuses what is over."""

from __future__ import annotations

import json
import re
import subprocess
import time
import sys
from argparse import Namespace
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import gpu_prepare  # noqa: E402
import gpu_race  # noqa: E402
import gpu_run  # noqa: E402


@pytest.mark.slow
def test_the_kit_runs_every_stage_at_a_tiny_size(tmp_path):
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "gpu_run.py"), "--out", str(out), "--tiny", "--kit", str(tmp_path / "none"),
         "--work", str(tmp_path / "work"), "--site", str(tmp_path / "site"), "--deadline_minutes", "4.5"],
        capture_output=True, text=True, timeout=290,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    kit = json.loads((out / "kit.json").read_text())
    assert {k: v["status"] for k, v in kit["stages"].items()} == {"speed": "ok", "release": "ok"}
    assert kit["environment"]["device"] == "cpu" and kit["environment"]["insub_hf"]

    rows = {row["row"]: row for row in kit["speed_rows"]}
    assert list(rows) == ["insub-hf M=5", "lightly SimCLR", "insub-hf M=10", "insub-hf M=1", "insub-hf M=5 epoch"]
    for name, row in rows.items():
        assert list(row) == list(gpu_race.COLUMNS)
        assert row["status"] == "ok", (name, row["status"])
        assert row["e2e_samples_s"] > 0 and row["step_tflop"] > 0
        assert row["epoch_s"] == pytest.approx(64 / row["e2e_samples_s"])
    assert rows["insub-hf M=5 epoch"]["measured_epoch_s"] > 0
    # the heads add FLOPs, M=1 and lightly's SimCLR (one head of the same shape) count the same
    assert rows["insub-hf M=1"]["step_tflop"] < rows["insub-hf M=5"]["step_tflop"] < rows["insub-hf M=10"]["step_tflop"]
    assert rows["lightly SimCLR"]["step_tflop"] == pytest.approx(rows["insub-hf M=1"]["step_tflop"], rel=0.02)

    methods = {row["method"]: row for row in kit["comparison"]["rows"]}
    assert set(methods) == {"baseline", "insub"} and methods["insub"]["num_heads"] == 5
    for row in methods.values():
        assert {"accuracy", "ece", "nll", "ece_scaled", "nll_scaled", "temperature"} <= set(row["test"])
        assert {"uniform", "gaussian", "mnist"} <= set(row["ood"]) and "knn" in row["ood_fpr95"]["mnist"]
    assert "head_spread" in methods["insub"]["ood"]["mnist"]

    parts = sorted(out.glob("release.tar.gz.*"))
    assert kit["release_parts"] == [p.name for p in parts] and len(list(out.iterdir())) <= 8
    archive = tmp_path / "release.tar.gz"
    archive.write_bytes(b"".join(p.read_bytes() for p in parts))
    subprocess.run(["tar", "xzf", str(archive), "-C", str(tmp_path)], check=True)
    from insub_hf.hub import check_hub_folder

    folder = tmp_path / gpu_run.RELEASE_NAME
    files = check_hub_folder(folder)  # raises on a missing or unsafe file
    assert {"config.json", "model.safetensors", "README.md"} <= set(files) and "ood_detector.safetensors" not in files
    summary = (out / "summary.md").read_text()
    assert "## Speed race" in summary and "## At scale" in summary and "release.tar.gz.00" in summary


def _git_tree(root: Path) -> None:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text("ignored/\n.kit/\n")  # 15 bytes
    (root / "tracked.bin").write_bytes(b"x" * 1000)
    subprocess.run(["git", "-C", str(root), "add", "tracked.bin", ".gitignore"], check=True)
    (root / "untracked.txt").write_bytes(b"y" * 500)  # travels: git does not ignore it
    (root / "ignored").mkdir()
    (root / "ignored" / "big.bin").write_bytes(b"z" * 10_000)  # stays: ignored and not carried
    (root / ".kit" / "wheels").mkdir(parents=True)
    (root / ".kit" / "wheels" / "a.whl").write_bytes(b"w" * 3000)


def test_prepare_counts_what_travels_and_refuses_too_much(tmp_path, capsys):
    _git_tree(tmp_path)
    assert gpu_prepare.travelling_bytes(tmp_path, [".kit"]) == {"working tree": 1515, ".kit": 3000}
    assert gpu_prepare.check_size(tmp_path, [".kit"], limit=4515) == 4515
    assert "4515" not in capsys.readouterr().out  # sizes are shown in MiB
    with pytest.raises(SystemExit, match="over the 0 MiB limit"):
        gpu_prepare.check_size(tmp_path, [".kit"], limit=4514)


def test_prepare_pins_every_wheel_once():
    names = [r.split("==")[0].replace("_", "-").lower() for r in (*gpu_prepare.WHEELS, *gpu_prepare.BUILT)]
    assert len(names) == len(set(names))
    assert all("==" in r for r in (*gpu_prepare.WHEELS, *gpu_prepare.BUILT))


def test_stage_two_epochs_are_planned_from_the_race():
    args = gpu_run.parse(["--out", "x"])
    rows = [{"row": "insub-hf M=5", "e2e_samples_s": 6000.0, "warmup_s": 5.0, "status": "ok", "compile": True}]
    # 60,000 images at 6,000/s: 10 s an epoch; 400 s left less 20 (data) and 40 (release): 340 s; two seeds would
    # give each of the 4 models 340 / 4 - 5 (warm-up) - 40 (evaluation) = 40 s (4 epochs, under the 30 two seeds
    # need); one seed: 340 / 2 - 45 = 125 s, 12 epochs
    assert gpu_run.plan_epochs(rows, 400.0, args) == (12, [0])
    assert gpu_run.plan_epochs(rows, 1500.0, args) == (31, [0, 1])  # 1440 / 4 - 45 = 315 s
    assert gpu_run.plan_epochs(rows, 3000.0, args) == (40, [0, 1])  # at most --max_epochs
    # the race's real epoch, where it ran, is the epoch time: 8 s for 50,000 images, 9.6 s for 60,000
    measured = [*rows, {"row": "insub-hf M=5 epoch", "measured_epoch_s": 8.0, "status": "ok"}]
    assert gpu_run.plan_epochs(measured, 400.0, args) == (13, [0])
    assert gpu_run.plan_epochs([], 400.0, args) == (args.default_epochs, [0])
    assert gpu_run.plan_epochs(rows, 1500.0, gpu_run.parse(["--out", "x", "--tiny"])) == (1, [0])
    assert gpu_run.plan_epochs(rows, 400.0, Namespace(**{**vars(args), "epochs": 4, "seeds": 2})) == (4, [0, 1])
    assert gpu_run.compiles(rows, args)
    assert not gpu_run.compiles([{**rows[0], "status": "failed: BackendCompilerFailed"}], args)


def test_the_race_knows_the_peaks_of_the_lent_gpus():
    assert gpu_race.datasheet_peak("NVIDIA H100 80GB HBM3") == 989.4
    assert gpu_race.datasheet_peak("NVIDIA H100 PCIe") == 756.0
    assert gpu_race.datasheet_peak("NVIDIA H200") == 989.4
    assert gpu_race.datasheet_peak("Some GPU") is None


def run_stage(tmp_path: Path, stage: str) -> dict:
    """`gpu_run.py --tiny --stages STAGE` with its work folder in `tmp_path` (two seeds: the release takes the first
    seed's InSub model); its kit.json."""
    out = tmp_path / stage
    subprocess.run(
        [sys.executable, str(BENCHMARKS / "gpu_run.py"), "--out", str(out), "--tiny", "--stages", stage,
         "--kit", str(tmp_path / "none"), "--work", str(tmp_path / "work"), "--deadline_minutes", "4",
         "--epochs", "1", "--seeds", "2"],
        capture_output=True, text=True, timeout=270, check=True,
    )
    return json.loads((out / "kit.json").read_text())


@pytest.fixture(scope="module")
def scale_stage(tmp_path_factory):
    """The scale stage run alone: (its folder, its kit.json); the release test builds on its work folder."""
    tmp_path = tmp_path_factory.mktemp("kit")
    return tmp_path, run_stage(tmp_path, "scale")


@pytest.mark.slow
def test_a_stage_runs_alone_and_grows_the_comparison_seed_by_seed(scale_stage):
    tmp_path, scale = scale_stage
    # the comparison grows seed by seed: seed 0 alone, then seeds 0 and 1, seed 0 trained and evaluated once
    assert {k: v["status"] for k, v in scale["stages"].items()} == {"scale (seeds 0)": "ok", "scale": "ok"}
    log = (tmp_path / "scale" / "run.log").read_text()
    assert log.count("[compare] evaluation of baseline (seed 0)") == 1 and "release_parts" not in scale


@pytest.mark.slow
def test_the_release_stage_reuses_the_comparisons_models(scale_stage):
    tmp_path, scale = scale_stage
    release = run_stage(tmp_path, "release")
    assert release["stages"]["release"]["status"] == "ok" and release["release_parts"]
    # the same trained weights (the run cache), so the same numbers
    assert [r["fingerprints"] for r in release["comparison"]["rows"]] == [
        r["fingerprints"] for r in scale["comparison"]["rows"]]
    assert [r["test"] for r in release["comparison"]["rows"]] == [r["test"] for r in scale["comparison"]["rows"]]
    assert [(r["method"], r["seed"]) for r in release["comparison"]["rows"]] == [
        ("baseline", 0), ("insub", 0), ("baseline", 1), ("insub", 1)]


def _wheel(folder: Path) -> Path:
    """A one-module wheel, `kitprobe` 0.1, as a wheel builder writes it."""
    import base64
    import hashlib
    import zipfile

    files = {"kitprobe/__init__.py": "ANSWER = 42\n",
             "kitprobe-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: kitprobe\nVersion: 0.1\n",
             "kitprobe-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                             "Tag: py3-none-any\n"}
    record = [f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()}"
              f",{len(text.encode())}" for name, text in files.items()]
    files["kitprobe-0.1.dist-info/RECORD"] = "\n".join([*record, "kitprobe-0.1.dist-info/RECORD,,"]) + "\n"
    path = folder / "kitprobe-0.1-py3-none-any.whl"
    folder.mkdir(parents=True)
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
    return path


def test_the_packed_site_unpacks_importable_on_the_run_path(tmp_path):
    wheels, kit = tmp_path / "wheels", tmp_path / "kit"  # a fresh checkout: the kit folder is not there yet
    _wheel(wheels)
    gpu_prepare.pack_site(wheels, kit / gpu_prepare.SITE_ARCHIVE)
    packed = (kit / gpu_prepare.SITE_ARCHIVE).stat().st_mtime_ns
    gpu_prepare.pack_site(wheels, kit / gpu_prepare.SITE_ARCHIVE)  # no wheel is newer: kept as it is
    assert (kit / gpu_prepare.SITE_ARCHIVE).stat().st_mtime_ns == packed
    assert gpu_prepare.SITE_ARCHIVE == gpu_run.SITE_ARCHIVE

    site = tmp_path / "site"
    env = gpu_run.install_site(kit, site, gpu_run.Log(tmp_path, time.time() - 12.5))
    assert env["PYTHONPATH"].split(":")[0] == str(site)
    assert (site / ".installed").read_text() == "kitprobe-0.1-py3-none-any.whl"
    probe = subprocess.run([sys.executable, "-c", "import kitprobe, importlib.metadata as m; "
                            "print(kitprobe.ANSWER, m.version('kitprobe'))"],
                           env=env, capture_output=True, text=True, check=True)
    assert probe.stdout.split() == ["42", "0.1"]
    assert re.fullmatch(r"\[  12\.\ds\] \[kit\] 1 wheels unpacked in .*\n", (tmp_path / "run.log").read_text())

"""The GPU kit (benchmarks/gpu_prepare.py, gpu_run.py, gpu_race.py) runs whole on the CPU at a tiny size: every stage
writes its table with its columns, the comparison scores both models, and the release comes back as a checked Hub
folder; the prepare script's size check counts what travels and refuses what is over."""

from __future__ import annotations

import json
import re
import subprocess
import time
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import gpu_prepare  # noqa: E402
import gpu_race  # noqa: E402
import gpu_run  # noqa: E402
import gpu_seeds  # noqa: E402


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
    assert list(rows) == ["insub-hf M=5 captured", "insub-hf M=5", "lightly SimCLR", "insub-hf M=10", "insub-hf M=1",
                          "insub-hf M=5 epoch"]
    for name, row in rows.items():
        assert list(row) == list(gpu_race.COLUMNS)
        assert row["status"] == "ok", (name, row["status"])
        assert row["e2e_samples_s"] > 0 and row["step_tflop"] > 0
        assert row["epoch_s"] == pytest.approx(64 / row["e2e_samples_s"])
    assert rows["insub-hf M=5 epoch"]["measured_epoch_s"] > 0
    assert rows["insub-hf M=5 captured"]["step_tflop"] == rows["insub-hf M=5"]["step_tflop"]  # one model, one step
    assert kit["plan"]["capture_step"] is False  # a dry run on a CPU trains stage 2 without it
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
    # the next seed of the series (the committed ones in the repository's folder), kept as a dry run's record
    seed = kit["plan"]["seed"]
    assert seed == min(set(range(len(kit["plan"]["committed_seeds"]) + 1)) - set(kit["plan"]["committed_seeds"]))
    record = json.loads((out / f"seed_{seed}.json").read_text())
    assert (record["seed"], record["epochs"], record["tiny"]) == (seed, 1, True)
    assert record["results"]["rows"] == kit["comparison"]["rows"]
    assert {(r["method"], r["seed"]) for r in record["results"]["rows"]} == {("baseline", seed), ("insub", seed)}
    with pytest.raises(SystemExit, match="is a --tiny dry run"):
        gpu_seeds.add(out, tmp_path / "series", tmp_path / "kits")


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


def test_stage_two_plans_the_next_seed_of_the_series_from_the_race():
    args = gpu_run.parse(["--out", "x"])
    rows = [{"row": "insub-hf M=5", "e2e_samples_s": 6000.0, "warmup_s": 5.0, "status": "ok", "compile": True}]
    # 60,000 images at 6,000/s: 10 s an epoch; 100 epochs, 5 s warm-up and 30 s evaluation per model, both models
    # and 20 s of data: 2 x 1035 + 20 = 2090 s; the release adds its 40 s
    plan = gpu_seeds.seed_plan(rows, 2100.0, args, {}, release=False)
    assert (plan["seed"], plan["epochs"], plan["needs_s"], plan["fits"]) == (0, 100, 2090.0, True)
    assert not gpu_seeds.seed_plan(rows, 2100.0, args, {}, release=True)["fits"]  # 2130 s
    # the race's real epoch, where it ran, is the epoch time: 8 s for 50,000 images, 9.6 s for 60,000
    measured = [*rows, {"row": "insub-hf M=5 epoch", "measured_epoch_s": 8.0, "status": "ok"}]
    assert gpu_seeds.seed_plan(measured, 2100.0, args, {}, False)["needs_s"] == pytest.approx(2 * (5 + 960 + 30) + 20)
    # without the race: the last measured epoch and warm-up, or the flags
    plan = gpu_seeds.seed_plan([], 570.0, args, {}, False)
    assert plan["needs_s"] == pytest.approx(2 * (42.6 + 195 + 30) + 20) and plan["fits"]
    flagged = gpu_run.parse(["--out", "x", "--epoch_s", "1.0", "--warmup_s", "10"])
    assert gpu_seeds.seed_plan([], 300.0, flagged, {}, False)["needs_s"] == pytest.approx(2 * (10 + 100 + 30) + 20)
    # the lowest seed not committed, at the committed seeds' epochs
    hundred = {"epochs": 100}
    assert gpu_seeds.seed_plan(rows, 1e4, args, {0: hundred, 1: hundred}, False)["seed"] == 2
    assert gpu_seeds.seed_plan(rows, 1e4, args, {0: hundred, 2: hundred}, False)["seed"] == 1
    assert gpu_seeds.seed_plan(rows, 1e5, args, {0: {"epochs": 150}}, False)["epochs"] == 150
    with pytest.raises(SystemExit, match="were trained for 150 epochs; leave the flag out"):
        gpu_seeds.seed_plan(rows, 1e5, gpu_run.parse(["--out", "x", "--epochs_per_seed", "100"]), {0: {"epochs": 150}},
                          False)
    with pytest.raises(SystemExit, match="--epochs_per_seed 50: .* at least 100 epochs"):
        gpu_seeds.seed_plan(rows, 1e5, gpu_run.parse(["--out", "x", "--epochs_per_seed", "50"]), {}, False)
    tiny = gpu_seeds.seed_plan(rows, 10.0, gpu_run.parse(["--out", "x", "--tiny"]), {0: hundred}, True)
    assert (tiny["seed"], tiny["epochs"], tiny["fits"]) == (1, 1, True)
    assert gpu_run.compiles(rows, args)
    assert not gpu_run.compiles([{**rows[0], "status": "failed: BackendCompilerFailed"}], args)
    # the captured step trains stage 2 where the race found it faster end to end; its own rows then plan the seed
    faster = [*rows, {"row": "insub-hf M=5 captured", "e2e_samples_s": 12000.0, "warmup_s": 15.0, "status": "ok"}]
    assert gpu_run.captures(faster, args) and not gpu_run.captures(rows, args)
    assert not gpu_run.captures(faster, gpu_run.parse(["--out", "x", "--scale_capture", "false"]))
    assert not gpu_run.captures([*rows, {**faster[-1], "e2e_samples_s": 5000.0}], args)
    assert not gpu_run.captures([*rows, {**faster[-1], "status": "failed: RuntimeError"}], args)
    plan = gpu_seeds.seed_plan(faster, 1e4, args, {}, False, captured=True)  # 5 s an epoch, 15 s warm-up
    assert plan["needs_s"] == pytest.approx(2 * (15 + 500 + 30) + 20) and plan["from"] == "the race's end-to-end rate"


def test_the_committed_seeds_are_read_by_their_names(tmp_path):
    (tmp_path / "seed_0.json").write_text(json.dumps({"seed": 0, "epochs": 100}))
    (tmp_path / "notes.json").write_text("{}")  # not a seed file
    assert gpu_seeds.committed_seeds(tmp_path) == {0: {"seed": 0, "epochs": 100}}
    assert gpu_seeds.committed_seeds(tmp_path / "none") == {}
    (tmp_path / "seed_3.json").write_text(json.dumps({"seed": 1, "epochs": 100}))
    with pytest.raises(SystemExit, match="seed_3.json holds seed 1; its name says otherwise"):
        gpu_seeds.committed_seeds(tmp_path)


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
    assert not list((tmp_path / "scale").glob("seed_*.json"))  # an ad hoc run (--epochs) is outside the series


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


def _lend(folder: Path, seed: int, epochs: int = 100, **changes) -> Path:
    """A lend's $OUT: the seed record of `seed` made from the committed CPU comparison (seeds 0-2, both methods), with
    its kit.json and summary.md."""
    compare = json.loads((BENCHMARKS.parent / "docs" / "runs" / "cpu_compare_seeds_0_2.json").read_text())
    results = {**compare, "rows": [row for row in compare["rows"] if row["seed"] == seed]}
    record = {"seed": seed, "epochs": epochs, "tiny": False, "commit": "abc123", "started": "2026-12-01 10:00:00 UTC",
              "environment": {"device": "NVIDIA H200", "torch": "2.11.0+cu130"}, "plan": {}, "results": results,
              **changes}
    folder.mkdir(parents=True)
    (folder / f"seed_{seed}.json").write_text(json.dumps(record))
    (folder / "kit.json").write_text(json.dumps({"started": f"2026-12-0{seed + 1} 10:00:00 UTC", "commit": "abc123"}))
    (folder / "summary.md").write_text("# GPU kit run\n")
    return folder


def test_each_lend_adds_its_seed_and_the_table_covers_every_committed_seed(tmp_path):
    series, kits = tmp_path / "series", tmp_path / "kits"
    gpu_seeds.add(_lend(tmp_path / "lend0", 0), series, kits)
    assert sorted(p.name for p in series.iterdir()) == ["README.md", "seed_0.json"]
    assert (kits / "2026-12-01T100000-abc123" / "summary.md").read_text() == "# GPU kit run\n"
    one = (series / "README.md").read_text()
    assert "| 0 | 100 | NVIDIA H200 | 2.11.0+cu130 | abc123 | 2026-12-01 10:00:00 UTC |" in one and "±" not in one
    gpu_seeds.add(_lend(tmp_path / "lend1", 1), series, kits)
    gpu_seeds.add(_lend(tmp_path / "lend2", 2), series, kits)
    gpu_seeds.add(tmp_path / "lend2", series, kits)  # the same seed again, the same numbers: nothing changes
    assert sorted(gpu_seeds.committed_seeds(series)) == [0, 1, 2]
    table = (series / "README.md").read_text()

    # the paired differences of three seeds, recomputed from the raw rows: mean ± std (ddof 1) and each seed
    compare = json.loads((BENCHMARKS.parent / "docs" / "runs" / "cpu_compare_seeds_0_2.json").read_text())
    by = {(r["method"], r["seed"]): r for r in compare["rows"]}
    for label, read, scale, digits in (("Acc", lambda r: r["test"]["accuracy"], 100, 2),
                                       ("AUROC mnist calibrated", lambda r: r["ood"]["mnist"]["uncertainty"], 100, 2)):
        differences = [scale * (read(by["insub", s]) - read(by["baseline", s])) for s in (0, 1, 2)]
        mean = sum(differences) / 3
        std = (sum((d - mean) ** 2 for d in differences) / 2) ** 0.5
        cell = f"{mean:+.{digits}f} ± {std:.{digits}f} ({', '.join(f'{d:+.{digits}f}' for d in differences)})"
        assert cell in table, (label, cell)
    assert "AUROC mnist calibrated" in table and "seeds [0, 1, 2]" in table


def test_a_committed_seed_is_never_replaced_and_a_lend_of_other_epochs_is_refused(tmp_path):
    series, kits = tmp_path / "series", tmp_path / "kits"
    gpu_seeds.add(_lend(tmp_path / "lend0", 0), series, kits)
    kept = (series / "seed_0.json").read_text()
    with pytest.raises(SystemExit, match="seed_0.json is committed with other numbers; a committed seed is never"):
        gpu_seeds.add(_lend(tmp_path / "again", 0, commit="def456"), series, kits)
    with pytest.raises(SystemExit, match=r"seed 1, 50 epochs\): the series in .* trains 100 epochs per model"):
        gpu_seeds.add(_lend(tmp_path / "short", 1, epochs=50), series, kits)
    assert (series / "seed_0.json").read_text() == kept and not (series / "seed_1.json").exists()
    assert not (kits / "2026-12-02T100000-abc123").exists()  # a refused lend copies nothing
    with pytest.raises(SystemExit, match="no such folder"):
        gpu_seeds.add(tmp_path / "missing", series, kits)

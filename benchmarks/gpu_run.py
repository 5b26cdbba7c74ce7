"""The GPU kit's one command: unpacks the carried packages, records the versions and the device, then runs the stages
under one global deadline, each writing what it measured as soon as it has it, so a run cut short keeps what it got.

    python3 benchmarks/gpu_run.py --out $OUT                     # all stages, deadline 9 minutes
    python3 benchmarks/gpu_run.py --out $OUT --stages release    # redo one stage
    python benchmarks/gpu_run.py --out runs/kit --tiny           # the whole path on a CPU at a tiny size

Stages (each also alone, by `--stages`):
1. `speed`: the speed race (`benchmarks/gpu_race.py`): SimCLR ResNet-18 on a CIFAR-shaped set, insub-hf M = 5
   through `InSubTrainer`, lightly's SimCLR, insub-hf M = 10 and 1, then a real epoch of M = 5 (what matters most
   first, so a race cut short keeps it).
2. `scale`: `insub-hf compare --methods baseline insub` on the full Fashion-MNIST with the CIFAR ResNet-18 (the
   image recipe: the authors' objective with the chosen hinge): the next seed of a comparison that grows across
   lends. The seeds trained by earlier lends are committed in `--seed_folder` (`docs/runs/gpu_comparison`, one
   `seed_<k>.json` each); this run trains the lowest seed not there, baseline and InSub for the series' epochs (at
   least 100), when both fit the time left (planned from stage 1's measured epoch and compilation, else the last
   measured ones, and the reserves for data and evaluation), and writes its `seed_<k>.json` to `--out`:
   `benchmarks/gpu_seeds.py add OUT` commits it and rebuilds the tables of every seed. `--epochs E --seeds N` runs
   seeds 0 .. N-1 ad hoc instead, outside the series.
3. `release`: `insub-hf release image` with the same settings (in the same run folder it reuses stage 2's trained
   models from the run cache): the InSub model's checked Hub folder and card, packed under `--out`.
With `speed` and `scale` both chosen, `release` runs in their place for stage 2 (it runs the comparison itself).

What comes back (at most 8 files): `run.log` (every stage's output), `summary.md` (versions, the tables), `kit.json`
(every number: the race's rows, the comparison's results.json, the stages' wall times) and the Hub folder as
`release.tar.gz.NN` parts of at most 15 MiB (`cat release.tar.gz.* | tar xz`), and the seed's `seed_<k>.json`.

This file uses the standard library only: it runs before the carried packages are unpacked.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_seeds import (  # noqa: E402  (same folder; standard library only, as this file)
    MIN_SERIES_EPOCHS, SEED_FOLDER, committed_seeds, seed_file_name, seed_plan, seed_record,
)
PART_BYTES = 15 * 2**20
VERSIONS = ("torch", "torchvision", "triton", "transformers", "accelerate", "datasets", "evaluate", "lightly",
            "timm", "huggingface_hub", "safetensors", "sentence_transformers", "numpy", "pyarrow", "fsspec", "mlxtend")
RELEASE_NAME = "insub-resnet18-fashion-mnist-gpu"
SITE_ARCHIVE = "site.tar.xz"  # the wheels as pip installs them, xz-packed: 10.8 MB against 24.1 MB of wheels


class Log:
    """Prints and appends to `out/run.log`, every line stamped with the seconds since the run began."""

    def __init__(self, out: Path, start: float):
        self.path, self.start = out / "run.log", start

    def stamp(self, text: str) -> str:
        return f"[{time.time() - self.start:6.1f}s] {text}"

    def __call__(self, text: str) -> None:
        text = self.stamp(text)
        print(text, flush=True)
        with open(self.path, "a") as f:
            f.write(text + "\n")


def install_site(kit: Path, site: Path, log: Log) -> dict[str, str]:
    """The carried packages (`kit/site.tar.xz`, the wheels installed and packed by gpu_prepare.py) unpacked into
    `site`, first on the path of every stage; the carried Fashion-MNIST named by `INSUB_HF_FASHION_MNIST`. Returns
    the environment of the stages."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "MPLBACKEND": "Agg"}
    paths = [str(REPO)]
    archive = kit / SITE_ARCHIVE
    if archive.is_file():
        if not (site / ".installed").is_file():
            site.mkdir(parents=True, exist_ok=True)
            with tarfile.open(archive, "r:xz") as packed:
                packed.extractall(site, filter="data")
        paths.insert(0, str(site))
        log(f"[kit] {(site / '.installed').read_text().count('.whl')} wheels unpacked in {site}")
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    data = kit / "data" / "fashion-mnist"
    if (data / "train-images-idx3-ubyte.gz").is_file():
        env["INSUB_HF_FASHION_MNIST"] = str(data.resolve())
    return env


def environment(env: dict, log: Log) -> dict:
    """Versions of the packages the stages import, and the device."""
    probe = (
        "import importlib, json, torch\n"
        f"names = {VERSIONS!r}\n"
        "found = {}\n"
        "for n in names:\n"
        "    try: found[n] = getattr(importlib.import_module(n), '__version__', '?')\n"
        "    except Exception as e: found[n] = f'missing ({type(e).__name__}: {e})'[:120]\n"
        "cuda = torch.cuda.is_available()\n"
        "found['device'] = torch.cuda.get_device_name() if cuda else 'cpu'\n"
        "found['cuda'] = torch.version.cuda\n"
        "found['python'] = __import__('sys').version.split()[0]\n"
        "import insub_hf, insub_hf.training.trainer; found['insub_hf'] = insub_hf.__version__\n"
        "print(json.dumps(found))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, cwd=REPO)
    if result.returncode:
        log(result.stderr[-3000:])
        return {"error": result.stderr[-500:]}
    found = json.loads(result.stdout.strip().splitlines()[-1])
    log("[kit] " + ", ".join(f"{k} {v}" for k, v in found.items()))
    return found


def run_stage(name: str, command: list[str], env: dict, deadline: float, log: Log) -> dict:
    """Runs `command` until it ends or the deadline; its output goes to the log as it comes."""
    left = deadline - time.time()
    if left < 5:
        log(f"[kit] {name}: not started, the deadline is reached")
        return {"status": "not reached: deadline", "seconds": 0.0}
    log(f"[kit] {name}: {' '.join(command)} (at most {left:.0f} s)")
    start = time.time()
    with open(log.path, "a") as sink:
        process = subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, start_new_session=True)
        # at the deadline the stage's whole process group goes (its data loader workers too), silent or not
        watchdog = threading.Timer(left, lambda: os.killpg(process.pid, signal.SIGKILL))
        watchdog.start()
        for line in process.stdout:
            line = log.stamp(line)
            sys.stdout.write(line)
            sink.write(line)
            sink.flush()
        process.wait()
        cut = not watchdog.is_alive()
        watchdog.cancel()
    status = ("cut off by the deadline" if cut else "ok" if process.returncode == 0
              else f"failed (exit {process.returncode})")
    seconds = round(time.time() - start, 1)
    log(f"[kit] {name}: {status} after {seconds} s")
    return {"status": status, "seconds": seconds}


def read_rows(path: Path) -> tuple[dict, list[dict]]:
    if not path.is_file():
        return {}, []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    header = lines[0].get("header", {}) if lines else {}
    return header, [line for line in lines if "header" not in line]


def compiles(rows: list[dict], args) -> bool:
    """Whether stage 2 compiles: `--scale_compile`, unless the race's compiled M = 5 row failed."""
    row = next((r for r in rows if r.get("row") == "insub-hf M=5"), None)
    return args.scale_compile and not (row and row.get("compile") and row.get("status") != "ok")


def captures(rows: list[dict], args) -> bool:
    """Whether stage 2 trains with the captured step (`capture_step`, one CUDA graph per step): `--scale_capture`,
    stage 2 compiles, and the race's captured M = 5 row ran and beat the compiled one end to end."""
    def rate(name: str) -> float:
        row = next((r for r in rows if r.get("row") == name and r.get("status") == "ok"), None)
        return (row or {}).get("e2e_samples_s") or 0.0

    return (args.scale_capture and not args.tiny and compiles(rows, args)
            and rate("insub-hf M=5 captured") > rate("insub-hf M=5"))


def image_flags(args, epochs: int, seeds: list[int], work: Path, compile_model: bool,
                captured: bool = False) -> list[str]:
    """The comparison's flags: the image recipe on the CIFAR ResNet-18 at full width, the full Fashion-MNIST, data
    and views on the GPU; `--tiny`: a few steps of a narrow ResNet-10 on the bundled images."""
    if args.tiny:
        size = ["--encoder", "resnet10_cifar", "--width", "0.125", "--train_per_class", "20", "--test_per_class", "10",
                "--ood_images", "50", "--max_steps", "2", "--per_device_train_batch_size", "40",
                "--data_source", "bundled", "--probe_epochs", "20", "--corruptions", "gaussian_noise", "brightness",
                "--corruption_images", "20", "--label_fractions", "0.1"]
    else:
        size = ["--encoder", "resnet18_cifar", "--width", "1", "--num_train_epochs", str(epochs),
                "--per_device_train_batch_size", str(args.batch_size), "--data_source", "debian",
                "--torch_compile", str(compile_model).lower(), "--logging_steps", "20",
                *(["--capture_step", "true", "--torch_compile_mode", "reduce-overhead"] if captured else [])]
    # the kit's own scratch folder: a stage run again replaces its results, trained models come from the run cache
    return [*size, "--methods", "baseline", "insub", "--seeds", *map(str, seeds), "--data_on_device", "true",
            "--output_dir", str(work / "image"), "--overwrite_output_dir", "true"]


def pack_release(hub: Path, out: Path, log: Log) -> list[str]:
    """The Hub folder as `out/release.tar.gz.NN` parts of at most `PART_BYTES`."""
    archive = out.parent / f".{out.name}-release.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(hub, arcname=RELEASE_NAME)
    parts, data = [], archive.read_bytes()
    for index in range(math.ceil(len(data) / PART_BYTES)):
        part = out / f"release.tar.gz.{index:02d}"
        part.write_bytes(data[index * PART_BYTES:(index + 1) * PART_BYTES])
        parts.append(part.name)
    archive.unlink()
    log(f"[kit] release: {hub} packed as {len(parts)} part(s), {len(data) / 2**20:.1f} MiB: {', '.join(parts)}")
    return parts


def summary(kit: dict) -> str:
    env = kit.get("environment", {})
    lines = ["# GPU kit run", "", "Environment: " + ", ".join(f"{k} {v}" for k, v in env.items()), "",
             "Stages: " + ", ".join(f"{k} {v['status']} ({v['seconds']} s)" for k, v in kit["stages"].items()), ""]
    if kit.get("speed_md"):  # the race's own table
        lines += ["## Speed race", "", kit["speed_md"], ""]
    if "plan" in kit:
        lines += [f"Stage 2 plan: {kit['plan']}", ""]
    if kit.get("comparison_md"):
        lines += ["## At scale (insub-hf compare)", "", kit["comparison_md"], ""]
    if kit.get("release_parts"):
        lines += ["## Release", "", f"{RELEASE_NAME}: {', '.join(kit['release_parts'])}", ""]
    return "\n".join(lines)


def write_outputs(out: Path, kit: dict) -> None:
    (out / "kit.json").write_text(json.dumps(kit, indent=1, default=str))
    (out / "summary.md").write_text(summary(kit))


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="Where the run's files go ($OUT on the lent machine).")
    parser.add_argument("--stages", nargs="+", default=["speed", "scale", "release"],
                        choices=("speed", "scale", "release"))
    parser.add_argument("--deadline_minutes", type=float, default=9.0, help="Global deadline of all stages.")
    parser.add_argument("--tiny", action="store_true", help="Every stage at a tiny size (a CPU check of the path).")
    parser.add_argument("--kit", default=".gpu_kit", help="The prepared folder: site.tar.xz and data/fashion-mnist/.")
    parser.add_argument("--site", default="/tmp/insub-kit-site", help="Where the carried packages are unpacked.")
    parser.add_argument("--work", default="/tmp/insub-kit-work", help="Run folders (not brought back).")
    parser.add_argument("--speed_minutes", type=float, default=3.0, help="Stage 1's share of the deadline.")
    parser.add_argument("--race", nargs=argparse.REMAINDER, default=[], help="Further flags of gpu_race.py (last).")
    parser.add_argument("--epochs", type=int, default=None, help="An ad hoc stage 2 of this many epochs over seeds 0 .. "
                        "--seeds - 1, outside the committed series (no seed file is written).")
    parser.add_argument("--seeds", type=int, default=None, help="With --epochs: how many seeds.")
    parser.add_argument("--seed_folder", default=SEED_FOLDER, help="The comparison's committed seeds (seed_<k>.json): "
                        "stage 2 trains the lowest seed not in it and writes its seed_<k>.json to --out.")
    parser.add_argument("--epochs_per_seed", type=int, default=None, help="Epochs of every seed of the series (default: "
                        f"those of the committed seeds, else {MIN_SERIES_EPOCHS}; at least {MIN_SERIES_EPOCHS}).")
    parser.add_argument("--epoch_s", type=float, default=None, help="Seconds per training epoch when the race does not "
                        "run (default: the last measured).")
    parser.add_argument("--warmup_s", type=float, default=None, help="Seconds of compilation per model when the race "
                        "does not run (default: the last measured).")
    parser.add_argument("--scale_compile", type=lambda s: s.lower() in ("1", "true", "yes"), default=True,
                        help="Stage 2 through torch.compile (not when the race's compiled M=5 row failed).")
    parser.add_argument("--scale_capture", type=lambda s: s.lower() in ("1", "true", "yes"), default=True,
                        help="Stage 2 with the captured step (capture_step, torch_compile_mode reduce-overhead) when "
                        "the race's captured M=5 row beat the compiled one end to end.")
    parser.add_argument("--batch_size", type=int, default=500, help="Stage 2's batch (a multiple of M = 5).")
    parser.add_argument("--train_images", type=int, default=60_000)
    parser.add_argument("--race_images", type=int, default=50_000, help="Images of the race's real epoch.")
    parser.add_argument("--data_reserve", type=float, default=20.0, help="Seconds kept for loading the data.")
    parser.add_argument("--evaluation_reserve", type=float, default=30.0, help="Seconds kept for each model's "
                        "evaluation.")
    parser.add_argument("--release_reserve", type=float, default=40.0, help="Seconds kept for the release's detector "
                        "and Hub folder.")
    parser.add_argument("--detector_bank", type=int, default=2000, help="Training images in the released detector.")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse(argv)
    start = time.time()
    deadline = start + 60 * args.deadline_minutes
    out, work = Path(args.out).resolve(), Path(args.work).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    log = Log(out, start)
    env = install_site((REPO / args.kit).resolve(), Path(args.site), log)
    kit = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "commit": git_commit(), "args": vars(args),
           "environment": environment(env, log), "stages": {}}
    write_outputs(out, kit)
    python = [sys.executable]
    if "speed" in args.stages:
        speed_end = min(deadline, time.time() + 60 * args.speed_minutes)
        race = [*python, "benchmarks/gpu_race.py", "--out", str(work / "speed"), "--deadline", str(speed_end - 30),
                *(["--tiny"] if args.tiny else []), *args.race]
        kit["stages"]["speed"] = run_stage("speed", race, env, speed_end, log)
        kit["speed_header"], kit["speed_rows"] = read_rows(work / "speed" / "speed.jsonl")
        table = work / "speed" / "speed.md"
        kit["speed_md"] = table.read_text() if table.is_file() else None
        write_outputs(out, kit)
    image = {"scale", "release"} & set(args.stages)
    if image:
        image_stage(args, kit, python, env, deadline, work, out, log)
    kit["wall_seconds"] = round(time.time() - start, 1)
    write_outputs(out, kit)
    log(f"[kit] done in {kit['wall_seconds']} s: " + ", ".join(f"{k} {v['status']}" for k, v in kit["stages"].items()))


def image_stage(args, kit: dict, python: list[str], env: dict, deadline: float, work: Path, out: Path,
                log: Log) -> None:
    """Stage 2 (`scale`, or `release` in its place): the next seed of the committed series, or an ad hoc run
    (`--epochs`); the comparison's tables, the seed's record and the release's Hub folder go to `out` as they come."""
    release = "release" in args.stages
    name = "release" if release else "scale"
    series = not args.epochs
    rows = kit.get("speed_rows", [])
    captured = captures(rows, args)
    if series:
        committed = committed_seeds(REPO / args.seed_folder)
        plan = seed_plan(rows, deadline - time.time(), args, committed, release, captured)
        kit["plan"] = {**plan, "committed_seeds": sorted(committed), "capture_step": captured}
        if not plan["fits"]:
            log(f"[kit] {name}: seed {plan['seed']} not started: its {plan['epochs']} epochs per model need "
                f"{plan['needs_s']:.0f} s ({plan['epoch_s']} s an epoch from {plan['from']}, {plan['warmup_s']} s "
                f"warm-up), {plan['seconds_left']:.0f} s are left; run `--stages scale` alone with a longer deadline")
            kit["stages"][name] = {"status": "not started: the seed does not fit the time left", "seconds": 0.0}
            write_outputs(out, kit)
            return
        epochs, seeds = plan["epochs"], [plan["seed"]]
    else:
        epochs, seeds = args.epochs, list(range(args.seeds or 1))
        kit["plan"] = {"epochs": epochs, "seeds": seeds, "seconds_left": round(deadline - time.time(), 1),
                       "capture_step": captured}
    log(f"[kit] stage 2: {epochs} epochs, seeds {seeds}" + (f" (committed: {kit['plan']['committed_seeds']})"
                                                              if series else " (ad hoc, outside the series)"))
    command = (["release", "image", "--name", RELEASE_NAME, "--model_cards", str(work / "model_cards"),
                "--detector_bank", str(50 if args.tiny else args.detector_bank)] if release else ["compare"])
    # an ad hoc comparison grows seed by seed (each run reuses the trained models and evaluations of the one before
    # from the run folder's caches), so a run cut by the deadline keeps the table of the seeds it finished
    for done in ([seeds] if release else [seeds[:k] for k in range(1, len(seeds) + 1)]):
        label = name if done == seeds else f"{name} (seeds {' '.join(map(str, done))})"
        flags = image_flags(args, epochs, done, work, compiles(rows, args), captured)
        started = time.time()
        kit["stages"][label] = run_stage(label, [*python, "insub_hf_cli.py", *command, *flags], env, deadline, log)
        results = work / "image" / "results.json"
        if results.is_file() and results.stat().st_mtime >= started:  # written by this run, not an earlier one
            kit["comparison"] = json.loads(results.read_text())
            kit["comparison_md"] = (work / "image" / "results.md").read_text()
        write_outputs(out, kit)
    record = seed_record(kit["plan"], kit.get("comparison", {}), kit) if series else None
    if record is not None:
        path = out / seed_file_name(record["seed"])
        path.write_text(json.dumps(record, indent=1, default=str))
        log(f"[kit] {name}: seed {record['seed']} ({epochs} epochs) written to {path.name}; commit it with "
            f"`python benchmarks/gpu_seeds.py add {out}`")
    hub = work / "image" / "hub"
    if release and (hub / "config.json").is_file():
        kit["release_parts"] = pack_release(hub, out, log)
        write_outputs(out, kit)


def git_commit() -> str | None:
    """The commit the kit runs: `INSUB_HF_COMMIT` where set (the lent machine's copy of the working tree may carry the
    checkout's git folder at another commit), else git's HEAD."""
    if os.environ.get("INSUB_HF_COMMIT"):
        return os.environ["INSUB_HF_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


if __name__ == "__main__":
    main()

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
   image recipe: the authors' objective with the chosen hinge), as many epochs as the deadline allows (planned before
   training from stage 1's measured epoch and compilation and the reserves for data and evaluation, the same for
   both), seed 0 (and 1 when both fit `--min_epochs`), one seed after the other: each seed's run rewrites the table
   of every seed so far, so a run cut by the deadline keeps the seeds it finished.
3. `release`: `insub-hf release image` with the same settings (in the same run folder it reuses stage 2's trained
   models from the run cache): the InSub model's checked Hub folder and card, packed under `--out`.
With `speed` and `scale` both chosen, `release` runs in their place for stage 2 (it runs the comparison itself).

What comes back (at most 8 files): `run.log` (every stage's output), `summary.md` (versions, the tables), `kit.json`
(every number: the race's rows, the comparison's results.json, the stages' wall times) and the Hub folder as
`release.tar.gz.NN` parts of at most 15 MiB (`cat release.tar.gz.* | tar xz`).

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


def plan_epochs(rows: list[dict], seconds_left: float, args) -> tuple[int, list[int]]:
    """Epochs and seeds of stage 2 from what the race measured: its M = 5 row's epoch time (its real epoch where it
    ran, else the end-to-end rate) and warm-up (compilation, counted once per model and again for the views), and
    the reserves for data, each model's evaluation and the release. Two seeds when both fit `--min_epochs` epochs,
    else one seed with as many epochs as fit (at most `--max_epochs`). Fashion-MNIST images are 28 x 28 x 1 against
    the race's 32 x 32 x 3 (~0.77 of the FLOPs): the race's rate is used as it is, which errs on the short side."""
    if args.epochs:
        return args.epochs, list(range(args.seeds or 1))
    if args.tiny:  # a check of the path: its steps are fixed, one seed
        return 1, [0]
    speed = next((r for r in rows if r.get("row") == "insub-hf M=5" and r.get("e2e_samples_s")), None)
    if speed is None:
        return args.default_epochs, [0]
    epoch = next((r for r in rows if r.get("row") == "insub-hf M=5 epoch" and r.get("measured_epoch_s")), None)
    epoch_s = (epoch["measured_epoch_s"] * args.train_images / args.race_images if epoch
               else args.train_images / speed["e2e_samples_s"])
    warmup = speed.get("warmup_s") or 0.0
    budget = seconds_left - args.data_reserve - args.release_reserve
    for seeds in ([0, 1], [0]):
        per_model = budget / (2 * len(seeds)) - warmup - args.evaluation_reserve
        epochs = int(per_model // epoch_s)
        if epochs >= (args.min_epochs if len(seeds) == 2 else 1):
            return min(epochs, args.max_epochs), seeds
    return 1, [0]


def compiles(rows: list[dict], args) -> bool:
    """Whether stage 2 compiles: `--scale_compile`, unless the race's compiled M = 5 row failed."""
    row = next((r for r in rows if r.get("row") == "insub-hf M=5"), None)
    return args.scale_compile and not (row and row.get("compile") and row.get("status") != "ok")


def image_flags(args, epochs: int, seeds: list[int], work: Path, compile_model: bool) -> list[str]:
    """The comparison's flags: the image recipe on the CIFAR ResNet-18 at full width, the full Fashion-MNIST, data
    and views on the GPU; `--tiny`: a few steps of a narrow ResNet-10 on the bundled images."""
    if args.tiny:
        size = ["--encoder", "resnet10_cifar", "--width", "0.125", "--train_per_class", "20", "--test_per_class", "10",
                "--ood_images", "50", "--max_steps", "2", "--per_device_train_batch_size", "40",
                "--data_source", "bundled"]
    else:
        size = ["--encoder", "resnet18_cifar", "--width", "1", "--num_train_epochs", str(epochs),
                "--per_device_train_batch_size", str(args.batch_size), "--data_source", "debian",
                "--torch_compile", str(compile_model).lower(), "--logging_steps", "20"]
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
    parser.add_argument("--epochs", type=int, default=None, help="Stage 2's epochs (default: planned).")
    parser.add_argument("--seeds", type=int, default=None, help="With --epochs: how many seeds.")
    parser.add_argument("--default_epochs", type=int, default=30, help="Stage 2's epochs when no race row plans them.")
    parser.add_argument("--max_epochs", type=int, default=40)
    parser.add_argument("--min_epochs", type=int, default=30, help="Fewest epochs of each model with two seeds.")
    parser.add_argument("--scale_compile", type=lambda s: s.lower() in ("1", "true", "yes"), default=True,
                        help="Stage 2 through torch.compile (not when the race's compiled M=5 row failed).")
    parser.add_argument("--batch_size", type=int, default=500, help="Stage 2's batch (a multiple of M = 5).")
    parser.add_argument("--train_images", type=int, default=60_000)
    parser.add_argument("--race_images", type=int, default=50_000, help="Images of the race's real epoch.")
    parser.add_argument("--data_reserve", type=float, default=20.0, help="Seconds kept for loading the data.")
    parser.add_argument("--evaluation_reserve", type=float, default=40.0, help="Seconds kept for each model's "
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
        epochs, seeds = plan_epochs(kit.get("speed_rows", []), deadline - time.time(), args)
        kit["plan"] = {"epochs": epochs, "seeds": seeds, "seconds_left": round(deadline - time.time(), 1)}
        log(f"[kit] stage 2: {epochs} epochs, seeds {seeds}")
        release = "release" in image
        command = (["release", "image", "--name", RELEASE_NAME, "--model_cards", str(work / "model_cards"),
                    "--detector_bank", str(50 if args.tiny else args.detector_bank)] if release else ["compare"])
        name = "release" if release else "scale"
        # the comparison grows seed by seed (each run reuses the trained models and evaluations of the one before
        # from the run folder's caches), so a run cut by the deadline keeps the table of the seeds it finished
        for done in ([seeds] if release else [seeds[:k] for k in range(1, len(seeds) + 1)]):
            label = name if done == seeds else f"{name} (seeds {' '.join(map(str, done))})"
            flags = image_flags(args, epochs, done, work, compiles(kit.get("speed_rows", []), args))
            started = time.time()
            kit["stages"][label] = run_stage(label, [*python, "insub_hf_cli.py", *command, *flags], env, deadline,
                                             log)
            results = work / "image" / "results.json"
            if results.is_file() and results.stat().st_mtime >= started:  # written by this run, not an earlier one
                kit["comparison"] = json.loads(results.read_text())
                kit["comparison_md"] = (work / "image" / "results.md").read_text()
            write_outputs(out, kit)
        hub = work / "image" / "hub"
        if release and (hub / "config.json").is_file():
            kit["release_parts"] = pack_release(hub, out, log)
    kit["wall_seconds"] = round(time.time() - start, 1)
    write_outputs(out, kit)
    log(f"[kit] done in {kit['wall_seconds']} s: " + ", ".join(f"{k} {v['status']}" for k, v in kit["stages"].items()))


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

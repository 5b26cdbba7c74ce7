"""The GPU comparison that grows across lends: which seed a lend trains next and for how long (`seed_plan`, read by
`gpu_run.py` before stage 2), what it keeps of it (`seed_record`), and, here, committing what a lend brought back and
rebuilding the tables of every committed seed. The standard library only, except `table` (insub_hf's report).

    python benchmarks/gpu_seeds.py add FILES_AT      # a lend's $OUT: its seed_<k>.json, kit.json, summary.md
    python benchmarks/gpu_seeds.py table             # docs/runs/gpu_comparison/README.md from the committed seeds

`add` copies each `seed_<k>.json` into the series' folder (`docs/runs/gpu_comparison`), refusing a seed that is
already there with other numbers (a committed seed is never overwritten), a seed trained for other epochs than the
series' and a `--tiny` dry run; the lend's `kit.json`, `summary.md` and `run.log` go to
`docs/runs/gpu_kit/<start time>-<commit>/`, so every lend's raw results stay in git. Then `table` runs.

`table` reads every committed seed and writes the series' README: one line per seed (epochs, device, commit, date,
torch), then the comparison's report over all seeds (`insub_hf.evaluation.report.markdown_report`: mean ± std over
seeds, paired differences InSub - baseline of the same seed, with their spread once there are two or more seeds).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SEED_FOLDER = "docs/runs/gpu_comparison"  # the comparison's committed seeds, one file each, tracked by git
MIN_SERIES_EPOCHS = 100
# the last measured M = 5 epoch of the 60,000 Fashion-MNIST images and its first compilation, for a lend without the
# race (docs/evidence.md: H200, commit 7431a9f, 2026-11-28, torch 2.11.0+cu130)
MEASURED = {"epoch_s": 1.95, "warmup_s": 42.6, "run": "H200, commit 7431a9f, 2026-11-28"}

def committed_seeds(folder: Path) -> dict[int, dict]:
    """The comparison's seeds committed in `folder` (`seed_<k>.json`, written by earlier lends): seed -> its record
    (`seed`, `epochs`, `results`, ...)."""
    seeds = {}
    for path in sorted(folder.glob("seed_*.json")) if folder.is_dir() else []:
        record = json.loads(path.read_text())
        if path.name != seed_file_name(record.get("seed")):
            raise SystemExit(f"{path} holds seed {record.get('seed')!r}; its name says otherwise: rename or remove it.")
        seeds[record["seed"]] = record
    return seeds


def seed_file_name(seed) -> str:
    return f"seed_{seed}.json"


def series_epochs(committed: dict[int, dict], args) -> int:
    """The epochs of every seed of the comparison: those of the committed seeds (one value), else `--epochs_per_seed`
    (at least `MIN_SERIES_EPOCHS`). A flag that asks for other epochs than the committed seeds is refused: a seed
    trained for other epochs is another experiment, not the next seed of this one."""
    epochs = {record["epochs"] for record in committed.values()}
    if len(epochs) > 1:
        raise SystemExit(f"The committed seeds in {args.seed_folder} were trained for different epochs "
                         f"({sorted(epochs)}): keep one series per folder.")
    if epochs and args.epochs_per_seed not in (None, *epochs):
        raise SystemExit(f"--epochs_per_seed {args.epochs_per_seed}: the seeds committed in {args.seed_folder} "
                         f"({sorted(committed)}) were trained for {epochs.pop()} epochs; leave the flag out, or give "
                         "another --seed_folder for another series.")
    chosen = epochs.pop() if epochs else args.epochs_per_seed or MIN_SERIES_EPOCHS
    if chosen < MIN_SERIES_EPOCHS:
        raise SystemExit(f"--epochs_per_seed {chosen}: the comparison at scale trains each model for at least "
                         f"{MIN_SERIES_EPOCHS} epochs.")
    return chosen


def seed_plan(rows: list[dict], seconds_left: float, args, committed: dict[int, dict], release: bool,
              captured: bool = False) -> dict:
    """The next seed of the comparison that grows across lends: the lowest seed not committed yet, trained for the
    series' epochs (baseline and InSub alike), started only when both models fit the time left.

    Time per model: the warm-up (compilation) + epochs x the epoch time + `--evaluation_reserve`; both models plus
    `--data_reserve` (and `--release_reserve` with the release). The epoch time and warm-up are the race's M = 5
    rows (captured ones when `captured`) where it ran (its real epoch, scaled from the race's images to the training
    set's; else its end-to-end rate),
    else `--epoch_s` / `--warmup_s`, else the last measured values (`MEASURED`). `--tiny`: one seed of fixed steps.

    Returns: {"seed", "epochs", "epoch_s", "warmup_s", "needs_s", "seconds_left", "fits", "from"}."""
    seed = next(k for k in range(len(committed) + 1) if k not in committed)
    if args.tiny:  # a check of the path: its steps are fixed
        return {"seed": seed, "epochs": 1, "epoch_s": None, "warmup_s": None, "needs_s": 0.0,
                "seconds_left": round(seconds_left, 1), "fits": True, "from": "--tiny"}
    epochs = series_epochs(committed, args)
    step = "insub-hf M=5 captured" if captured else "insub-hf M=5"  # the race's rows of the step stage 2 trains
    speed = next((r for r in rows if r.get("row") == step and r.get("e2e_samples_s")), None)
    epoch = next((r for r in rows if r.get("row") == f"{step} epoch" and r.get("measured_epoch_s")), None)
    if epoch:
        epoch_s, source = epoch["measured_epoch_s"] * args.train_images / args.race_images, "the race's real epoch"
    elif speed:
        epoch_s, source = args.train_images / speed["e2e_samples_s"], "the race's end-to-end rate"
    elif args.epoch_s:
        epoch_s, source = args.epoch_s, "--epoch_s"
    else:
        epoch_s, source = MEASURED["epoch_s"], f"the last measured epoch ({MEASURED['run']})"
    warmup = (speed or {}).get("warmup_s") or args.warmup_s or MEASURED["warmup_s"]
    needs = (2 * (warmup + epochs * epoch_s + args.evaluation_reserve) + args.data_reserve
             + (args.release_reserve if release else 0.0))
    return {"seed": seed, "epochs": epochs, "epoch_s": round(epoch_s, 3), "warmup_s": round(warmup, 1),
            "needs_s": round(needs, 1), "seconds_left": round(seconds_left, 1), "fits": needs <= seconds_left,
            "from": source}


def seed_record(plan: dict, results: dict, kit: dict) -> dict | None:
    """What a lend keeps of the seed it trained (`seed_<k>.json`, committed to `--seed_folder` by
    `benchmarks/gpu_seeds.py add`): the comparison's results.json with the plan, commit and environment; None when
    the run did not finish both models of the seed."""
    methods = {(row.get("method"), row.get("seed")) for row in results.get("rows", [])}
    if not {("baseline", plan["seed"]), ("insub", plan["seed"])} <= methods:
        return None
    environment = kit.get("environment", {})
    return {"seed": plan["seed"], "epochs": plan["epochs"], "tiny": bool(kit["args"].get("tiny")),
            "commit": kit.get("commit"), "started": kit.get("started"),
            "environment": {k: environment.get(k) for k in ("device", "torch", "cuda", "transformers", "python")},
            "plan": plan, "results": results}


KIT_FOLDER = "docs/runs/gpu_kit"
KIT_FILES = ("kit.json", "summary.md", "run.log")
RUN_LOG_LIMIT = 2 * 2**20  # a longer run.log stays out of git (its numbers are in kit.json)


def add(lend: Path, folder: Path, kits: Path) -> list[Path]:
    """Commits what one lend brought back (`lend`: its $OUT as fetched): the seed files into `folder`, the kit's
    files into `kits/<start time>-<commit>/`. Returns the paths written. Everything is checked before anything is copied."""
    if not lend.is_dir():
        raise SystemExit(f"{lend}: no such folder (give the lend's files_at: the $OUT it brought back).")
    committed = committed_seeds(folder)
    epochs = {record["epochs"] for record in committed.values()}
    new = []
    for path in sorted(lend.glob("seed_*.json")):
        record = json.loads(path.read_text())
        where = f"{path} (seed {record.get('seed')}, {record.get('epochs')} epochs)"
        if record.get("tiny"):
            raise SystemExit(f"{where} is a --tiny dry run: it checks the path and is not a seed of the series.")
        if epochs and record["epochs"] not in epochs:
            raise SystemExit(f"{where}: the series in {folder} trains {epochs.pop()} epochs per model; a seed of "
                             "other epochs belongs to another --seed_folder.")
        target = folder / seed_file_name(record["seed"])
        if target.is_file() and json.loads(target.read_text()) != record:
            raise SystemExit(f"{where}: {target} is committed with other numbers; a committed seed is never "
                             "replaced. Train the next seed, or remove that file by hand if it is wrong.")
        new.append((record, target))
    written = []
    kit_path = lend / "kit.json"
    if kit_path.is_file():
        kit = json.loads(kit_path.read_text())
        stamp = (kit.get("started") or "undated").replace(" UTC", "").replace(" ", "T").replace(":", "")
        target_dir = kits / f"{stamp}-{kit.get('commit') or 'unknown'}"
        target_dir.mkdir(parents=True, exist_ok=True)
        for name in KIT_FILES:
            source = lend / name
            if source.is_file() and (name != "run.log" or source.stat().st_size <= RUN_LOG_LIMIT):
                shutil.copyfile(source, target_dir / name)
                written.append(target_dir / name)
    folder.mkdir(parents=True, exist_ok=True)
    for record, target in new:
        target.write_text(json.dumps(record, indent=1))
        written.append(target)
    written.append(write_table(folder))
    return written


def table(folder: Path) -> str:
    """The series' README: how it is grown, one line per committed seed, the report over every seed."""
    from insub_hf.evaluation.report import markdown_report, paired_differences
    from insub_hf.evaluation.results import ComparisonRow

    seeds = committed_seeds(folder)
    lines = ["# The GPU comparison at scale, seed by seed", "",
             "InSub (M = 5) against the baseline (M = 1) at ResNet-18 scale on the full Fashion-MNIST, the same epochs for",
             "every model and seed. Each lend of a GPU trains the next seed (`benchmarks/gpu_run.py`, stage 2) and its",
             "`seed_<k>.json` (the comparison's results.json, the plan, commit and environment) is committed here by",
             "`python benchmarks/gpu_seeds.py add FILES_AT`, which also rebuilds this page (`gpu_seeds.py table`).", ""]
    if not seeds:
        return "\n".join([*lines, "No seed is committed yet: no GPU has been lent since this series began (the "
                          "30-epoch seeds 0 and 1 of 2026-11-28 are reported in docs/evidence.md; their raw files are "
                          "lost).", ""])
    lines += ["| seed | epochs | device | torch | commit | started |", "|---|---|---|---|---|---|"]
    for seed, record in sorted(seeds.items()):
        env = record.get("environment", {})
        lines.append(f"| {seed} | {record['epochs']} | {env.get('device')} | {env.get('torch')} | "
                     f"{record.get('commit')} | {record.get('started')} |")
    rows = [ComparisonRow.from_dict(row) for _, record in sorted(seeds.items()) for row in record["results"]["rows"]]
    first = next(iter(seeds.values()))["results"]
    devices = sorted({str(record["results"].get("device")) for record in seeds.values()})
    merged = {**first, "device": ", ".join(devices), "paired_differences": paired_differences(rows),
              "wall_seconds": sum(record["results"].get("wall_seconds", 0.0) for record in seeds.values())}
    return "\n".join([*lines, "", "## Every committed seed", "", markdown_report(merged, rows), ""])


def write_table(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "README.md"
    path.write_text(table(folder))
    return path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed_folder", default=SEED_FOLDER, help="The series' committed seeds.")
    parser.add_argument("--kit_folder", default=KIT_FOLDER, help="Where each lend's kit.json and summary.md go.")
    commands = parser.add_subparsers(dest="command", required=True)
    adding = commands.add_parser("add", help="Commit a lend's seed files and kit files, then rebuild the table.")
    adding.add_argument("lend", help="The folder the lend's $OUT came back to (files_at).")
    commands.add_parser("table", help="Rebuild the series' README from the committed seeds.")
    args = parser.parse_args(argv)
    folder, kits = REPO / args.seed_folder, REPO / args.kit_folder
    written = add(Path(args.lend), folder, kits) if args.command == "add" else [write_table(folder)]
    for path in written:
        print(path.relative_to(REPO) if path.is_relative_to(REPO) else path)


if __name__ == "__main__":
    main()

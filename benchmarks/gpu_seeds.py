"""The GPU comparison that grows across lends: commits what a lend brought back and rebuilds the tables of every
committed seed.

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
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_run import SEED_FOLDER, committed_seeds, seed_file_name  # noqa: E402

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

"""The `insub-hf` entry point. It lives outside the `insub_hf` package because importing the package registers the
Auto classes, which loads torch and transformers (~10 s); the command list and an unknown command answer without
that. A command's own `--help` goes through `insub_hf.cli` the first time (its text is then kept: `help_cache_file`),
and the job itself always does."""

from __future__ import annotations

import sys

# command -> (job module, relative to insub_hf, one line of help)
COMMANDS = {
    "demo": ("jobs.demo", "SimCLR pretraining of a baseline and an InSub model on the bundled Fashion-MNIST subset."),
    "compare": ("jobs.compare", "Baseline, SSL-Ensemble, MC Dropout, BatchEnsemble and InSub: calibration, OOD, corruptions, cost."),
    "ablation": ("jobs.ablation", "alpha x lambda at M=5, then M at the best setting, scored on validation data; hinge activity."),
    "mechanism": ("jobs.mechanism", "Per objective: sigma over training with lambda 0 vs the hinge (SimCLR: raw vs cosine mean)."),
    "text": ("jobs.text", "SCD pretraining (baseline and InSub) on a BERT-style encoder, then SentEval-style transfer."),
    "text-candidates": ("jobs.text_candidates", "Ways to pretrain InSub on MiniLM and to read its uncertainty, chosen on validation data."),
    "genomics": ("jobs.genomics", "Self-GenomeNet pretraining (baseline and InSub) on DNA, then calibrated sequence classification."),
    "release": ("release.build", "One recipe (image, text, dna) from training to a published model; `release publish`/`metrics` upload what is built."),
    "score": ("jobs.score", "`insub-hf score MODEL --dataset DATA`: any image or text encoder by repo id or path: probe, calibration, OOD by MSP, k-NN, the model's uncertainty."),
    "hub": ("jobs.hub", "A saved model and its evaluation results -> a checked Hub repo folder with a generated card; --push."),
}


def version() -> str:
    """The installed package's version, read without importing it (the package loads torch)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed
    from pathlib import Path

    try:
        return installed("insub-hf")
    except PackageNotFoundError:  # a checkout on sys.path, not installed: its version file
        text = (Path(__file__).resolve().parent / "insub_hf" / "version.py").read_text()
        return text.split("__version__ = ", 1)[1].split()[0].strip("\"'")


def help_cache_file(argv: list[str]):
    """Where the `--help` text of `insub-hf ARGV` is kept once printed (None when ARGV asks for no help): under
    `$INSUB_HF_CACHE` (default `~/.cache/insub-hf`), named by a hash of ARGV, the installed insub-hf and
    transformers versions and the size and time of every file of the package, so that any change prints it afresh.
    Building a job's parser imports torch and transformers (seconds); a kept text needs neither."""
    import hashlib
    import importlib.metadata
    import importlib.util
    import os
    from pathlib import Path

    if not argv or not any(arg in ("-h", "--help") for arg in argv[1:]):
        return None
    spec = importlib.util.find_spec("insub_hf")  # found, not imported
    key = [*argv, version()]
    try:
        key.append(importlib.metadata.version("transformers"))
    except importlib.metadata.PackageNotFoundError:
        return None
    for folder in spec.submodule_search_locations or []:
        for path in sorted(Path(folder).rglob("*.py")):
            stat = path.stat()
            key.append(f"{path}:{stat.st_size}:{stat.st_mtime_ns}")
    root = Path(os.environ.get("INSUB_HF_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                / "insub-hf")
    return root / "help" / (hashlib.sha256("\n".join(key).encode()).hexdigest()[:24] + ".txt")


def keep_help(argv: list[str], text: str) -> None:
    """Keeps the `--help` text of `insub-hf ARGV` for the next time (`help_cache_file`); a cache that cannot be
    written is skipped."""
    import os

    path = help_cache_file(argv)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        partial.write_text(text)
        partial.replace(path)
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    """Runs `insub-hf COMMAND [arguments]`; returns the exit status (2: no such command). `--help` prints and exits
    with status 0, as argparse does."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["--version"], ["-V"]):
        print(f"insub-hf {version()}")
        return 0
    if argv and argv[0] in COMMANDS:
        kept = help_cache_file(argv)
        if kept is not None and kept.is_file():
            print(kept.read_text(), end="")
            raise SystemExit(0)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        usage = "\n".join(f"  {name:<9} {text}" for name, (_, text) in COMMANDS.items())
        print(f"usage: insub-hf COMMAND [--help] | --version\n\ncommands:\n{usage}")
        if argv and argv[0] not in ("-h", "--help"):
            print(f"\ninsub-hf: unknown command {argv[0]!r}; the commands are {', '.join(COMMANDS)}.", file=sys.stderr)
            return 2
        return 0
    from insub_hf.cli import run_command

    module, description = COMMANDS[argv[0]]
    return run_command(module, argv[0], argv[1:], description, on_help=lambda text: keep_help(argv, text))


if __name__ == "__main__":
    raise SystemExit(main())

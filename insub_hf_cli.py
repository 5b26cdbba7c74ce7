"""The `insub-hf` entry point. It lives outside the `insub_hf` package because importing the package registers the
Auto classes, which loads torch and transformers (~10 s); the command list and an unknown command answer without
that. A command's own `--help` and the job itself go through `insub_hf.cli`."""

from __future__ import annotations

import sys

# command -> (job module in insub_hf.jobs, one line of help)
COMMANDS = {
    "demo": ("demo", "SimCLR pretraining of a baseline and an InSub model on the bundled Fashion-MNIST subset."),
    "compare": ("compare", "Baseline, SSL-Ensemble, MC Dropout, BatchEnsemble and InSub: calibration, OOD, corruptions, cost."),
    "ablation": ("ablation", "alpha x lambda at M=5, then M at the best setting, scored on validation data; hinge activity."),
    "mechanism": ("mechanism", "Per objective: sigma over training with lambda 0 vs the hinge (SimCLR: raw vs cosine mean)."),
    "text": ("text", "SCD pretraining (baseline and InSub) on a BERT-style encoder, then SentEval-style transfer."),
    "text-candidates": ("text_candidates", "Ways to pretrain InSub on MiniLM and to read its uncertainty, chosen on validation data."),
    "genomics": ("genomics", "Self-GenomeNet pretraining (baseline and InSub) on DNA, then calibrated sequence classification."),
    "release": ("release", "One recipe (image, text, dna) from training to a published model: runs, detector, Hub folder, card."),
    "hub": ("hub", "A saved model and its evaluation results -> a checked Hub repo folder with a generated card; --push."),
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


def main(argv: list[str] | None = None) -> int:
    """Runs `insub-hf COMMAND [arguments]`; returns the exit status (2: no such command)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["--version"], ["-V"]):
        print(f"insub-hf {version()}")
        return 0
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        usage = "\n".join(f"  {name:<9} {text}" for name, (_, text) in COMMANDS.items())
        print(f"usage: insub-hf COMMAND [--help] | --version\n\ncommands:\n{usage}")
        if argv and argv[0] not in ("-h", "--help"):
            print(f"\ninsub-hf: unknown command {argv[0]!r}; the commands are {', '.join(COMMANDS)}.", file=sys.stderr)
            return 2
        return 0
    from insub_hf.cli import run_command

    module, description = COMMANDS[argv[0]]
    return run_command(module, argv[0], argv[1:], description)


if __name__ == "__main__":
    raise SystemExit(main())

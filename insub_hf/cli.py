"""The `insub-hf` command line: each command is a job module of `insub_hf.jobs` with its argument groups and `run`."""

from __future__ import annotations

import importlib
import re
import sys

from transformers import HfArgumentParser

# command -> (job module, one line of help)
COMMANDS = {
    "demo": ("demo", "SimCLR pretraining of a baseline and an InSub model on the bundled Fashion-MNIST subset."),
    "compare": ("compare", "Baseline, SSL-Ensemble, MC Dropout, BatchEnsemble and InSub: calibration, OOD, corruptions, cost."),
    "ablation": ("ablation", "alpha at M=5, then M at the best alpha, scored on validation data; hinge activity and sigma curves."),
    "mechanism": ("mechanism", "Per objective: sigma over training with lambda 0 vs the hinge (SimCLR: raw vs cosine mean)."),
    "text": ("text", "SCD pretraining (baseline and InSub) on a BERT-style encoder, then SentEval-style transfer."),
    "genomics": ("genomics", "Self-GenomeNet pretraining (baseline and InSub) on DNA, then calibrated sequence classification."),
    "hub": ("hub", "A saved model and its evaluation results -> a checked Hub repo folder with a generated card; --push."),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        usage = "\n".join(f"  {name:<8} {text}" for name, (_, text) in COMMANDS.items())
        print(f"usage: insub-hf COMMAND [--help]\n\ncommands:\n{usage}")
        return 0 if argv[:1] in ([], ["-h"], ["--help"]) else 2
    job = importlib.import_module(f"insub_hf.jobs.{COMMANDS[argv[0]][0]}")
    parser = job_parser(argv[0], job.ARGUMENT_GROUPS)
    job.run(*parser.parse_args_into_dataclasses(args=argv[1:]))
    return 0


def job_parser(command: str, groups: tuple):
    """The `HfArgumentParser` of a job's argument groups. argparse reads `%` in a help text as a format directive,
    so a literal one ("85%") is escaped here, once for every job."""
    parser = HfArgumentParser(groups, prog=f"insub-hf {command}")
    for action in parser._actions:  # argparse keeps no public list of its arguments
        if action.help:
            action.help = re.sub(r"(?<!%)%(?![(%])", "%%", action.help)
    return parser


if __name__ == "__main__":
    raise SystemExit(main())

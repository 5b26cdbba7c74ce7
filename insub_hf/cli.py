"""Running one `insub-hf` command: each is a job module of `insub_hf.jobs` with its argument groups and `run`. The
entry point and the command list are `insub_hf_cli` (outside the package, so that listing the commands loads no
torch)."""

from __future__ import annotations

import importlib
import re

from transformers import HfArgumentParser


def run_command(module: str, command: str, argv: list[str]) -> int:
    """Parses `argv` with the job module's argument groups and runs it; returns 0 (argparse exits on bad input)."""
    job = importlib.import_module(f"insub_hf.jobs.{module}")
    if hasattr(job, "select"):  # a command with a sub-command: `insub-hf release image ...`
        job, command, argv = job.select(command, argv)
    parser = job_parser(command, job.ARGUMENT_GROUPS, getattr(job, "TRAINING_DEFAULTS", None))
    *groups, unknown = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    if unknown:  # argparse's own answer: the usage line and one line of error, exit status 2
        parser.error(f"unrecognized arguments: {' '.join(unknown)} (`insub-hf {command} --help` lists them)")
    job.run(*groups)
    return 0


def job_parser(command: str, groups: tuple, training_defaults: dict | None = None):
    """The `HfArgumentParser` of a job's argument groups; a training job's `InSubTrainingArguments` flags start from
    its recipe's `training_defaults` (e.g. `--learning_rate` 3e-3 for the image jobs). argparse reads `%` in a help
    text as a format directive, so a literal one ("85%") is escaped here, once for every job."""
    # no abbreviations: `--num_head 3` must not quietly set --num_heads
    parser = HfArgumentParser(groups, prog=f"insub-hf {command}", allow_abbrev=False)
    if training_defaults:
        parser.set_defaults(**training_defaults)
    for action in parser._actions:  # argparse keeps no public list of its arguments
        if action.help:
            action.help = re.sub(r"(?<!%)%(?![(%])", "%%", action.help)
    return parser


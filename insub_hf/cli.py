"""Running one `insub-hf` command: each is a job module (of `insub_hf.jobs`, or `insub_hf.release.build`) with its
argument groups and `run`. The
entry point and the command list are `insub_hf_cli` (outside the package, so that listing the commands loads no
torch).

The command line answers as `accelerate` and `hf` do: a bad flag, value or path is one line on stderr after the
usage line, with exit status 2 (set INSUB_HF_TRACEBACK=1 to see the traceback instead); every flag sits in its group
(model and data, training, evaluation, hub), closed sets are argparse `choices`, and booleans read one way
(`--flag` alone is true, `--flag false` turns it off)."""

from __future__ import annotations

import argparse
import importlib
import os
import re

from transformers import HfArgumentParser
from transformers.hf_argparser import string_to_bool

# What a job raises for bad input (a value, a path, a missing extra): answered in one line, not a traceback
USER_ERRORS = (ValueError, OSError, ImportError)
TRACEBACK_VARIABLE = "INSUB_HF_TRACEBACK"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's defaults in the help, except an unset one: "(default: None)" beside a help text that says what
    happens then is noise."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is argparse.SUPPRESS:
            return action.help or ""
        return super()._get_help_string(action)


def one_line(error: BaseException) -> str:
    """An exception's message on one line (whitespace runs, newlines included, become one space)."""
    return " ".join(str(error).split()) or type(error).__name__


def usage_error(command: str, message: str, usage: str = "[options]") -> None:
    """argparse's answer to a bad command line before a job's parser exists: the usage line, one line of error,
    exit status 2."""
    argparse.ArgumentParser(prog=f"insub-hf {command}", usage=f"insub-hf {command} {usage}").error(message)


def run_command(module: str, command: str, argv: list[str], description: str | None = None,
                on_help=None) -> int:
    """Parses `argv` with the job module's argument groups and runs it; returns 0. Bad input (a flag argparse does
    not know, a value or path a check refuses, anything the job raises as `USER_ERRORS`) ends with the usage line and
    one line of error on stderr, exit status 2. `--help` prints the help (given to `on_help` first) and exits 0."""
    job = importlib.import_module(f"insub_hf.{module}")
    if hasattr(job, "select"):  # a command with a sub-command: `insub-hf release image ...`
        try:
            job, command, argv = job.select(command, argv)
        except ValueError as error:
            usage_error(command, one_line(error), "RECIPE [options]")
    parser = job_parser(command, job.ARGUMENT_GROUPS, getattr(job, "TRAINING_DEFAULTS", None), description)
    if any(arg in ("-h", "--help") for arg in argv):  # argparse's answer, handed to `on_help` (which keeps it)
        text = parser.format_help()
        if on_help is not None:
            on_help(text)
        print(text, end="")
        raise SystemExit(0)
    try:
        *groups, unknown = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
        if unknown:  # argparse's own answer: the usage line and one line of error, exit status 2
            parser.error(f"unrecognized arguments: {' '.join(unknown)} (`insub-hf {command} --help` lists them)")
        job.run(*groups)
    except USER_ERRORS as error:
        if os.environ.get(TRACEBACK_VARIABLE):
            raise
        parser.error(f"{one_line(error)} ({TRACEBACK_VARIABLE}=1 shows the traceback)")
    return 0


def job_parser(command: str, groups: tuple, training_defaults: dict | None = None, description: str | None = None):
    """The `HfArgumentParser` of a job's argument groups (each dataclass's `_argument_group_name` titles its group);
    a training job's `InSubTrainingArguments` flags start from its recipe's `training_defaults` (e.g.
    `--learning_rate` 3e-3 for the image jobs). argparse reads `%` in a help text as a format directive, so a literal
    one ("85%") is escaped here, once for every job; booleans all read `--flag [{true,false}]` (transformers leaves
    an optional one, `--bf16`, needing its value)."""
    # no abbreviations: `--num_head 3` must not quietly set --num_heads
    parser = HfArgumentParser(groups, prog=f"insub-hf {command}", usage=f"insub-hf {command} [options]",
                              description=description, allow_abbrev=False, formatter_class=HelpFormatter)
    if training_defaults:
        parser.set_defaults(**training_defaults)
    for action in parser._actions:  # argparse keeps no public list of its arguments
        if action.help:
            action.help = re.sub(r"(?<!%)%(?![(%])", "%%", action.help)
        if action.required:
            action.help = f"Required. {action.help or ''}"
        if action.type is string_to_bool:
            action.nargs, action.const, action.metavar = "?", True, "{true,false}"
    return parser

"""Argument checks that raise one kind of message: the field, the value, and what is allowed."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import MISSING, field, fields
from pathlib import Path
from typing import Any


def looks_like_a_path(name: str) -> bool:
    """A name that can only be a local path: absolute, relative with ./ ../ ~, or with more than one '/'."""
    return name.startswith(("/", "./", "../", "~")) or "\\" in name or name.count("/") > 1


def check_choice(field: str, value: Any, allowed: Iterable[Any]) -> None:
    """Raises ValueError unless `value` is one of `allowed`."""
    allowed = tuple(allowed)
    if value not in allowed:
        raise ValueError(f"{field} must be one of {list(allowed)}, got {value!r}.")


def check_range(
    field: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    integer: bool = False,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
) -> None:
    """Raises ValueError unless `value` is a finite number (an int when `integer`) inside [low, high]."""
    kind = "an integer" if integer else "a number"
    bounds = []
    if low is not None:
        bounds.append(f"{'>=' if low_inclusive else '>'} {low}")
    if high is not None:
        bounds.append(f"{'<=' if high_inclusive else '<'} {high}")
    allowed = f"{kind} {' and '.join(bounds)}".strip()
    is_number = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not is_number or not math.isfinite(value):
        raise ValueError(f"{field} must be {allowed}, got {value!r}.")
    too_low = low is not None and (value < low if low_inclusive else value <= low)
    too_high = high is not None and (value > high if high_inclusive else value >= high)
    if too_low or too_high:
        raise ValueError(f"{field} must be {allowed}, got {value!r}.")


def checked(
    default: Any = MISSING,
    help: str = "",
    *,
    default_factory: Any = MISSING,
    low: float | None = None,
    high: float | None = None,
    integer: bool = False,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
    choices: Iterable[Any] | None = None,
    optional: bool = False,
    **metadata: Any,
):
    """A dataclass `field` whose value (each element, for a list) `check_fields` checks: a number in [low, high]
    (`check_range`) or one of `choices`; `optional` lets None through. `help` and other `metadata` are what
    `HfArgumentParser` reads."""
    check = dict(low=low, high=high, integer=integer, low_inclusive=low_inclusive, high_inclusive=high_inclusive)
    rule = {"choices": tuple(choices)} if choices is not None else {"range": check}
    rule["optional"] = optional
    if choices is not None:  # the command line lists them and refuses others itself (argparse `choices`)
        metadata = {"choices": tuple(choices), **metadata}
    made = field(default=default, default_factory=default_factory, metadata={"help": help, **metadata})
    _RULES[id(made)] = (made, rule)
    return made


# id(Field) -> (the Field, its rule). Not in the field's metadata: HfArgumentParser hands every metadata key to
# argparse. The Field is kept alive here, so its id is never reused.
_RULES: dict[int, tuple[Any, dict]] = {}


def field_rule(f: Any) -> dict | None:
    """The `checked` rule of a dataclass field (None for a plain field)."""
    entry = _RULES.get(id(f))
    return entry[1] if entry is not None and entry[0] is f else None


def check_fields(arguments: Any) -> None:
    """Checks every `checked` field of a dataclass instance (a list: each element, and no element twice); messages
    name `ClassName.field`."""
    for f in fields(arguments):
        rule = field_rule(f)
        if rule is None:
            continue
        value = getattr(arguments, f.name)
        name = f"{type(arguments).__name__}.{f.name}"
        if value is None and rule["optional"]:
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        repeated = sorted({repr(v) for i, v in enumerate(values) if v in values[:i]})
        if repeated:  # a repeated seed or setting would count one run twice in a table
            raise ValueError(f"{name} lists {', '.join(repeated)} more than once, got {list(values)!r}; give each once.")
        for item in values:
            if "choices" in rule:
                check_choice(name, item, rule["choices"])
            else:
                check_range(name, item, **rule["range"])


# What a `path_field` must name: an existing file, an existing folder, or a saved model's folder (with config.json)
PATH_KINDS = ("file", "folder", "model")
_PATHS: dict[int, tuple[Any, str]] = {}


def path_field(default: Any = MISSING, help: str = "", *, kind: str = "file", **metadata: Any):
    """A dataclass field naming a local path of `kind` (`PATH_KINDS`), which `check_paths` checks before any work
    (None passes: the job's default applies)."""
    check_choice("path_field kind", kind, PATH_KINDS)
    made = field(default=default, metadata={"help": help, **metadata})
    _PATHS[id(made)] = (made, kind)
    return made


def check_path(name: str, value: str | Path, kind: str) -> None:
    """Raises FileNotFoundError / NotADirectoryError / IsADirectoryError, naming the flag and the path, unless `value`
    is an existing file, folder, or a model folder holding config.json (where it does not, a subfolder that does is
    suggested: a run folder given for its `model/`)."""
    path = Path(value)
    if not path.exists():
        raise FileNotFoundError(f"{name} {str(value)!r}: no such {'file' if kind == 'file' else 'folder'}.")
    if kind == "file" and path.is_dir():
        raise IsADirectoryError(f"{name} {str(value)!r} is a folder; give a file.")
    if kind != "file" and not path.is_dir():
        raise NotADirectoryError(f"{name} {str(value)!r} is a file; give a folder.")
    if kind == "model" and not (path / "config.json").is_file():
        inside = sorted(str(c.parent) for c in [*path.glob("*/config.json"), *path.glob("*/model/config.json")])
        hint = f"; did you mean {' or '.join(repr(p) for p in inside[:3])}?" if inside else \
            " (a save_pretrained folder has one)."
        raise FileNotFoundError(f"{name} {str(value)!r} holds no config.json{hint}")


def check_paths(arguments: Any) -> None:
    """Checks every `path_field` of a dataclass instance (`check_path`), naming it as its command-line flag."""
    for f in fields(arguments):
        entry = _PATHS.get(id(f))
        if entry is not None and entry[0] is f and getattr(arguments, f.name) is not None:
            check_path(f"--{f.name}", getattr(arguments, f.name), entry[1])


class CheckedArguments:
    """Mixin for the argument dataclasses of the jobs: every `checked` field and every `path_field` is checked when
    the object is built (by `HfArgumentParser` or by hand), so a bad value or a missing file is refused before any
    work starts."""

    def __post_init__(self) -> None:
        check_fields(self)
        check_paths(self)

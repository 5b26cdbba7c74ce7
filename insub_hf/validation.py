"""Argument checks that raise one kind of message: the field, the value, and what is allowed."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import MISSING, field, fields
from typing import Any


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


class CheckedArguments:
    """Mixin for the argument dataclasses of the jobs: every `checked` field is checked when the object is built
    (by `HfArgumentParser` or by hand), so a bad value is refused before any work starts."""

    def __post_init__(self) -> None:
        check_fields(self)

"""Argument checks that raise one kind of message: the field, the value, and what is allowed."""

from __future__ import annotations

import math
from collections.abc import Iterable
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

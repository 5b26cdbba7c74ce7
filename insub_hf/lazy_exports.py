"""Lazy public names for a package (PEP 562): a name's module is imported when the name is first used."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable


def lazy_exports(
    package: str, exports: dict[str, tuple[str, ...]]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package` for `exports`, `{relative module: its public names}`.

    Usage, in a package's `__init__.py`: `__getattr__, __dir__ = lazy_exports(__name__, {".module": ("Name",)})`.
    The value is cached in the package on first use, so later lookups are plain attribute reads.
    """
    modules = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> object:
        if name not in modules:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(modules[name], package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(modules) | set(vars(sys.modules[package])))

    return __getattr__, __dir__

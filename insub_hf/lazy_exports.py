"""Lazy public names for a package (PEP 562): a name's module is imported when the name is first used; and a
module's former place, answered with the module itself when first imported there."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
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


class _ModuleAliases(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers an import of `package.old` with the module `package.new` itself, imported then (not before)."""

    def __init__(self, package: str, aliases: dict[str, str]):
        self.package = package
        self.targets = {f"{package}.{old}": f"{package}.{new}" for old, new in aliases.items()}

    def find_spec(self, fullname, path=None, target=None):
        return importlib.util.spec_from_loader(fullname, self) if fullname in self.targets else None

    def create_module(self, spec):
        return importlib.import_module(self.targets[spec.name])  # its own name and spec are kept

    def exec_module(self, module) -> None:
        """The module ran when it was imported under its own name."""


def module_aliases(package: str, aliases: dict[str, str]) -> None:
    """Makes `package.old` import as the module `package.new` for each `{old: new}` of `aliases` (relative names),
    so that code importing a module where it stood before still gets the one module, loaded only when asked for.
    Only names under `package` are answered; installing twice keeps one finder."""
    if not any(isinstance(f, _ModuleAliases) and f.package == package for f in sys.meta_path):
        sys.meta_path.append(_ModuleAliases(package, aliases))

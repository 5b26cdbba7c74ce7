"""Files that other installed packages ship (models, corpora, OOD images), found without importing those packages."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def installed_package_dir(name: str) -> Path | None:
    """The folder of the installed package `name`, or None when it is not installed.

    Found through its import spec, without running its `__init__` (which may be heavy or have side effects).
    """
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def installed_package_file(name: str, *parts: str, needed_for: str) -> Path:
    """The path `parts` inside the installed package `name`; raises ImportError saying what needs it and how to
    install it when the package is missing.

    Args:
        needed_for: what needs the file and how to get it, e.g. `"encoder='minilm' needs ... (pip install ...)"`.
    """
    folder = installed_package_dir(name)
    if folder is None:
        raise ImportError(f"{needed_for} The package {name!r} is not installed.")
    return folder.joinpath(*parts)

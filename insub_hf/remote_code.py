"""The package's model code as flat files beside a checkpoint, so that it loads with `trust_remote_code=True` where
insub-hf is not installed.

transformers copies a custom model's module and the modules it imports relatively from the *same folder* only; the
package has subpackages (`encoders/`, `losses/`, ...). So the modules the model classes need are written here under
flat names (`insub_hf/losses/ntxent.py` -> `losses_ntxent.py`, a package's `__init__.py` -> its own name) and each
relative import is rewritten to point at the flat name. The code itself is the package's, byte for byte otherwise.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

PACKAGE = "insub_hf"
PACKAGE_DIR = Path(__file__).resolve().parent

# What the Auto classes load, per auto class: `module.Class` of the flat files.
AUTO_MAP = {
    "AutoConfig": "configuration_insub.InSubConfig",
    "AutoModel": "modeling_insub.InSubModel",
    "AutoModelForPreTraining": "modeling_insub.InSubForPreTraining",
    "AutoModelForSequenceClassification": "modeling_classification.InSubForSequenceClassification",
    "AutoModelForImageClassification": "modeling_classification.InSubForImageClassification",
}
ROOT_MODULES = ("configuration_insub", "modeling_insub", "modeling_classification")
REGISTRY = f"{PACKAGE}.objectives"  # the objectives' registry: the flat copy lists the model's objective only
IMAGE_PROCESSOR = ("image_processing_insub", "InSubImageProcessor")


def _source_file(module: str) -> Path:
    """`insub_hf.losses.ntxent` -> its file (a package -> its `__init__.py`)."""
    path = PACKAGE_DIR.joinpath(*module.split(".")[1:])
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def flat_name(module: str) -> str:
    """`insub_hf.losses.ntxent` -> `losses_ntxent`."""
    return "_".join(module.split(".")[1:])


def _resolve(module: str, node: ast.ImportFrom) -> str:
    """The package module a relative `from .x import ...` in `module` reads (`x`, resolved against the level)."""
    is_package = _source_file(module).name == "__init__.py"
    parts = module.split(".") if is_package else module.split(".")[:-1]
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def relative_imports(module: str, source: str | None = None) -> list[tuple[ast.ImportFrom, str]]:
    """Every relative import in `module` (module level or inside functions; of `source` when given, else of its
    file), with the package module it reads."""
    tree = ast.parse(source if source is not None else _source_file(module).read_text(encoding="utf-8"))
    return [(node, _resolve(module, node)) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level]


def registry_source(objective: str) -> str:
    """The objectives' registry (`insub_hf/objectives/__init__.py`) listing `objective` only."""
    from .objectives import OBJECTIVES

    cls = OBJECTIVES[objective]
    module = cls.__module__.rsplit(".", 1)[-1]
    return (
        '"""The objectives\' registry, as insub-hf wrote it for this model: its own objective only."""\n\n'
        "from __future__ import annotations\n\n"
        "from .base import Objective, ObjectiveConfig, ObjectiveOutput\n"
        f"from .{module} import {cls.__name__}\n\n"
        f"OBJECTIVES: dict[str, type[Objective]] = {{{cls.__name__}.name: {cls.__name__}}}\n"
    )


def module_source(module: str, objective: str | None = None) -> str:
    """A package module's source; the objectives' registry trimmed to `objective` when given."""
    if module == REGISTRY and objective is not None:
        return registry_source(objective)
    return _source_file(module).read_text(encoding="utf-8")


def required_modules(objective: str | None = None, extra_roots: tuple[str, ...] = ()) -> list[str]:
    """Every package module the config and model classes (and `extra_roots`, e.g. the image processor's module)
    import, transitively (sorted); with `objective`, only that objective's modules of the registry's (the others are
    never built for the model)."""
    seen: set[str] = set()
    todo = [f"{PACKAGE}.{name}" for name in (*ROOT_MODULES, *extra_roots)]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo.extend(target for _, target in relative_imports(module, module_source(module, objective)))
    return sorted(seen)


def flat_source(module: str, objective: str | None = None) -> str:
    """The module's source (see `module_source`) with each relative import rewritten to `from .<flat name> import`."""
    source = module_source(module, objective)
    lines = source.splitlines(keepends=True)
    head = re.compile(r"from\s+\.+[\w.]*\s+import")
    for node, target in relative_imports(module, source):
        if node.module is None:
            raise RuntimeError(
                f"remote code: `from . import ...` on line {node.lineno} of {module} has no flat equivalent; import "
                "names from the module instead (`from .module import name`)."
            )
        line = node.lineno - 1
        lines[line], count = head.subn(f"from .{flat_name(target)} import", lines[line], count=1)
        if count != 1:
            raise RuntimeError(f"remote code: could not rewrite the import on line {node.lineno} of {module}.")
    return "".join(lines)


def write_remote_code(folder: str | Path) -> list[Path]:
    """Writes the flat modules the model's objective needs into `folder` and the `auto_map` into its `config.json`
    (which must exist); and, when the folder holds an `InSubImageProcessor` (`preprocessor_config.json`), its module
    and `auto_map` too.

    Returns the written module files. The folder then loads with `AutoModel.from_pretrained(folder,
    trust_remote_code=True)` (and the other Auto classes of `AUTO_MAP`, and `AutoImageProcessor`) without insub-hf.
    """
    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"write_remote_code: {folder} has no config.json; save the model there first.")
    config = json.loads(config_path.read_text(encoding="utf-8"))
    objective = config.get("objective", "simclr")
    processor_path = folder / "preprocessor_config.json"
    processor = json.loads(processor_path.read_text(encoding="utf-8")) if processor_path.is_file() else {}
    with_processor = processor.get("image_processor_type") == IMAGE_PROCESSOR[1]
    modules = required_modules(objective, (IMAGE_PROCESSOR[0],) if with_processor else ())
    if with_processor:
        processor["auto_map"] = {"AutoImageProcessor": ".".join(IMAGE_PROCESSOR)}
        processor_path.write_text(json.dumps(processor, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    names = {module: flat_name(module) for module in modules}
    if len(set(names.values())) != len(names):
        raise RuntimeError(f"remote code: two package modules flatten to the same file name: {sorted(names.values())}")
    written = []
    for module, name in names.items():
        path = folder / f"{name}.py"
        path.write_text(flat_source(module, objective), encoding="utf-8")
        written.append(path)
    config["auto_map"] = dict(AUTO_MAP)
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return written

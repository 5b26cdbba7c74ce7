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
# The image processor: the torchvision class, and the PIL class that AutoImageProcessor falls back to without torchvision
IMAGE_PROCESSORS = {
    "torchvision": ("image_processing_insub", "InSubImageProcessor"),
    "pil": ("image_processing_pil_insub", "InSubImageProcessorPil"),
}


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


def _imports(classes, package: str) -> str:
    """`from .module import A, B` lines for `classes`, relative to the package `package` (sorted, one per module)."""
    by_module: dict[str, set[str]] = {}
    for cls in classes:
        by_module.setdefault(cls.__module__.removeprefix(package + "."), set()).add(cls.__name__)
    return "".join(f"from .{module} import {', '.join(sorted(names))}\n" for module, names in sorted(by_module.items()))


def objectives_registry_source(config: dict) -> str:
    """The objectives' registry (`insub_hf/objectives/__init__.py`) listing the model's objective only."""
    from .objectives import OBJECTIVES

    cls = OBJECTIVES[config.get("objective", "simclr")]
    return (
        '"""The objectives\' registry, as insub-hf wrote it for this model: its own objective only."""\n\n'
        "from __future__ import annotations\n\n"
        "from .base import Objective, ObjectiveConfig, ObjectiveOutput\n"
        + _imports([cls], f"{PACKAGE}.objectives")
        + f"\nOBJECTIVES: dict[str, type[Objective]] = {{{cls.__name__}.name: {cls.__name__}}}\n"
    )


def encoder_registry_source(config: dict) -> str:
    """The encoder families' registry (`insub_hf/encoders/registry.py`) listing the model's family only: its own
    encoder model (if it is one of the package's), the adapter for what it reads, timm and BatchEnsemble only when the
    config uses them."""
    from .encoders import registry
    from .encoders.build import encoder_model_class

    encoder_type = (config.get("encoder_config") or {}).get("model_type")
    own = [pair for pair in registry.OWN_ENCODERS if pair[0].model_type == encoder_type]
    adapters = []
    if encoder_type is not None:
        adapters = [registry.ADAPTERS[encoder_model_class(encoder_type).main_input_name]]
    timm = registry.TIMM_ENCODER if config.get("timm_model_name") else None
    batch_ensemble = registry.BATCH_ENSEMBLE if config.get("batch_ensemble_size", 1) > 1 else None
    classes = [c for pair in own for c in pair] + adapters + [c for c in (timm, batch_ensemble) if c is not None]
    pairs = "".join(f"({c.__name__}, {m.__name__}), " for c, m in own)
    return (
        '"""The encoder families\' registry, as insub-hf wrote it for this model: its own family only."""\n\n'
        "from __future__ import annotations\n\n"
        "from .base import register_own_encoders\n"
        + _imports(classes, f"{PACKAGE}.encoders")
        + f"\nOWN_ENCODERS = ({pairs.rstrip()})\n"
        + "ADAPTERS = {" + ", ".join(f"{a.__name__}.main_input_name: {a.__name__}" for a in adapters) + "}\n"
        + f"TIMM_ENCODER = {timm.__name__ if timm else None}\n"
        + f"BATCH_ENSEMBLE = {batch_ensemble.__name__ if batch_ensemble else None}\n\n"
        + "register_own_encoders(OWN_ENCODERS)\n"
    )


# The registries a repo's copy lists its own model's entries of (from its config.json)
REGISTRIES = {f"{PACKAGE}.objectives": objectives_registry_source,
              f"{PACKAGE}.encoders.registry": encoder_registry_source}


def module_source(module: str, config: dict | None = None) -> str:
    """A package module's source; a registry (`REGISTRIES`) trimmed to the model of `config` (a config.json's
    dict) when given."""
    if module in REGISTRIES and config is not None:
        return REGISTRIES[module](config)
    return _source_file(module).read_text(encoding="utf-8")


def required_modules(config: dict | None = None, extra_roots: tuple[str, ...] = ()) -> list[str]:
    """Every package module the config and model classes (and `extra_roots`, e.g. the image processor's modules)
    import, transitively (sorted); with `config` (a config.json's dict), the registries list that model's objective
    and encoder family only (the others are never built for it)."""
    seen: set[str] = set()
    todo = [f"{PACKAGE}.{name}" for name in (*ROOT_MODULES, *extra_roots)]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo.extend(target for _, target in relative_imports(module, module_source(module, config)))
    return sorted(seen)


def flat_source(module: str, config: dict | None = None) -> str:
    """The module's source (see `module_source`) with each relative import rewritten to `from .<flat name> import`."""
    source = module_source(module, config)
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
    """Writes the flat modules the model needs into `folder` (its objective and encoder family only) and the
    `auto_map` into its `config.json` (which must exist); and, when the folder holds an `InSubImageProcessor`
    (`preprocessor_config.json`), the processor's modules and `auto_map` too: the torchvision class, and the PIL class
    that `AutoImageProcessor` takes where torchvision is not installed.

    Returns the written module files. The folder then loads with `AutoModel.from_pretrained(folder,
    trust_remote_code=True)` (and the other Auto classes of `AUTO_MAP`, and `AutoImageProcessor`) without insub-hf.
    """
    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"write_remote_code: {folder} has no config.json; save the model there first.")
    config = json.loads(config_path.read_text(encoding="utf-8"))
    processor_path = folder / "preprocessor_config.json"
    processor = json.loads(processor_path.read_text(encoding="utf-8")) if processor_path.is_file() else {}
    with_processor = processor.get("image_processor_type") == IMAGE_PROCESSORS["torchvision"][1]
    extra = tuple(module for module, _ in IMAGE_PROCESSORS.values()) if with_processor else ()
    modules = required_modules(config, extra)
    if with_processor:
        processor["auto_map"] = {"AutoImageProcessor": {
            backend: ".".join(target) for backend, target in IMAGE_PROCESSORS.items()
        }}
        processor_path.write_text(json.dumps(processor, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    names = {module: flat_name(module) for module in modules}
    if len(set(names.values())) != len(names):
        raise RuntimeError(f"remote code: two package modules flatten to the same file name: {sorted(names.values())}")
    written = []
    for module, name in names.items():
        path = folder / f"{name}.py"
        path.write_text(flat_source(module, config), encoding="utf-8")
        written.append(path)
    config["auto_map"] = dict(AUTO_MAP)
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return written

"""The package's layering: no import cycle, no import that runs up the layers, and light imports stay light.

Layers, bottom-up (a module may import its own layer and the ones below):
core (validation, distributed, checkpointing, compat, recipes, heads, losses/, encoders/, data/) <- objectives/ <- configuration and
Hub tools <- models <- evaluation (reads checkpoints) <- trainer <- jobs/ (the commands, the experiment runner, the
comparison) <- release/ (a recipe from training to a Hub folder, and its upload) <- cli. The package root only hands out
names; no module of the package imports it.
"""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from insub_hf.bundling import relative_imports

PACKAGE = Path(__file__).resolve().parents[1] / "insub_hf"

LAYERS = [  # (rank, module prefixes)
    (0, ["validation", "lazy_exports", "bundling", "compat", "version", "distributed", "checkpointing", "checksums",
         "processing.image_range", "uncertainty", "recipes", "model.heads", "losses", "encoders", "data",
         "processing.image_processing_insub", "processing.image_processing_pil_insub"]),
    (1, ["objectives"]),
    (2, ["model.configuration_insub", "model.label_settings", "model.model_files", "hub", "processing.pipelines"]),
    (3, ["model.modeling_insub", "model.modeling_outputs", "model.modeling_classification", "model", "processing"]),
    (4, ["evaluation"]),
    (5, ["training"]),
    (6, ["jobs"]),
    (7, ["release"]),
    (8, ["cli"]),
]


def rank(module: str) -> int:
    """`losses.ntxent` -> the rank of its layer."""
    for value, prefixes in LAYERS:
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return value
    raise AssertionError(f"insub_hf.{module} belongs to no layer; add it to LAYERS")


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every package module `name` imports, anywhere in the file (module level or inside functions), including the
    Hub tools the model code imports by name (`package_module("hub")`). Names are relative to the package."""
    found = set()
    for node, target in relative_imports(f"insub_hf.{name}"):
        target = target.removeprefix("insub_hf").removeprefix(".")
        for alias in node.names:  # `from . import metrics` imports the submodule
            sub = f"{target}.{alias.name}" if target else alias.name
            found.add(sub if sub in known else target)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found |= {n.split(".", 1)[1] if "." in n else "" for n in names if n.split(".")[0] == "insub_hf"}
    found |= set(re.findall(r'package_module\("([\w.]+)"', path.read_text()))
    return {m for m in found if m != name}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items() if name}


def test_no_module_imports_upward_or_the_package_root():
    upward = []
    for module, targets in graph().items():
        for target in targets:
            if target == "":
                upward.append(f"{module} imports the package root")
            elif rank(target) > rank(module):
                upward.append(f"{module} (layer {rank(module)}) imports {target} (layer {rank(target)})")
    assert not upward, "\n".join(sorted(upward))


def test_no_module_of_the_package_is_over_400_lines():
    # one job per module (shared/STYLE.md): a module past 400 lines holds two, and is split
    lengths = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert len(lengths) > 50 and max(lengths.values()) > 100  # the walk found the package
    assert {name: n for name, n in lengths.items() if n > 400} == {}


def test_no_import_cycle():
    edges = graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                cycle = path[path.index(target):] + [target] if target in path else [node, target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if state.get(target) is None and target in edges:
                visit(target, path + [target])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])


def loaded_after(statement: str) -> set[str]:
    """The modules a fresh interpreter holds after running `statement`."""
    code = f"import sys, json\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    return set(json.loads(result.stdout.strip().splitlines()[-1]))


TRAINING = ("insub_hf.training.trainer", "insub_hf.jobs", "insub_hf.jobs", "transformers.trainer")


def test_the_metrics_load_without_training_the_hub_or_evaluate():
    loaded = loaded_after("import insub_hf.evaluation.metrics")
    unwanted = [m for m in loaded if m.startswith(TRAINING) or m in ("insub_hf.hub", "evaluate", "datasets")]
    assert not unwanted, unwanted


def test_importing_the_package_registers_the_auto_classes_and_loads_no_training_stack():
    loaded = loaded_after(
        "import insub_hf\n"
        "from transformers.models.auto.configuration_auto import CONFIG_MAPPING\n"
        "assert CONFIG_MAPPING['insub'] is insub_hf.InSubConfig"
    )
    unwanted = [m for m in loaded if m.startswith((*TRAINING, "insub_hf.evaluation", "insub_hf.hub", "evaluate"))]
    assert not unwanted, unwanted
    assert "insub_hf.model.modeling_insub" in loaded


def test_public_names_resolve_lazily():
    import insub_hf

    for name in insub_hf.__all__:
        assert getattr(insub_hf, name) is not None, name
    with pytest.raises(AttributeError, match="has no attribute 'InSubThing'"):
        insub_hf.InSubThing  # noqa: B018


def test_the_remote_code_copy_holds_model_code_only():
    from insub_hf.hub.remote_code import bundle_sources

    configs = [{"objective": "dino", "encoder_config": {"model_type": "vit"}},
               {"objective": "scd", "encoder_config": {"model_type": "bert"}},
               {"objective": "genomenet", "encoder_config": {"model_type": "insub_genomic"}}]
    for config in configs:
        for bundle, source in bundle_sources(config, processor=True).items():
            modules = re.search(r"modules (.*) \(documented there\)", source.split("\n", 1)[0]).group(1).split(", ")
            assert "model.modeling_insub" in modules or bundle != "modeling_insub", modules
            for module in modules:
                assert rank(module) <= rank("model.modeling_insub"), (bundle, module)
            assert "TrainerCallback" not in source and "class DINOObjective" not in source, bundle
            compile(source, bundle, "exec")


def test_the_image_release_needs_no_sentence_transformers():
    # `insub-hf release image` runs without the st extra: the text readings it names import torch alone
    code = "import sys, insub_hf.release.build; print('sentence_transformers' in sys.modules)"
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert printed.split() == ["False"]

"""The model code as a few flat files beside a checkpoint, so that it loads with `trust_remote_code=True` where
insub-hf is not installed.

transformers copies a custom model's module and the modules it imports relatively from the *same folder* only, while
the package has subpackages (`encoders/`, `losses/`, ...). So the code the model classes need is bundled: starting
from the classes the Auto classes load (`BUNDLES`), every top-level definition they reach, through the package's
relative imports, is copied into one file per bundle, in the order Python would run it. What no loader reaches
(training helpers, the other modalities' encoders and objectives) stays out. Each definition's source is the package's
own, byte for byte, except that relative imports inside functions are dropped (their names are the bundle's own)
(`insub_hf/bundling.py`), and docstrings are cut to their first paragraph.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from ..bundling import PACKAGE, Bundler, assemble, bound_names, from_import, grouped_imports, source_file, summaries_only


# What a folder's remote code serves, by the model's modality: the Auto class -> the package's `module.Class`. The
# model and its modality's classifier; pretraining further (`AutoModelForPreTraining`) takes the package itself: its
# trainer, views and objectives, which register the same classes natively.
MODEL_CLASSES = {
    "image": {"AutoModel": "model.modeling_insub.InSubModel",
              "AutoModelForImageClassification": "model.modeling_classification.InSubForImageClassification"},
    "text": {"AutoModel": "model.modeling_insub.InSubModel",
             "AutoModelForSequenceClassification": "model.modeling_classification.InSubForSequenceClassification"},
}
MODEL_CLASSES["dna"] = MODEL_CLASSES["text"]
# The bundles, in writing order (a later one imports from the earlier ones): file -> the `module.Class` roots it serves
# (the model bundle's are `MODEL_CLASSES` of the model's modality). The image processor's two bundles are written only
# for a folder that holds the processor.
BUNDLES = {
    "configuration_insub": ("model.configuration_insub.InSubConfig",),
    "modeling_insub": (),
    # the PIL class first: it holds what both share, so the torchvision one imports it, never the other way round
    "image_processing_pil_insub": ("processing.image_processing_pil_insub.InSubImageProcessorPil",),
    "image_processing_insub": ("processing.image_processing_insub.InSubImageProcessor",),
}
# What a model's folder names for `pipeline(task, model=folder, trust_remote_code=True)`, by the model's modality:
# transformers' custom-pipeline entries, task -> its class in `PIPELINE_FILE` (the package's `pipelines.py` as it is)
# and the Auto class that loads the model for it. A task that hands the model another modality gets the class that
# refuses it in one line.
PIPELINE_FILE = "pipeline_insub"
OTHER_MODALITY = {"impl": f"{PIPELINE_FILE}.InSubOtherModalityPipeline", "pt": ["AutoModel"], "tf": []}
CUSTOM_PIPELINES = {
    "image": {
        "image-feature-extraction": {"impl": f"{PIPELINE_FILE}.InSubImageFeatureExtractionPipeline",
                                     "pt": ["AutoModel"], "tf": [], "type": "image"},
        "image-classification": {"impl": f"{PIPELINE_FILE}.InSubImageClassificationPipeline",
                                 "pt": ["AutoModelForImageClassification"], "tf": [], "type": "image"},
        "feature-extraction": {**OTHER_MODALITY, "type": "text"},
    },
    "text": {task: {**OTHER_MODALITY, "type": "image"} for task in ("image-feature-extraction", "image-classification")},
}
CUSTOM_PIPELINES["dna"] = {**CUSTOM_PIPELINES["text"], "feature-extraction": {**OTHER_MODALITY, "type": "text"}}
PROCESSOR_BUNDLES = ("image_processing_insub", "image_processing_pil_insub")
# The image processor: the torchvision class, and the PIL class that AutoImageProcessor falls back to without torchvision
# (as a folder's auto_map names them: its bundle file and the class)
IMAGE_PROCESSORS = {backend: f"{bundle}.{BUNDLES[bundle][0].rsplit('.', 1)[1]}"
                    for backend, bundle in (("torchvision", "image_processing_insub"), ("pil", "image_processing_pil_insub"))}


def _imports(classes, package: str) -> str:
    """`from .module import A, B` lines for `classes`, relative to the package `package` (sorted, one per module)."""
    by_module: dict[str, set[str]] = {}
    for cls in classes:
        by_module.setdefault(cls.__module__.removeprefix(package + "."), set()).add(cls.__name__)
    return "".join(f"from .{module} import {', '.join(sorted(names))}\n" for module, names in sorted(by_module.items()))


def objectives_registry_source(config: dict) -> str:
    """The objectives' registry (`insub_hf/objectives/__init__.py`) listing the model's objective only (and its config
    class, what a model's config reads)."""
    from ..objectives import OBJECTIVES

    cls = OBJECTIVES[config.get("objective", "simclr")]
    return (
        '"""The objectives\' registry, as insub-hf wrote it for this model: its own objective only."""\n\n'
        "from __future__ import annotations\n\n"
        "from .base import Objective, ObjectiveConfig, ObjectiveOutput\n"
        + _imports([cls], f"{PACKAGE}.objectives")
        + _imports([cls.config_class], f"{PACKAGE}.objectives")
        + f"\nOBJECTIVES: dict[str, type[Objective]] = {{{cls.__name__}.name: {cls.__name__}}}\n"
        + f"OBJECTIVE_CONFIGS: dict[str, type[ObjectiveConfig]] = {{{cls.config_class.__name__}.name: "
        f"{cls.config_class.__name__}}}\n"
    )


def encoder_registry_source(config: dict) -> str:
    """The encoder families' registry (`insub_hf/encoders/registry.py`) listing the model's family only: its own
    encoder model (if it is one of the package's), the adapter for what it reads, timm and BatchEnsemble only when the
    config uses them."""
    from ..encoders import registry
    from ..encoders.build import encoder_model_class

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
    return source_file(module).read_text(encoding="utf-8")


def modality(config: dict) -> str:
    """The modality of a config.json's model (its objective's)."""
    from ..objectives import OBJECTIVE_CONFIGS

    return OBJECTIVE_CONFIGS[config["objective"]].modality


def bundle_sources(config: dict, processor: bool = False) -> dict[str, str]:
    """The bundles' sources (`BUNDLES`; the image processor's with `processor`) for the model of `config` (a
    config.json's dict), by file name without `.py`: each holds the top-level definitions its roots reach and that no
    earlier bundle holds, in Python's run order, and imports from the earlier bundles what it reads of theirs. The
    registries list the model's objective and encoder family only."""
    bundler = Bundler(lambda module: module_source(module, config))
    done: set[tuple[str, int]] = set()
    home: dict[tuple[str, int], str] = {}  # statement -> the bundle that holds it
    sources = {}
    for bundle, roots in BUNDLES.items():
        if bundle in PROCESSOR_BUNDLES and not processor:
            continue
        roots = roots or tuple(MODEL_CLASSES[modality(config)].values())
        pairs = [(f"{PACKAGE}.{root.rsplit('.', 1)[0]}", root.rsplit(".", 1)[1]) for root in roots]
        keep, imports = bundler.closure(pairs)
        own = keep - done
        borrowed = keep & done
        body, bound, placed = assemble(bundler, [module for module, _ in pairs], own, bundle)
        home.update(placed)
        from_earlier: dict[str, set[str]] = {}
        for module, index in borrowed:
            for name in bundler.module(module).statements[index].binds:
                if name in bound:
                    raise RuntimeError(f"remote code: {name!r} is defined in {bundle}.py and imported into it.")
                from_earlier.setdefault(home[(module, index)], set()).add(name)
        clashes = {bound_names(ast.parse(line).body[0])[0] for line in imports} & set(bound)
        if clashes:
            raise RuntimeError(f"remote code: {sorted(clashes)} both imported and defined in {bundle}.py; rename.")
        done |= own
        modules = sorted({module.removeprefix(PACKAGE + ".") for module, _ in own})
        head = (f'"""{bundle}: what this folder\'s loaders run of the insub-hf modules '
                f'{", ".join(modules)} (documented there), bundled by `insub_hf.hub.remote_code`."""\n\n'
                "from __future__ import annotations\n\n" + grouped_imports(imports)
                + "".join(from_import(f".{other}", names) + "\n" for other, names in sorted(from_earlier.items())))
        sources[bundle] = head + "\n" + body
    return sources


def write_remote_code(folder: str | Path) -> list[Path]:
    """Writes the model code the folder's loaders need into `folder` (its objective and encoder family only,
    `bundle_sources`) and the `auto_map` into its `config.json` (which must exist); and, when the folder holds an
    `InSubImageProcessor` (`preprocessor_config.json`), the processor's code and `auto_map` too: the torchvision
    class, and the PIL class that `AutoImageProcessor` takes where torchvision is not installed.

    Returns the written module files. The folder then loads with `AutoConfig`, `AutoModel`, its modality's classifier
    Auto class (`MODEL_CLASSES`) and `AutoImageProcessor`, with `trust_remote_code=True`, without insub-hf.
    """
    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"write_remote_code: {folder} has no config.json; save the model there first.")
    config = json.loads(config_path.read_text(encoding="utf-8"))
    processor_path = folder / "preprocessor_config.json"
    processor = json.loads(processor_path.read_text(encoding="utf-8")) if processor_path.is_file() else {}
    with_processor = processor.get("image_processor_type") == IMAGE_PROCESSORS["torchvision"].rsplit(".", 1)[1]
    if with_processor:
        processor["auto_map"] = {"AutoImageProcessor": dict(IMAGE_PROCESSORS)}
        processor_path.write_text(json.dumps(processor, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    written = []
    for name, source in bundle_sources(config, with_processor).items():
        path = folder / f"{name}.py"
        path.write_text(re.sub(r"\n{4,}", "\n\n\n", summaries_only(source)), encoding="utf-8")
        written.append(path)
    config["auto_map"] = {"AutoConfig": "configuration_insub.InSubConfig", **{
        auto: f"modeling_insub.{target.rsplit('.', 1)[1]}" for auto, target in MODEL_CLASSES[modality(config)].items()
    }}
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return written


def write_pipelines(folder: str | Path) -> Path:
    """For a model's folder (its `config.json` must exist): `pipeline_insub.py`, the package's `pipelines.py` byte
    for byte, and the model's modality's `CUSTOM_PIPELINES` in the config. transformers' `pipeline(task,
    model=folder)` then runs them with `trust_remote_code=True`: an image model's read each image by its bit depth,
    and without it refuse the folder in one line naming `trust_remote_code`, never clipping a 16-bit image to 8 bits
    silently; a task that hands the model another modality (images to a text model, texts to an image model) is
    refused in one line naming what the model reads. Returns the written file."""
    folder = Path(folder)
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    path = folder / f"{PIPELINE_FILE}.py"
    path.write_text(source_file(f"{PACKAGE}.processing.pipelines").read_text(encoding="utf-8"), encoding="utf-8")
    config["custom_pipelines"] = CUSTOM_PIPELINES[modality(config)]
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path

"""What earlier insub-hf versions named differently, in one place: former module paths, names that moved between
modules, flat config keys, an encoder field written on the top-level config, and files that no folder holds any
more. Each still works and warns once (a `FutureWarning` naming the new place and `REMOVAL_VERSION`), as
transformers' own shims do; nothing else in the package keeps a former name.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings
from typing import Any

# The version that removes every path below
REMOVAL_VERSION = "0.3.0"

# A former module path (relative to the package) -> where the module lives now
FORMER_MODULES = {
    **{name: f"model.{name}" for name in ("configuration_insub", "modeling_insub", "modeling_classification",
                                          "modeling_outputs", "heads", "model_files", "sentence_embeddings")},
    **{name: f"processing.{name}" for name in ("image_processing_insub", "image_processing_pil_insub", "image_range",
                                               "pipelines")},
    **{name: f"hub.{name}" for name in ("model_card", "remote_code", "sentence_transformer_module")},
    "hub.bundling": "bundling",
    "trainer": "training.trainer", "collapse_monitor": "training.collapse_monitor",
    "training_args": "training.training_args", "memory_format": "training.memory_format",
    "knn_bank": "uncertainty.knn", "cards": "jobs.cards", "text_uncertainty": "uncertainty.length",
    **{f"jobs.{name}": f"release.{now}" for name, now in (("release", "build"), ("publish", "publish"),
                                                          ("text_reading", "text_reading"))},
}

# Names a former module offered (at commits 0364212 and 1f927d4) that now live in another module: former module ->
# {name: "module now" or "module now:name now"}
_RELEASE_CARDS = ("READING_NAMES", "VERSUS", "dna_versus_baseline", "own_bank_section", "provenance",
                  "text_uncertainty_section", "text_versus_baseline", "versus_baseline", "versus_others")
FORMER_NAMES = {
    "modeling_insub": {"KnnBank": "uncertainty.knn", "BANK": "uncertainty.knn", "set_bank": "uncertainty.knn",
                       "LENGTH_SETTINGS": "uncertainty.length"},
    "cards": {name: "release.cards" for name in _RELEASE_CARDS},
    "configuration_insub": {"LENGTH_SETTINGS": "uncertainty.length", "MAX_LABELS": "model.label_settings",
                            "PROBLEM_TYPES": "model.label_settings", "MODEL_READINGS": "uncertainty.settings",
                            "check_length_standardisation": "uncertainty.length:check_length_buckets"},
    "text_uncertainty": {"knn_distance": "uncertainty.knn",
                         "fit_length_standardisation": "uncertainty.length:fit_length_buckets",
                         "length_standardised": "uncertainty.length:standardise_by_length"},
}
# Names a former module offered that no module has now: former module -> {name: what does its work now}
REMOVED_NAMES = {
    "cards": {"shipped_knn": "the card reads the model's own fitted uncertainty (insub_hf.release.cards)"},
    "jobs.release": {"fit_detector": "model.fit_uncertainty(inputs, calibration_inputs)",
                     "knn_where_the_spread_fails": "model.fit_uncertainty (it checks each reading against outliers "
                                                   "made for the purpose)",
                     "measure_text_uncertainty": "insub_hf.release.text_reading.measure",
                     "text_ood": "insub_hf.evaluation.text_ood_sets.text_ood_sets"},
    "jobs.text_reading": {"shuffled_check": "insub_hf.uncertainty.separation (the fit's check against shuffles)",
                          "validation_shuffled": "insub_hf.evaluation.text_ood_sets.shuffled_words"},
}

# A config.json written before the uncertainty block (insub-hf up to commit aff1b3a) held these six keys flat
FORMER_CONFIG_KEYS = {"uncertainty_reading": "reading", "uncertainty_direction": "direction", "knn_k": "k",
                      "knn_bank_size": "bank_size", "knn_bank_weights": "bank_weights",
                      "length_standardisation": "length_buckets"}

# Files made from a model's weights that folders of insub-hf up to commit aff1b3a hold (a separate OOD detector):
# wrong beside any other weights, so a save that replaces the weights removes them
FORMER_DERIVED_FILES = ("ood_detector.json", "ood_detector.safetensors")

_warned: set[str] = set()


def warn_former(former: str, now: str, stacklevel: int = 3, way_out: str = "") -> None:
    """Warns once per process that `former` is `now` and that the former form goes in `REMOVAL_VERSION`
    (`way_out`: what to do, where it is not to write the new form)."""
    if former in _warned:
        return
    _warned.add(former)
    warnings.warn(f"{former} is {now} now; the former form stops working in insub-hf {REMOVAL_VERSION}"
                  f"{way_out}.", FutureWarning, stacklevel=stacklevel)


def from_former_keys(kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """Pops the flat `FORMER_CONFIG_KEYS` out of a config's keyword arguments `kwargs`, warning once, and returns
    them as the uncertainty block's values, each as given (None where there are none)."""
    found = {FORMER_CONFIG_KEYS[key]: kwargs.pop(key) for key in list(kwargs) if key in FORMER_CONFIG_KEYS}
    for key, block_key in FORMER_CONFIG_KEYS.items():
        if block_key in found:
            warn_former(f"InSubConfig({key}=...)", f"InSubConfig(uncertainty={{{block_key!r}: ...}})", 4)
    return found or None


_UNSET = object()


def former_key(config, key: str, value: Any = _UNSET) -> Any:
    """`config.<key>` for a flat `FORMER_CONFIG_KEYS` key, read from or written to its uncertainty block (a write
    checked as the block's own), warning once."""
    now = f"InSubConfig.uncertainty[{FORMER_CONFIG_KEYS[key]!r}]"
    warn_former(f"InSubConfig.{key}", now, stacklevel=4)
    if value is _UNSET:
        return config.uncertainty.get(FORMER_CONFIG_KEYS[key])
    config.uncertainty[FORMER_CONFIG_KEYS[key]] = value


def with_fitted_record(block: dict[str, Any] | None) -> dict[str, Any] | None:
    """A calibrated uncertainty block written before it recorded `fitted_with` (insub-hf up to commit ec29209) or
    its `combination` (up to commit 9637199), given both as it was fitted: the values it was saved with, and the
    larger standardised score ("max_z"), whose ranks still hold their 5 % (said once: a new fit combines by
    Fisher's rule)."""
    from transformers.utils import logging

    from .uncertainty.conformal import fitted_settings
    from .uncertainty.readings import is_calibrated
    from .uncertainty.settings import DEFAULT_K

    if not isinstance(block, dict) or not is_calibrated(block):
        return block
    if block.get("combination") is not None and block.get("fitted_with") is not None:
        return block
    block = dict(block)
    if block.get("combination") is None:
        block["combination"] = "max_z"
        logging.get_logger(__name__).warning_once(
            "InSubConfig: this calibrated `uncertainty` was fitted by an insub-hf up to commit 9637199, which combined "
            "its readings by the larger standardised score (still 5 % above 0.95, but up to several AUROC points under "
            "its better reading); fit it again for Fisher's rule: model.fit_uncertainty(your_inputs).")
    if block.get("fitted_with") is None:
        block["fitted_with"] = fitted_settings({"k": DEFAULT_K, **block})  # k: the default, where left out
    elif "combination" not in block["fitted_with"]:
        block["fitted_with"] = {**block["fitted_with"], "combination": "max_z"}
    return block


def former_keys_into_block(config_dict: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """`config_dict` (a config.json's) with the flat `FORMER_CONFIG_KEYS` among `kwargs` (a `from_pretrained`'s,
    popped, warning once) written into its uncertainty block, each as given; `config_dict` itself where none."""
    given = from_former_keys(kwargs)
    if not given:
        return config_dict
    config_dict = dict(config_dict)
    block = from_former_keys(config_dict) or dict(config_dict.get("uncertainty") or {})
    config_dict["uncertainty"] = {**with_fitted_record(block), **given}
    return config_dict


class _FormerModule(types.ModuleType):
    """A former module path: every attribute read from (and written to, as `unittest.mock.patch` writes) the module
    that holds it now: the one that replaced it, or the one `FORMER_NAMES` names; a `REMOVED_NAMES` name is
    refused saying what does its work now."""

    def __init__(self, name: str, target: str, moved: dict[str, str], removed: dict[str, str]):
        super().__init__(name)
        self.__dict__["_FormerModule__where"] = (target, moved, removed)

    def __holder(self, name: str) -> tuple[types.ModuleType, str]:
        target, moved, removed = self.__dict__["_FormerModule__where"]
        if name in removed:
            raise AttributeError(f"{self.__name__}.{name} was removed; what does its work now: {removed[name]} "
                                 f"(insub-hf {REMOVAL_VERSION} removes the path {self.__name__} too).")
        module, _, now = moved.get(name, target).partition(":")
        return importlib.import_module(module), now or name

    def __getattr__(self, name: str) -> Any:
        if name == "__all__":  # `from former import *`: what the module now there offers, and the moved names
            target, moved, _ = self.__dict__["_FormerModule__where"]
            module = importlib.import_module(target)
            return sorted(set(getattr(module, "__all__", [n for n in vars(module) if not n.startswith("_")]))
                          | set(moved))
        if name.startswith("__"):
            return getattr(importlib.import_module(self.__dict__["_FormerModule__where"][0]), name)
        module, now = self.__holder(name)
        return getattr(module, now)

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("__"):
            return super().__setattr__(name, value)
        module, now = self.__holder(name)
        setattr(module, now, value)

    def __delattr__(self, name: str) -> None:
        module, now = self.__holder(name)
        delattr(module, now)

    def __dir__(self) -> list[str]:
        target, moved, _ = self.__dict__["_FormerModule__where"]
        return sorted(set(dir(importlib.import_module(target))) | set(moved))


class _FormerPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers an import of a `FORMER_MODULES` path with a `_FormerModule` of the module now there (imported when
    asked for, not before), warning once."""

    def __init__(self, package: str):
        self.package = package
        self.targets = {f"{package}.{old}": f"{package}.{new}" for old, new in FORMER_MODULES.items()}

    def find_spec(self, fullname, path=None, target=None):
        return importlib.util.spec_from_loader(fullname, self) if fullname in self.targets else None

    def create_module(self, spec):
        target = self.targets[spec.name]
        importlib.import_module(target)
        warn_former(spec.name, target, stacklevel=2,
                    way_out=" (the remote code of a folder saved by an earlier insub-hf names it too: save the folder "
                            "again)")
        former = spec.name.removeprefix(f"{self.package}.")
        moved = {name: f"{self.package}.{module}" for name, module in FORMER_NAMES.get(former, {}).items()}
        return _FormerModule(spec.name, target, moved, REMOVED_NAMES.get(former, {}))

    def exec_module(self, module) -> None:
        """Nothing runs: the module's code ran under its own name."""


def install_former_paths(package: str) -> None:
    """Makes every `FORMER_MODULES` path under `package` importable (`_FormerPaths`); installing twice keeps one
    finder."""
    if not any(isinstance(f, _FormerPaths) and f.package == package for f in sys.meta_path):
        sys.meta_path.append(_FormerPaths(package))

"""An InSub model's files: what `from_pretrained` and `save_pretrained` add around transformers' own.

Loading: checksums verified before the weights are read (local folders and, after download, the Hub cache), and
config.json checked to be the one the weights were saved with (unless a config is passed), a local path that does
not exist refused rather than tried as a repo id, clearer errors offline and for weights whose shapes the config does
not give, a checkpoint that lacks its objective's weights refused. Saving: onto a file refused, heads checked against
the config, checksums and the config's digest added, files made from the weights it replaces removed, remote code
written. The model classes (`modeling_insub.py`) call these two functions and hold no file handling themselves.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Callable

import torch
from safetensors import safe_open
from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME, cached_file, logging

from ..checkpointing import derived_entries, forget_derived, holds_weights, weights_replaced
from ..checksums import add_checksums, check_config_pairing, model_weight_files, verify_checksums, weights_digest
from ..encoders.base import LOADING_A_CHECKPOINT
from ..uncertainty.knn import clear_bank, stale_bank
from ..validation import looks_like_a_path

logger = logging.get_logger(__name__)


def package_module(name: str, required: bool = True) -> ModuleType | None:
    """The insub-hf module `name` (e.g. `"hub"`, `"encoders.presets"`), which the model code uses but does not need
    to run (the Hub tools, file checks, the encoders' short names).

    Imported by name, not by a relative import statement, so that the remote-code copy of the model files stays free
    of it. Where insub-hf is absent (a model loaded from a repo's remote code), returns None when not `required`, else
    raises an ImportError saying to install insub-hf.
    """
    try:
        return importlib.import_module(f"insub_hf.{name}")
    except ImportError as error:
        if not required:
            return None
        raise ImportError(
            f"insub_hf.{name} is part of the insub-hf package, which this environment lacks (the model was loaded "
            "from a repo's remote code); install insub-hf to use it."
        ) from error


def cached_weight_files(repo_id: str, kwargs: dict) -> list[Path]:
    """The model weight files of a Hub repo in the local cache (what `from_pretrained` just read)."""
    for filename in (SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME):
        path = cached_file(
            repo_id, filename, subfolder=kwargs.get("subfolder") or "", revision=kwargs.get("revision"),
            cache_dir=kwargs.get("cache_dir"), _raise_exceptions_for_missing_entries=False,
            _raise_exceptions_for_connection_errors=False, local_files_only=True,
        )
        if path is not None:
            return model_weight_files(Path(path).parent)
    return []


def shape_mismatches(cls, folder: Path, config=None, overrides: dict | None = None) -> list[str]:
    """'name: checkpoint (shape), config (shape)' for each tensor of the local checkpoint in `folder` whose shape
    differs from a model of `cls` built from `config` (default: the folder's config.json with the config fields of
    `overrides`, the keywords `from_pretrained` got, e.g. `num_labels`) on the meta device."""
    if not folder.is_dir():
        return []
    if not isinstance(config, cls.config_class):
        config = cls.config_class.from_pretrained(folder)
        for name, value in (overrides or {}).items():
            if hasattr(config, name) and not name.startswith("_"):
                setattr(config, name, value)
    with torch.device("meta"):
        built = {k.removeprefix(cls.base_model_prefix + "."): tuple(v.shape) for k, v in cls(config).state_dict().items()}
    stored = {}
    for file in model_weight_files(folder):
        with safe_open(str(file), framework="pt") as handle:
            stored.update({k.removeprefix(cls.base_model_prefix + "."): tuple(handle.get_slice(k).get_shape())
                           for k in handle.keys()})
    return [f"{k}: checkpoint {stored[k]}, config {built[k]}" for k in sorted(set(stored) & set(built))
            if stored[k] != built[k]]


# config.json's key in a folder that holds a model's card only (its files over a repository's size limits): the one
# line that says how to build the folder, which loading it gives instead of a missing weights file
CARD_ONLY_KEY = "insub_card_only"


def card_only_line(folder: Path) -> str | None:
    """The build line of a card-only folder (`CARD_ONLY_KEY` in its config.json); None for any other folder."""
    config = Path(folder) / "config.json"
    if not config.is_file():
        return None
    try:
        return json.loads(config.read_text(encoding="utf-8")).get(CARD_ONLY_KEY)
    except (ValueError, AttributeError):  # not a JSON object: transformers' own reading says what is wrong
        return None


def loaded_for_a_stock_image_pipeline() -> bool:
    """Whether transformers' `pipeline()` (found a few frames up) is loading this model for one of its own image
    pipelines, which make every image 8-bit RGB before any processor sees it (the InSub ones are other classes)."""
    pipelines = sys.modules.get("transformers.pipelines")
    if pipelines is None:
        return False
    stock = (pipelines.ImageFeatureExtractionPipeline, pipelines.ImageClassificationPipeline)
    frame = sys._getframe(1)
    for _ in range(16):  # pipeline() -> load_model -> AutoModel -> the remote class -> here, and a few more
        if frame is None:
            return False
        if frame.f_code is pipelines.pipeline.__code__:
            return frame.f_locals.get("pipeline_class") in stock
        frame = frame.f_back
    return False


def checked_from_pretrained(cls, load: Callable, name_or_path, *args, **kwargs):
    """`load(name_or_path, *args, **kwargs)` (transformers' `from_pretrained` of `cls`) with the checks of the module
    note."""
    name = str(name_or_path)
    local = Path(name).expanduser()
    if local.is_dir():
        folder = local / kwargs["subfolder"] if kwargs.get("subfolder") else local
        if line := card_only_line(folder):
            raise FileNotFoundError(f"from_pretrained({name!r}): {line}")
        if any((folder / f"{file}.py").is_file() for file in ("image_processing_insub", "image_processing_pil_insub")) \
                and not (folder / "pipeline_insub.py").is_file():
            if loaded_for_a_stock_image_pipeline():
                # an ImportError (the folder lacks that module) reaches the user as it is: transformers' load_model
                # folds a ValueError into its own many-line message
                raise ImportError(f"pipeline(model={name!r}): this image folder has no pipeline_insub.py (its remote "
                                  "code predates its own pipelines), so transformers' stock image pipeline would run, "
                                  "which clips 16-bit images at 255; save the model there again (save_pretrained "
                                  "writes pipeline_insub.py), or pass pipeline_class=InSubImageFeatureExtractionPipeline "
                                  "(or InSubImageClassificationPipeline) from insub_hf.")
            warnings.warn(f"from_pretrained({name!r}): this image folder's remote code predates its own pipelines, so "
                          "pipeline(task, model=folder, trust_remote_code=True) runs transformers' stock pipeline "
                          "there, which clips 16-bit images at 255; save the model there again (save_pretrained "
                          "writes pipeline_insub.py).", stacklevel=3)
        if model_weight_files(folder) and not verify_checksums(folder, config=False):
            warnings.warn(f"from_pretrained({name!r}): the weights in {folder} carry no checksums, so their values "
                          "cannot be verified (saved by another tool, or their metadata stripped); save_pretrained "
                          "writes them.", stacklevel=3)
    elif moved_aside := sorted(local.parent.glob(f".{local.name}.old-*")):
        raise FileNotFoundError(
            f"from_pretrained({name!r}): the folder is missing because a save into it was killed between moving the "
            f"old folder aside and moving the new one in; the old model is {moved_aside[-1]}: rename it back to "
            f"{str(local)!r} (the next save into that path also puts it back)."
        )
    elif looks_like_a_path(name):
        raise FileNotFoundError(
            f"from_pretrained({name!r}): no such local folder (and {name!r} is not a Hub repo id of the form "
            "'namespace/name')."
        )
    # the folder's config.json against its weights on every path (the Auto classes pass config= too); only an
    # explicit opt-out loads a pair that a killed save or a hand edit split
    pairing = kwargs.pop("check_config_pairing", True)
    wants_info = kwargs.pop("output_loading_info", False)
    loading = LOADING_A_CHECKPOINT.set(True)
    try:
        model, info = load(name_or_path, *args, output_loading_info=True, **kwargs)
    except OSError as error:
        clearer = package_module("hub").offline_load_error(name, error)
        if clearer is None:
            raise
        raise clearer from error
    except RuntimeError as error:
        if "ignore_mismatched_sizes" not in str(error):
            raise
        found = shape_mismatches(cls, local / (kwargs.get("subfolder") or ""), kwargs.get("config"), kwargs)
        # a RuntimeError, as transformers raises it: code written for transformers' error catches this one
        raise RuntimeError(
            f"from_pretrained({name!r}): the weights do not have the shapes the config gives them"
            f"{': ' + '; '.join(found[:3]) if found else ''}. The config (num_heads, head_hidden_sizes, "
            "head_output_size, num_labels, encoder_config, ...) was edited after saving, or another config was passed: "
            "load with the config the weights were saved with, or pass ignore_mismatched_sizes=True to start the "
            "mismatched tensors fresh (e.g. a classifier for another number of labels; they are reported as "
            "mismatched_keys)."
        ) from None
    finally:
        LOADING_A_CHECKPOINT.reset(loading)
    objective_missing = sorted(k for k in info.get("missing_keys", ()) if k.startswith("objective."))
    if objective_missing:  # e.g. a config edited from simclr to dino: the teacher would start random
        raise ValueError(
            f"from_pretrained({name!r}): the checkpoint lacks {len(objective_missing)} weights of its config's "
            f"objective {model.config.objective!r} (e.g. {objective_missing[:2]}); it was saved with another "
            "objective. Load it with the config it was saved with, or as InSubModel (encoder and heads only)."
        )
    check_same_class_loads_whole(name, cls, model, info)
    if local.is_dir():
        files = model_weight_files(local / (kwargs.get("subfolder") or ""))
    else:  # a Hub repo: its files are in the local cache now
        files = cached_weight_files(name, kwargs)
        for file in files:
            verify_checksums(file)
    if files and pairing:  # after the load, so that a config it cannot read is named for what is wrong with it
        check_config_pairing(files[0].parent)
    inner = getattr(model, model.base_model_prefix, model)
    if stale_bank(inner):
        if inner.heads is None:  # a classifier serves its logits; the bank was its pretrained model's
            clear_bank(inner)
        else:
            raise ValueError(
                f"from_pretrained({name!r}): its k-NN bank was embedded with other weights than the folder holds "
                "(config.uncertainty['bank_weights'] differs), so its distances would be wrong. Load it with a config "
                "whose uncertainty block has bank_size 0 and reading 'spread' (config=...), then model.set_bank(...) "
                "on your in-distribution inputs and save it again."
            )
    return (model, info) if wants_info else model


def check_same_class_loads_whole(name: str, cls, model, info: dict) -> None:
    """Refuses a checkpoint loaded as the class that saved it (`config.architectures`) whose weights lack tensors
    the model has or hold ones it does not: tensors renamed or removed after saving (in the file and its checksums
    alike), which would otherwise start at random or be dropped with transformers' load report. Another class (a
    pretraining checkpoint as a classifier) leaves out and starts what differs, as transformers does."""
    missing, unexpected = sorted(info.get("missing_keys", ())), sorted(info.get("unexpected_keys", ()))
    if cls.__name__ not in (model.config.architectures or ()) or not (missing or unexpected):
        return
    said = "; ".join(part for part in (
        missing and f"lacks {len(missing)} tensor(s) of {cls.__name__} (e.g. {missing[:3]})",
        unexpected and f"holds {len(unexpected)} it does not have (e.g. {unexpected[:3]})",
    ) if part)
    raise ValueError(
        f"from_pretrained({name!r}): the checkpoint was saved by {cls.__name__}, yet its weights {said}: tensors were "
        "renamed or removed after saving. Restore the folder from its copy, or save the model again."
    )


def checked_save_pretrained(model, save: Callable, save_directory, *args, remote_code: bool | None = None, **kwargs) -> None:
    """`save(save_directory, *args, **kwargs)` (transformers' `save_pretrained` of `model`) with the checks of the
    module note, then checksums and, when `remote_code` (default: when the class was registered with
    `register_for_auto_class`), the model code as flat files with an `auto_map` (`remote_code.py`)."""
    if os.path.exists(save_directory) and not os.path.isdir(save_directory):
        raise NotADirectoryError(
            f"save_pretrained({str(save_directory)!r}): that path is a file, not a folder; nothing was written."
        )
    inner = getattr(model, model.base_model_prefix, model)
    inner.check_config_matches_heads()
    if stale_bank(inner):  # trained since the bank was embedded: its distances would be to other representations
        logger.warning("save_pretrained: the model's k-NN bank was embedded with weights it no longer has, so it is "
                       "dropped with the rest of its fitted `uncertainty` (None until fitted again); fit it anew with "
                       "model.fit_uncertainty(your_inputs).")
        clear_bank(inner)
    folder = Path(save_directory)
    had_weights = folder.is_dir() and holds_weights(folder)
    before = weights_digest(folder) if had_weights else None
    cls = type(model)
    remote_code = cls._auto_class is not None if remote_code is None else remote_code
    # transformers' own copy (`is_remote_code()` reads the class) handles flat packages only; the flat files are
    # written below instead
    registered, cls._auto_class = cls._auto_class, None
    # one small file: no "Writing model shards" bar between a job's progress lines at every checkpoint
    bars = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        save(save_directory, *args, **kwargs)
    finally:
        cls._auto_class = registered
        if bars:
            logging.enable_progress_bar()
    add_checksums(save_directory)
    if weights_replaced(before, folder, had_weights):  # transformers keeps what else the folder held
        forget_derived(folder, derived_entries(folder))
    if remote_code:
        package_module("hub.remote_code").write_remote_code(save_directory)
    # an image model's pipelines read images by their bit depth (transformers' stock ones clip them to 8 bits); a
    # task of another modality is refused in the folder's words, not a missing processor's
    package_module("hub.remote_code").write_pipelines(save_directory)

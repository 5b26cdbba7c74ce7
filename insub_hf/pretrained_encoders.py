"""Starting an InSub model from a pretrained transformers backbone (a Hub id or a local folder)."""

from __future__ import annotations

import os

from transformers import AutoConfig, AutoModel, PretrainedConfig

from .encoders import BatchEnsembleEncoder, TimmEncoder


def encoder_config_from_pretrained(name_or_path: str | os.PathLike, **overrides) -> PretrainedConfig:
    """The config of a pretrained backbone (e.g. a saved `facebook/dino-vits16` or all-MiniLM-L6-v2 folder), to
    pass as `InSubConfig(encoder_config=...)` so the architectures match."""
    return AutoConfig.from_pretrained(name_or_path, **overrides)


def load_encoder_weights(model, name_or_path: str | os.PathLike) -> None:
    """Copies the weights of a pretrained transformers backbone into the encoder of an InSub model.

    Works for `InSubModel` and `InSubForPreTraining` (student and, with DINO, the teacher). The backbone's extra
    weights that the encoder does not build (a pooler) are ignored; a backbone that lacks any of the encoder's
    weights, or has other shapes, is refused with the names.

    Args:
        model: an `InSubModel` or `InSubForPreTraining` whose `encoder_config` matches the backbone.
        name_or_path: a Hub id or a local folder in transformers format.
    """
    networks = [model.insub, model.teacher] if hasattr(model, "insub") else [model]
    networks = [n for n in networks if n is not None]
    encoder = networks[0].encoder
    if isinstance(encoder, (TimmEncoder, BatchEnsembleEncoder)):
        raise ValueError(
            f"load_encoder_weights loads transformers backbones; this model's encoder is a "
            f"{type(encoder).__name__} (timm models load weights with timm; BatchEnsemble layers have no pretrained "
            "counterpart)."
        )
    state = AutoModel.from_pretrained(name_or_path).state_dict()
    for network in networks:
        try:
            result = network.encoder.model.load_state_dict(state, strict=False)
        except RuntimeError as error:
            raise ValueError(
                f"the backbone at {name_or_path!s} does not fit InSubConfig.encoder_config (build the config with "
                f"encoder_config_from_pretrained): {error}"
            ) from None
        if result.missing_keys:
            raise ValueError(
                f"the backbone at {name_or_path!s} lacks {len(result.missing_keys)} weights of the encoder, e.g. "
                f"{result.missing_keys[:3]}; build InSubConfig.encoder_config with encoder_config_from_pretrained."
            )

"""Builds the encoder an `InSubConfig` names, from the families of `registry`."""

from __future__ import annotations

import inspect

from transformers import AutoModel, PretrainedConfig

from .base import Encoder
from .registry import ADAPTERS, BATCH_ENSEMBLE, OWN_ENCODERS, TIMM_ENCODER


def build_encoder(config) -> Encoder:
    """Builds the encoder an `InSubConfig` names, randomly initialised; with `config.batch_ensemble_size` > 1
    its linear layers become BatchEnsemble layers.

    Args:
        config: an `InSubConfig`.
    """
    encoder = _build_plain_encoder(config)
    if config.batch_ensemble_size > 1:
        return BATCH_ENSEMBLE(encoder, config.batch_ensemble_size)
    return encoder


def encoder_model_class(model_type: str, config_class: type | None = None) -> type:
    """The model class of an encoder `model_type`: the package's own by name (a config loaded through remote code may
    be another copy of the class than the registered one), else `AutoModel`'s for `config_class` (default: the
    registered config class of `model_type`). Raises KeyError when there is none."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    own = {own_config.model_type: own_model for own_config, own_model in OWN_ENCODERS}
    return own.get(model_type) or AutoModel._model_mapping[config_class or CONFIG_MAPPING[model_type]]


def _build_plain_encoder(config) -> Encoder:
    """The encoder an `InSubConfig` names, randomly initialised.

    Which adapter wraps a transformers model follows the model's `main_input_name`: `pixel_values` (vision),
    `input_ids` (text, pooled by `config.pooling`) or `dna_one_hot` (genomic).
    """
    if config.timm_model_name is not None:
        return TIMM_ENCODER(config.timm_model_name, config.timm_kwargs)
    encoder_config: PretrainedConfig = config.encoder_config
    try:
        model_class = encoder_model_class(encoder_config.model_type, type(encoder_config))
    except KeyError:
        raise ValueError(
            f"InSubConfig.encoder_config has model_type={encoder_config.model_type!r}, which AutoModel cannot build; "
            f"use a transformers vision model (e.g. 'vit', 'resnet'), a BERT-style text model (e.g. 'bert') or one "
            f"of {sorted(c.model_type for c, _ in OWN_ENCODERS)}."
        ) from None
    main_input = getattr(model_class, "main_input_name", None)
    if main_input not in ADAPTERS:
        raise ValueError(
            f"InSubConfig.encoder_config model_type={encoder_config.model_type!r} reads {main_input!r}; allowed "
            f"encoders read one of {list(ADAPTERS)}."
        )
    kwargs = {}
    # Our own pooling replaces the model's pooler (CLS/mean), so its unused weights are not built.
    if "add_pooling_layer" in inspect.signature(model_class.__init__).parameters and (
        main_input == "input_ids" or hasattr(encoder_config, "patch_size")
    ):
        kwargs["add_pooling_layer"] = False
    return ADAPTERS[main_input].from_model(model_class(encoder_config, **kwargs), config)

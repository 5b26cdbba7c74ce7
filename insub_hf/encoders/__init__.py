"""Encoders behind one interface (`Encoder`): inputs of one modality -> representation `(B, d)`."""

from __future__ import annotations

import inspect

from transformers import AutoModel, PretrainedConfig

from .base import Encoder
from .batch_ensemble import BatchEnsembleConv2d, BatchEnsembleEncoder, BatchEnsembleLinear, convert_to_batch_ensemble
from .configuration_genomic import GenomicEncoderConfig
from .configuration_resnet_cifar import CifarResNetConfig
from .modeling_genomic import GenomicEncoder, GenomicEncoderModel
from .modeling_resnet_cifar import CifarResNetModel
from .pretrained import encoder_config_from_pretrained, load_encoder_weights
from .text import POOLINGS, TransformersTextEncoder, dropout_rate, masked_mean
from .vision import TimmEncoder, TransformersVisionEncoder

AutoModel.register(GenomicEncoderConfig, GenomicEncoderModel, exist_ok=True)
AutoModel.register(CifarResNetConfig, CifarResNetModel, exist_ok=True)

# the package's own encoder models, by model_type
OWN_MODELS = {GenomicEncoderConfig.model_type: GenomicEncoderModel, CifarResNetConfig.model_type: CifarResNetModel}

MODALITY_INPUTS = ("pixel_values", "input_ids", "dna_one_hot")


def build_encoder(config) -> Encoder:
    """Builds the encoder an `InSubConfig` names, randomly initialised; with `config.batch_ensemble_size` > 1
    its linear layers become BatchEnsemble layers.

    Args:
        config: an `InSubConfig`.
    """
    encoder = _build_plain_encoder(config)
    if config.batch_ensemble_size > 1:
        return BatchEnsembleEncoder(encoder, config.batch_ensemble_size)
    return encoder


def _build_plain_encoder(config) -> Encoder:
    """The encoder an `InSubConfig` names, randomly initialised.

    Which adapter wraps a transformers model follows the model's `main_input_name`: `pixel_values` (vision),
    `input_ids` (text, pooled by `config.pooling`) or `dna_one_hot` (genomic).
    """
    if config.timm_model_name is not None:
        return TimmEncoder(config.timm_model_name, config.timm_kwargs)
    encoder_config: PretrainedConfig = config.encoder_config
    try:
        # ours by name: a config loaded through remote code may be another copy of the class than the registered one
        model_class = OWN_MODELS.get(encoder_config.model_type) or AutoModel._model_mapping[type(encoder_config)]
    except KeyError:
        raise ValueError(
            f"InSubConfig.encoder_config has model_type={encoder_config.model_type!r}, which AutoModel cannot build; "
            "use a transformers vision model (e.g. 'vit', 'resnet'), a BERT-style text model (e.g. 'bert'), "
            f"'{CifarResNetConfig.model_type}' or '{GenomicEncoderConfig.model_type}'."
        ) from None
    main_input = getattr(model_class, "main_input_name", None)
    if main_input not in MODALITY_INPUTS:
        raise ValueError(
            f"InSubConfig.encoder_config model_type={encoder_config.model_type!r} reads {main_input!r}; allowed "
            f"encoders read one of {list(MODALITY_INPUTS)}."
        )
    kwargs = {}
    # Our own pooling replaces the model's pooler (CLS/mean), so its unused weights are not built.
    if "add_pooling_layer" in inspect.signature(model_class.__init__).parameters and (
        main_input == "input_ids" or hasattr(encoder_config, "patch_size")
    ):
        kwargs["add_pooling_layer"] = False
    model = model_class(encoder_config, **kwargs)
    if main_input == "pixel_values":
        return TransformersVisionEncoder(model)
    if main_input == "input_ids":
        return TransformersTextEncoder(model, config.pooling)
    return GenomicEncoder(model)


__all__ = [
    "BatchEnsembleConv2d",
    "BatchEnsembleEncoder",
    "BatchEnsembleLinear",
    "CifarResNetConfig",
    "CifarResNetModel",
    "Encoder",
    "GenomicEncoder",
    "GenomicEncoderConfig",
    "GenomicEncoderModel",
    "POOLINGS",
    "TimmEncoder",
    "TransformersTextEncoder",
    "TransformersVisionEncoder",
    "build_encoder",
    "convert_to_batch_ensemble",
    "dropout_rate",
    "encoder_config_from_pretrained",
    "load_encoder_weights",
    "masked_mean",
]

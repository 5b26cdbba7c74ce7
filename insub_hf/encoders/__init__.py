"""Encoders behind one interface (`Encoder`): inputs of one modality -> representation `(B, d)`."""

from __future__ import annotations

from .base import POOLINGS, Encoder
from .batch_ensemble import BatchEnsembleConv2d, BatchEnsembleEncoder, BatchEnsembleLinear, convert_to_batch_ensemble
from .build import build_encoder
from .configuration_genomic import GenomicEncoderConfig
from .configuration_resnet_cifar import CifarResNetConfig
from .modeling_genomic import GenomicEncoder, GenomicEncoderModel
from .modeling_resnet_cifar import CifarResNetModel
from .pretrained import encoder_config_from_pretrained, load_encoder_weights
from .text import TransformersTextEncoder, dropout_rate, masked_mean
from .vision import TimmEncoder, TransformersVisionEncoder

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

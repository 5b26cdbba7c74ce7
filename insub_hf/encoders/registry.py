"""The encoder families an InSub model can be built on. A repo's remote-code copy of this module lists its model's
family only (`insub_hf.hub.remote_code.encoder_registry_source`), so a ResNet image model ships no text or DNA code."""

from __future__ import annotations

from .base import register_own_encoders
from .batch_ensemble import BatchEnsembleEncoder
from .configuration_genomic import GenomicEncoderConfig
from .configuration_resnet_cifar import CifarResNetConfig
from .modeling_genomic import GenomicEncoder, GenomicEncoderModel
from .modeling_resnet_cifar import CifarResNetModel
from .text import TransformersTextEncoder
from .vision import TimmEncoder, TransformersVisionEncoder

# the package's own encoder models: (config class, model class)
OWN_ENCODERS = ((GenomicEncoderConfig, GenomicEncoderModel), (CifarResNetConfig, CifarResNetModel))
# the adapter around a transformers model, by the input it reads (its `main_input_name`)
ADAPTERS = {adapter.main_input_name: adapter for adapter in (
    TransformersVisionEncoder, TransformersTextEncoder, GenomicEncoder,
)}
TIMM_ENCODER = TimmEncoder  # InSubConfig.timm_model_name
BATCH_ENSEMBLE = BatchEnsembleEncoder  # InSubConfig.batch_ensemble_size > 1

register_own_encoders(OWN_ENCODERS)

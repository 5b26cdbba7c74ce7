"""insub-hf: uncertainty-aware self-supervised models with an ensemble of independent sub-networks (InSub)."""

from transformers import AutoConfig, AutoModel, AutoModelForPreTraining

from .configuration_insub import InSubConfig
from .encoders import (
    Encoder,
    GenomicEncoderConfig,
    GenomicEncoderModel,
    build_encoder,
)
from .heads import BatchedHeads
from .losses import DiversityLoss, NTXentLoss, diversity_hinge, head_spread, nt_xent_loss
from .modeling_insub import (
    InSubForPreTraining,
    InSubForPreTrainingOutput,
    InSubModel,
    InSubModelOutput,
    InSubPreTrainedModel,
)

__version__ = "0.1.0"

# Registering with the Auto classes is what lets AutoModel.from_pretrained(dir) find the InSub classes.
AutoConfig.register(InSubConfig.model_type, InSubConfig, exist_ok=True)
AutoModel.register(InSubConfig, InSubModel, exist_ok=True)
AutoModelForPreTraining.register(InSubConfig, InSubForPreTraining, exist_ok=True)

__all__ = [
    "BatchedHeads",
    "DiversityLoss",
    "Encoder",
    "GenomicEncoderConfig",
    "GenomicEncoderModel",
    "InSubConfig",
    "InSubForPreTraining",
    "InSubForPreTrainingOutput",
    "InSubModel",
    "InSubModelOutput",
    "InSubPreTrainedModel",
    "NTXentLoss",
    "__version__",
    "build_encoder",
    "diversity_hinge",
    "head_spread",
    "nt_xent_loss",
]

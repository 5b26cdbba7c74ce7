"""insub-hf: uncertainty-aware self-supervised models with an ensemble of independent sub-networks (InSub)."""

from transformers import AutoConfig, AutoModel, AutoModelForPreTraining

from .callbacks import KNNReportCallback
from .checkpointing import save_pretrained_atomic
from .configuration_insub import InSubConfig
from .data import (
    DNAViews,
    ImageViews,
    ImageWithLabel,
    TextViews,
    eval_image_transform,
    load_fashion_mnist,
    load_image_dataset,
    simclr_augmentation,
)
from .encoders import (
    Encoder,
    GenomicEncoderConfig,
    GenomicEncoderModel,
    build_encoder,
)
from .evaluation import extract_representations, knn_accuracy
from .heads import BatchedHeads
from .losses import DiversityLoss, NTXentLoss, diversity_hinge, head_spread, nt_xent_loss
from .modeling_insub import (
    InSubForPreTraining,
    InSubForPreTrainingOutput,
    InSubModel,
    InSubModelOutput,
    InSubPreTrainedModel,
)
from .trainer import InSubTrainer, InSubTrainingArguments

__version__ = "0.1.0"

# Registering with the Auto classes is what lets AutoModel.from_pretrained(dir) find the InSub classes.
AutoConfig.register(InSubConfig.model_type, InSubConfig, exist_ok=True)
AutoModel.register(InSubConfig, InSubModel, exist_ok=True)
AutoModelForPreTraining.register(InSubConfig, InSubForPreTraining, exist_ok=True)

__all__ = [
    "BatchedHeads",
    "DNAViews",
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
    "InSubTrainer",
    "InSubTrainingArguments",
    "ImageViews",
    "ImageWithLabel",
    "KNNReportCallback",
    "NTXentLoss",
    "TextViews",
    "__version__",
    "build_encoder",
    "diversity_hinge",
    "eval_image_transform",
    "extract_representations",
    "head_spread",
    "knn_accuracy",
    "load_fashion_mnist",
    "load_image_dataset",
    "nt_xent_loss",
    "save_pretrained_atomic",
    "simclr_augmentation",
]

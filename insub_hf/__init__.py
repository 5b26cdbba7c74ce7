"""insub-hf: uncertainty-aware self-supervised models with an ensemble of independent sub-networks (InSub)."""

from transformers import AutoConfig, AutoModel, AutoModelForPreTraining, AutoModelForSequenceClassification

from .callbacks import KNNReportCallback
from .checkpointing import save_pretrained_atomic
from .configuration_insub import InSubConfig
from .data import (
    DNAViews,
    ImageViews,
    ImageWithLabel,
    MultiCropViews,
    TextViews,
    dino_augmentation,
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
from .dino import DINOScheduleCallback, cosine_momentum, ema_update_, teacher_temperature
from .evaluation import extract_representations, knn_accuracy
from .heads import BatchedHeads, WeightNormedLinear
from .losses import DINOLoss, DiversityLoss, NTXentLoss, dino_loss, diversity_hinge, head_spread, nt_xent_loss
from .modeling_insub import (
    InSubForPreTraining,
    InSubForPreTrainingOutput,
    InSubForSequenceClassification,
    InSubModel,
    InSubModelOutput,
    InSubPreTrainedModel,
)
from .pretrained_encoders import encoder_config_from_pretrained, load_encoder_weights
from .trainer import InSubTrainer, InSubTrainingArguments

__version__ = "0.1.0"

# Registering with the Auto classes is what lets AutoModel.from_pretrained(dir) find the InSub classes.
AutoConfig.register(InSubConfig.model_type, InSubConfig, exist_ok=True)
AutoModel.register(InSubConfig, InSubModel, exist_ok=True)
AutoModelForPreTraining.register(InSubConfig, InSubForPreTraining, exist_ok=True)
AutoModelForSequenceClassification.register(InSubConfig, InSubForSequenceClassification, exist_ok=True)

__all__ = [
    "BatchedHeads",
    "DINOLoss",
    "DINOScheduleCallback",
    "DNAViews",
    "DiversityLoss",
    "Encoder",
    "GenomicEncoderConfig",
    "GenomicEncoderModel",
    "InSubConfig",
    "InSubForPreTraining",
    "InSubForPreTrainingOutput",
    "InSubForSequenceClassification",
    "InSubModel",
    "InSubModelOutput",
    "InSubPreTrainedModel",
    "InSubTrainer",
    "InSubTrainingArguments",
    "ImageViews",
    "ImageWithLabel",
    "KNNReportCallback",
    "MultiCropViews",
    "NTXentLoss",
    "TextViews",
    "__version__",
    "WeightNormedLinear",
    "build_encoder",
    "cosine_momentum",
    "dino_augmentation",
    "dino_loss",
    "diversity_hinge",
    "ema_update_",
    "encoder_config_from_pretrained",
    "eval_image_transform",
    "extract_representations",
    "head_spread",
    "knn_accuracy",
    "load_encoder_weights",
    "load_fashion_mnist",
    "load_image_dataset",
    "nt_xent_loss",
    "save_pretrained_atomic",
    "simclr_augmentation",
    "teacher_temperature",
]

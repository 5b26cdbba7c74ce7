"""insub-hf: uncertainty-aware self-supervised models with an ensemble of independent sub-networks (InSub).

Importing the package registers the InSub classes with the Auto classes (config and models only); every other
public name is imported when first used (PEP 562), so `import insub_hf` does not load the trainer, the data loaders,
the evaluation harness or the Hub tools.
"""

from transformers import AutoConfig, AutoModel, AutoModelForPreTraining, AutoModelForSequenceClassification

from .configuration_insub import InSubConfig
from .lazy_exports import lazy_exports
from .modeling_insub import InSubForPreTraining, InSubForSequenceClassification, InSubModel

__version__ = "0.1.0"

# Registering with the Auto classes is what lets AutoModel.from_pretrained(dir) find the InSub classes.
AutoConfig.register(InSubConfig.model_type, InSubConfig, exist_ok=True)
AutoModel.register(InSubConfig, InSubModel, exist_ok=True)
AutoModelForPreTraining.register(InSubConfig, InSubForPreTraining, exist_ok=True)
AutoModelForSequenceClassification.register(InSubConfig, InSubForSequenceClassification, exist_ok=True)

_EXPORTS = {
    # models
    "InSubForPreTrainingOutput": ".modeling_insub",
    "InSubModelOutput": ".modeling_insub",
    "InSubPreTrainedModel": ".modeling_insub",
    # encoders and heads
    "Encoder": ".encoders",
    "GenomicEncoderConfig": ".encoders",
    "GenomicEncoderModel": ".encoders",
    "build_encoder": ".encoders",
    "encoder_config_from_pretrained": ".encoders",
    "load_encoder_weights": ".encoders",
    "BatchedHeads": ".heads",
    "WeightNormedLinear": ".heads",
    # losses and objectives
    "DINOLoss": ".losses",
    "DiversityLoss": ".losses",
    "NTXentLoss": ".losses",
    "dino_loss": ".losses",
    "diversity_hinge": ".losses",
    "head_spread": ".losses",
    "nt_xent_loss": ".losses",
    "OBJECTIVES": ".objectives",
    "Objective": ".objectives",
    "ObjectiveOutput": ".objectives",
    "cosine_momentum": ".objectives",
    "ema_update_": ".objectives",
    "teacher_temperature": ".objectives",
    # data
    "DNAViews": ".data",
    "ImageViews": ".data",
    "ImageWithLabel": ".data",
    "MultiCropViews": ".data",
    "TextViews": ".data",
    "dino_augmentation": ".data",
    "eval_image_transform": ".data",
    "load_fashion_mnist": ".data",
    "load_image_dataset": ".data",
    "simclr_augmentation": ".data",
    # training
    "InSubTrainer": ".trainer",
    "InSubTrainingArguments": ".trainer",
    "ObjectiveStepCallback": ".trainer",
    "save_pretrained_atomic": ".checkpointing",
    # evaluation and use
    "extract_representations": ".evaluation",
    "knn_accuracy": ".evaluation",
    "InSubSentenceEncoder": ".sentence_embeddings",
    "KNNReportCallback": ".jobs.callbacks",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = sorted(
    ["InSubConfig", "InSubForPreTraining", "InSubForSequenceClassification", "InSubModel", "__version__", *_EXPORTS]
)

"""insub-hf: uncertainty-aware self-supervised models with an ensemble of independent sub-networks (InSub).

Importing the package registers the InSub classes with the Auto classes (config, models, image processor) and changes
nothing else in other libraries: the pipelines that read 16-bit images by their bit depth are opt-in
(`pipeline(..., pipeline_class=InSubImageFeatureExtractionPipeline)`, or `register_pipelines()` for every pipeline of
the two tasks). Every other public name is imported when first used (PEP 562), so `import insub_hf` does not load the
trainer, the data loaders, the evaluation harness or the Hub tools.
"""

from transformers import (
    AutoConfig,
    AutoImageProcessor,
    AutoModel,
    AutoModelForImageClassification,
    AutoModelForPreTraining,
    AutoModelForSequenceClassification,
)

from .model.configuration_insub import InSubConfig
from .encoders.presets import NAMED_ENCODERS, named_encoder
from .processing.image_processing_insub import InSubImageProcessor
from .processing.image_processing_pil_insub import InSubImageProcessorPil
from .compat import install_former_paths
from .lazy_exports import lazy_exports
from .model.modeling_classification import InSubForImageClassification, InSubForSequenceClassification
from .model.modeling_insub import InSubForPreTraining, InSubModel
from .version import __version__

# Registering with the Auto classes is what lets AutoModel.from_pretrained(dir) find the InSub classes.
AutoConfig.register(InSubConfig.model_type, InSubConfig, exist_ok=True)
AutoModel.register(InSubConfig, InSubModel, exist_ok=True)
AutoModelForPreTraining.register(InSubConfig, InSubForPreTraining, exist_ok=True)
AutoModelForSequenceClassification.register(InSubConfig, InSubForSequenceClassification, exist_ok=True)
AutoModelForImageClassification.register(InSubConfig, InSubForImageClassification, exist_ok=True)
AutoImageProcessor.register(
    InSubConfig, image_processor_classes={"torchvision": InSubImageProcessor, "pil": InSubImageProcessorPil}, exist_ok=True
)

_EXPORTS = {
    ".model.modeling_classification": ("InSubImageClassifierOutput",),
    ".model.modeling_insub": ("InSubPreTrainedModel",),
    ".model.modeling_outputs": ("InSubForPreTrainingOutput", "InSubModelOutput"),
    ".encoders": (
        "CifarResNetConfig", "CifarResNetModel", "Encoder", "GenomicEncoderConfig", "GenomicEncoderModel", "build_encoder", "encoder_config_from_pretrained",
        "load_encoder_weights",
    ),
    ".model.heads": ("BatchedHeads",),
    ".objectives.dino": ("WeightNormedLinear",),
    ".losses": ("DINOLoss", "DiversityLoss", "NTXentLoss", "dino_loss", "diversity_hinge", "head_spread", "nt_xent_loss"),
    ".objectives": ("OBJECTIVES", "Objective", "ObjectiveOutput", "cosine_momentum", "ema_update_", "teacher_temperature"),
    ".data": (
        "BatchMultiCropViews", "BatchTwoViews", "DNAViews", "ImageViews", "ImageWithLabel", "MultiCropViews", "TextViews", "dino_augmentation",
        "eval_image_transform", "image_tensor_dataset", "load_fashion_mnist", "load_image_dataset", "simclr_augmentation",
    ),
    ".training.trainer": ("InSubTrainer", "InSubTrainingArguments", "ObjectiveStepCallback"),
    ".checkpointing": ("save_pretrained_atomic",),
    ".hub.model_card": ("HubCard",),
    ".evaluation": ("InSubOODDetector", "extract_representations", "knn_accuracy"),
    ".model.sentence_embeddings": ("InSubSentenceEncoder",),
    ".uncertainty.pvalues": ("OutlierSelection", "conformal_pvalues", "model_pvalues", "outliers_among", "select_outliers"),
    ".uncertainty.drift": ("DriftMonitor",),
    ".jobs.callbacks": ("KNNReportCallback",),
    ".processing.pipelines": ("InSubImageClassificationPipeline", "InSubImageFeatureExtractionPipeline", "register_pipelines"),
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
# Where modules stood in earlier versions (`insub_hf.configuration_insub`, ...): each imports, warning once
install_former_paths(__name__)

__all__ = sorted([
    "InSubConfig", "InSubForImageClassification", "InSubForPreTraining", "InSubImageProcessor", "InSubImageProcessorPil",
    "InSubForSequenceClassification", "InSubModel", "NAMED_ENCODERS",
    "__version__", "named_encoder",
    *(name for names in _EXPORTS.values() for name in names),
])

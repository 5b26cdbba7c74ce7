"""Data: views per modality, data set loading and the bundled offline default."""

from .columns import check_dataset
from .dna_views import DNAViews, one_hot_dna, random_crop, reverse_complement
from .image_datasets import (
    FASHION_MNIST_CLASSES,
    IMAGE_DATASET_PRESETS,
    ImageDatasetPreset,
    balanced_indices,
    load_fashion_mnist,
    load_image_dataset,
)
from .image_views import (
    IMAGE_STATS,
    ImageViews,
    ImageWithLabel,
    MultiCropViews,
    default_local_crop_size,
    dino_augmentation,
    eval_image_transform,
    simclr_augmentation,
    unit_image_transform,
)
from .text_views import TextViews

__all__ = [
    "DNAViews",
    "TextViews",
    "one_hot_dna",
    "random_crop",
    "reverse_complement",
    "FASHION_MNIST_CLASSES",
    "IMAGE_DATASET_PRESETS",
    "IMAGE_STATS",
    "ImageDatasetPreset",
    "ImageViews",
    "ImageWithLabel",
    "MultiCropViews",
    "default_local_crop_size",
    "dino_augmentation",
    "balanced_indices",
    "check_dataset",
    "eval_image_transform",
    "load_fashion_mnist",
    "load_image_dataset",
    "simclr_augmentation",
    "unit_image_transform",
]

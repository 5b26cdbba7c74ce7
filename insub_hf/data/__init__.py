"""Data: views per modality, data set loading and the bundled offline default."""

from .columns import check_dataset
from .dna_io import (
    SPLICE_LABELS,
    bundled_upstream_path,
    fasta_windows,
    load_fasta_dataset,
    load_labelled_sequences,
    load_splice_junctions,
    read_fasta,
)
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
from .text_corpus import TWEET_LABELS, load_sentence_corpus, load_tweet_sentiment
from .text_views import SentenceTokenizer, TextViews, check_tokenizer

__all__ = [
    "DNAViews",
    "SPLICE_LABELS",
    "bundled_upstream_path",
    "fasta_windows",
    "load_fasta_dataset",
    "load_labelled_sequences",
    "load_splice_junctions",
    "read_fasta",
    "SentenceTokenizer",
    "TWEET_LABELS",
    "TextViews",
    "check_tokenizer",
    "load_sentence_corpus",
    "load_tweet_sentiment",
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

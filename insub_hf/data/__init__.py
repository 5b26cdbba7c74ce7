"""Data: views per modality, data set loading and the bundled offline default.

Names are imported when first used (PEP 562)."""

from __future__ import annotations

from ..lazy_exports import lazy_exports

_EXPORTS = {
    "check_dataset": ".columns",
    "SPLICE_LABELS": ".dna_io",
    "bundled_upstream_path": ".dna_io",
    "fasta_windows": ".dna_io",
    "load_fasta_dataset": ".dna_io",
    "load_labelled_sequences": ".dna_io",
    "load_splice_junctions": ".dna_io",
    "read_fasta": ".dna_io",
    "DNAViews": ".dna_views",
    "one_hot_dna": ".dna_views",
    "random_crop": ".dna_views",
    "reverse_complement": ".dna_views",
    "FASHION_MNIST_CLASSES": ".image_datasets",
    "IMAGE_DATASET_PRESETS": ".image_datasets",
    "ImageDatasetPreset": ".image_datasets",
    "balanced_indices": ".image_datasets",
    "load_fashion_mnist": ".image_datasets",
    "load_image_dataset": ".image_datasets",
    "IMAGE_STATS": ".image_views",
    "ImageViews": ".image_views",
    "ImageWithLabel": ".image_views",
    "MultiCropViews": ".image_views",
    "default_local_crop_size": ".image_views",
    "dino_augmentation": ".image_views",
    "eval_image_transform": ".image_views",
    "simclr_augmentation": ".image_views",
    "unit_image_transform": ".image_views",
    "TWEET_LABELS": ".text_corpus",
    "load_sentence_corpus": ".text_corpus",
    "load_tweet_sentiment": ".text_corpus",
    "SentenceTokenizer": ".text_views",
    "TextViews": ".text_views",
    "check_tokenizer": ".text_views",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = sorted(_EXPORTS)

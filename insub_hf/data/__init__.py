"""Data: views per modality, data set loading and the bundled offline default.

Names are imported when first used (PEP 562)."""

from __future__ import annotations

from ..lazy_exports import lazy_exports

_EXPORTS = {
    ".batch_views": ("BatchMultiCropViews", "BatchTwoViews", "image_tensor_dataset"),
    ".columns": ("check_dataset",),
    ".device_images": ("DeviceImages", "collate_device_batch"),
    ".dna_io": (
        "SPLICE_LABELS", "bundled_upstream_path", "fasta_windows", "load_fasta_dataset", "load_labelled_sequences",
        "load_splice_junctions", "read_fasta",
    ),
    ".dna_views": ("DNAViews", "one_hot_dna", "random_crop", "reverse_complement"),
    ".image_datasets": (
        "FASHION_MNIST_CLASSES", "IMAGE_DATASET_PRESETS", "ImageDatasetPreset", "balanced_indices",
        "load_fashion_mnist", "fashion_mnist_tensors", "load_image_dataset", "ImageDataArguments",
        "resolve_fashion_mnist_source",
        "fashion_mnist_description",
    ),
    ".image_views": (
        "IMAGE_STATS", "ImageViews", "ImageWithLabel", "MultiCropViews", "default_local_crop_size",
        "dino_augmentation", "eval_image_transform", "simclr_augmentation", "unit_image_transform",
    ),
    ".seeding": ("SeededSamples", "mix_seed", "seeded_draws"),
    ".text_corpus": ("TWEET_LABELS", "load_sentence_corpus", "load_tweet_sentiment"),
    ".text_views": ("SentenceTokenizer", "TextViews", "check_tokenizer"),
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = sorted(name for names in _EXPORTS.values() for name in names)

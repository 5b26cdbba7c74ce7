"""Image data sets: the real `load_dataset` path (CIFAR-10/100, SVHN, any image data set or local folder),
and the bundled Fashion-MNIST default that works offline."""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import torch
from datasets import ClassLabel, Dataset, DatasetDict, Features, Image, load_dataset
from PIL import Image as PILImage
from torch.utils.data import DataLoader

from ..processing.image_processing_insub import InSubImageProcessor
from ..validation import CheckedArguments, check_choice, checked
from .columns import check_dataset
from .image_views import (
    IMAGE_STATS,
    ImageWithLabel,
    dino_augmentation,
    eval_image_transform,
    simclr_augmentation,
    unit_image_transform,
)


@dataclass(frozen=True)
class ImageDatasetPreset:
    """How a known data set is laid out: columns, image geometry and normalisation key."""

    image_column: str
    label_column: str
    image_size: int
    num_channels: int
    stats: str
    config_name: str | None = None

    def augmentation(self):
        """SimCLR training views for this data set (see `simclr_augmentation`)."""
        return simclr_augmentation(
            self.image_size, *IMAGE_STATS[self.stats], num_channels=self.num_channels, column=self.image_column
        )

    def multicrop(self, local_size: int | None = None):
        """DINO's (global, global, local) crops for this data set (see `dino_augmentation`)."""
        return dino_augmentation(
            self.image_size, *IMAGE_STATS[self.stats], num_channels=self.num_channels, local_size=local_size,
            column=self.image_column,
        )

    def eval_transform(self):
        """The test-time transform for this data set (see `eval_image_transform`)."""
        return eval_image_transform(
            self.image_size, *IMAGE_STATS[self.stats], num_channels=self.num_channels, column=self.image_column
        )

    def normalization(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Per-channel (mean, std)."""
        return IMAGE_STATS[self.stats]

    def image_processor(self):
        """The `InSubImageProcessor` of models trained on this data set (saved with their checkpoints): the test
        transform's resize, crop and normalisation, for `AutoImageProcessor` and the pipelines."""
        return InSubImageProcessor.for_images(self.image_size, self.num_channels, *self.normalization())

    def to_tensors(self, dataset: Dataset, batch_size: int = 1000) -> tuple[torch.Tensor, torch.Tensor | None]:
        """All images of `dataset` as `(N, C, H, W)` floats in [0, 1] (resized, not normalised) and the labels
        `(N,)` (None when the data set has no label column)."""
        has_labels = self.label_column in dataset.column_names
        rows = dataset.with_transform(
            ImageWithLabel(
                unit_image_transform(self.image_size, self.num_channels, self.image_column), self.image_column,
                self.label_column if has_labels else None,
            )
        )
        images, labels = [], []
        for batch in DataLoader(rows, batch_size=batch_size):
            images.append(batch["pixel_values"])
            if has_labels:
                labels.append(torch.as_tensor(batch["labels"]))
        return torch.cat(images), torch.cat(labels) if has_labels else None


IMAGE_DATASET_PRESETS: dict[str, ImageDatasetPreset] = {
    "uoft-cs/cifar10": ImageDatasetPreset("img", "label", 32, 3, "cifar10"),
    "uoft-cs/cifar100": ImageDatasetPreset("img", "fine_label", 32, 3, "cifar100"),
    "ufldl-stanford/svhn": ImageDatasetPreset("image", "label", 32, 3, "svhn", config_name="cropped_digits"),
    "fashion_mnist": ImageDatasetPreset("image", "label", 28, 1, "fashion_mnist"),
    # an ImageNet-style folder (`load_dataset("imagefolder", data_dir=...)`) or a Hub copy with image/label columns
    "imagenet": ImageDatasetPreset("image", "label", 224, 3, "imagenet"),
}
IMAGE_DATASET_PRESETS["cifar10"] = IMAGE_DATASET_PRESETS["uoft-cs/cifar10"]
IMAGE_DATASET_PRESETS["cifar100"] = IMAGE_DATASET_PRESETS["uoft-cs/cifar100"]
IMAGE_DATASET_PRESETS["svhn"] = IMAGE_DATASET_PRESETS["ufldl-stanford/svhn"]
IMAGE_DATASET_PRESETS["zalando-datasets/fashion_mnist"] = IMAGE_DATASET_PRESETS["fashion_mnist"]  # its Hub id

FASHION_MNIST_CLASSES = [
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
]
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
# Another folder holding the same four IDX files (a machine without the Debian package, e.g. a carried copy)
FASHION_MNIST_DIR_VARIABLE = "INSUB_HF_FASHION_MNIST"


def full_fashion_mnist_dir() -> Path:
    """Where the full Fashion-MNIST IDX files are read from: `$INSUB_HF_FASHION_MNIST` when set, else Debian's
    dataset-fashion-mnist folder."""
    return Path(os.environ.get(FASHION_MNIST_DIR_VARIABLE) or DEBIAN_FASHION_MNIST)
FASHION_MNIST_SOURCES = ("auto", "bundled", "debian")


# How `load_image_dataset` reads a single local file, by suffix
FILE_BUILDERS = {
    ".csv": "csv", ".csv.gz": "csv", ".json": "json", ".jsonl": "json", ".json.gz": "json", ".parquet": "parquet",
    ".arrow": "arrow",
}


def load_image_dataset(
    name_or_path: str,
    split: str | None = None,
    preset: str | None = None,
    image_column: str | None = None,
    label_column: str | None = None,
    **load_kwargs,
) -> Dataset | DatasetDict:
    """Loads an image data set with `datasets.load_dataset` and checks its columns.

    Args:
        name_or_path: a Hub name (`"uoft-cs/cifar10"`) or a local folder/file `load_dataset` understands.
        split: a split to return (`"train"`); all splits when None.
        preset: key of `IMAGE_DATASET_PRESETS` giving column names and config (defaults to `name_or_path`
            when it is a known name).
        image_column, label_column: override the preset's columns (label may be absent for pretraining).

    Returns:
        The `Dataset` (or `DatasetDict`) as `load_dataset` gives it, checked to hold the image column.
    """
    known = IMAGE_DATASET_PRESETS.get(preset or name_or_path)
    if preset is not None and known is None:
        check_choice("preset", preset, sorted(IMAGE_DATASET_PRESETS))
    image_column = image_column or (known.image_column if known else "image")
    if known and known.config_name and "name" not in load_kwargs and not Path(name_or_path).exists():
        load_kwargs["name"] = known.config_name
    path = Path(name_or_path)
    if path.is_file():  # load_dataset reads a single file through the builder of its format
        suffix = "".join(path.suffixes[-2:]) if path.suffix == ".gz" else path.suffix
        builder = FILE_BUILDERS.get(suffix.lower())
        if builder is None:
            raise ValueError(
                f"load_image_dataset({name_or_path!r}): a single file must be one of {sorted(FILE_BUILDERS)}; "
                "for image files, pass their folder (with 'imagefolder')."
            )
        load_kwargs.setdefault("data_files", str(path))
        name_or_path = builder
    loaded = load_dataset(name_or_path, split=split, **load_kwargs)
    for split_name, part in (loaded.items() if isinstance(loaded, DatasetDict) else [(split, loaded)]):
        check_dataset(part, image_column, "image_column", name=f"{name_or_path} [{split_name or 'split'}]")
        if label_column is not None:
            check_dataset(part, label_column, "label_column", name=f"{name_or_path} [{split_name or 'split'}]")
    return loaded



@dataclass
class ImageDataArguments(CheckedArguments):
    """Which images a pretraining script reads (an argument group for HfArgumentParser)."""

    dataset: str = field(default="uoft-cs/cifar10", metadata={"help": "load_dataset name, 'imagefolder' or a path."})
    data_dir: str | None = field(default=None, metadata={"help": "Folder of class sub-folders for 'imagefolder'."})
    preset: str | None = field(
        default=None, metadata={"help": "Layout and statistics of a local copy: cifar10, cifar100, svhn, imagenet, ..."}
    )
    split: str = field(default="train", metadata={"help": "Split to pretrain on."})
    max_samples: int | None = checked(None, "Use only the first N images.", low=1, integer=True, optional=True)

    def load(self) -> tuple[Dataset, ImageDatasetPreset]:
        """The split, and the preset that describes it (columns, size, statistics, augmentations)."""
        known = IMAGE_DATASET_PRESETS.get(self.preset or self.dataset)
        if known is None:
            check_choice("ImageDataArguments.preset", self.preset or self.dataset, sorted(IMAGE_DATASET_PRESETS))
        extra = {"data_dir": self.data_dir} if self.data_dir else {}
        images = load_image_dataset(self.dataset, split=self.split, preset=self.preset, **extra)
        if self.max_samples:
            images = images.select(range(min(self.max_samples, len(images))))
        return images, known

def _read_idx(path: Path, offset: int) -> np.ndarray:
    return np.frombuffer(gzip.open(path).read(), np.uint8, offset=offset)


def resolve_fashion_mnist_source(source: str) -> str:
    """`"debian"` or `"bundled"`: what `source` (`auto`, `bundled`, `debian`) reads on this machine."""
    check_choice("source", source, FASHION_MNIST_SOURCES)
    folder = full_fashion_mnist_dir()
    debian_present = (folder / "train-images-idx3-ubyte.gz").exists()
    if source == "debian" and not debian_present:
        raise FileNotFoundError(
            f"source='debian' needs Debian's dataset-fashion-mnist package ({folder}; ${FASHION_MNIST_DIR_VARIABLE} "
            "names another folder with its four IDX files); install it with `apt-get install dataset-fashion-mnist` "
            "or use source='bundled'."
        )
    return "debian" if source == "debian" or (source == "auto" and debian_present) else "bundled"


def fashion_mnist_description(source: str) -> str:
    """Where Fashion-MNIST images come from, in words, for a resolved `source` (`"debian"` or `"bundled"`)."""
    return (
        "Fashion-MNIST (Debian's dataset-fashion-mnist)" if source == "debian" else
        "the bundled Fashion-MNIST subset (5,000 / 1,000 images; `apt-get install dataset-fashion-mnist` for the "
        "full 60,000 / 10,000)"
    )


def _fashion_mnist_arrays(source: str) -> dict[str, np.ndarray]:
    if resolve_fashion_mnist_source(source) == "debian":
        arrays, folder = {}, full_fashion_mnist_dir()
        for split, prefix in (("train", "train"), ("test", "t10k")):
            arrays[f"{split}_images"] = _read_idx(folder / f"{prefix}-images-idx3-ubyte.gz", 16)
            arrays[f"{split}_images"] = arrays[f"{split}_images"].reshape(-1, 28, 28)
            arrays[f"{split}_labels"] = _read_idx(folder / f"{prefix}-labels-idx1-ubyte.gz", 8)
        return arrays
    with resources.files("insub_hf.data").joinpath("bundled/fashion_mnist_subset.npz").open("rb") as f:
        return dict(np.load(f))


def balanced_indices(labels: np.ndarray, per_class: int | None, seed: int) -> np.ndarray:
    """Sorted indices of a seeded draw of `per_class` samples of every class (all when None)."""
    if per_class is None:
        return np.arange(len(labels))
    rng = np.random.default_rng(seed)
    picks = [rng.permutation(np.flatnonzero(labels == c))[:per_class] for c in np.unique(labels)]
    return np.sort(np.concatenate(picks))


def load_fashion_mnist(
    source: str = "auto", train_per_class: int | None = None, test_per_class: int | None = None, seed: int = 0
) -> DatasetDict:
    """Real Fashion-MNIST images, offline: `image` (28x28 grey PIL) and `label` (10 classes).

    Args:
        source: `"bundled"` (5,000 train / 1,000 test shipped with the package), `"debian"` (the full 60k/10k from
            Debian's dataset-fashion-mnist) or `"auto"` (Debian's when installed, else bundled).
        train_per_class, test_per_class: draw a seeded class-balanced subset of this many images per class.
        seed: seed of that draw.
    """
    features = Features({"image": Image(), "label": ClassLabel(names=FASHION_MNIST_CLASSES)})
    splits = {}
    for split, (images, labels) in _fashion_mnist_splits(source, train_per_class, test_per_class, seed).items():
        pil = [PILImage.fromarray(im, mode="L") for im in images]
        splits[split] = Dataset.from_dict({"image": pil, "label": labels.tolist()}, features=features)
    return DatasetDict(splits)


def _fashion_mnist_splits(
    source: str, train_per_class: int | None, test_per_class: int | None, seed: int
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """split -> (images `(N, 28, 28)` uint8, labels `(N,)`) of the seeded class-balanced draw."""
    arrays = _fashion_mnist_arrays(source)
    out = {}
    for split, per_class in (("train", train_per_class), ("test", test_per_class)):
        labels = arrays[f"{split}_labels"]
        idx = balanced_indices(labels, per_class, seed)
        out[split] = arrays[f"{split}_images"][idx], labels[idx]
    return out


def fashion_mnist_tensors(
    source: str = "auto", train_per_class: int | None = None, test_per_class: int | None = None, seed: int = 0
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The images of `load_fashion_mnist` (same arguments, same draw) as tensors, without a PIL image per sample:
    split -> (images `(N, 1, 28, 28)` float32 in [0, 1], labels `(N,)` int64), what
    `IMAGE_DATASET_PRESETS["fashion_mnist"].to_tensors` gives of that split."""
    return {split: (torch.from_numpy(images).unsqueeze(1).float() / 255, torch.from_numpy(labels.astype(np.int64)))
            for split, (images, labels) in _fashion_mnist_splits(source, train_per_class, test_per_class,
                                                                  seed).items()}

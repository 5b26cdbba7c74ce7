"""What `insub-hf score` reads: its model and data checked before any work (`ScoreArguments.__post_init__`), the
data loaded as a DatasetDict, one split drawn as the test split where the data has no other, and a split's inputs
and labels checked by column. `args` is the job's `score.ScoreArguments` throughout."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from datasets import DatasetDict, load_dataset, load_from_disk

from ..validation import looks_like_a_path

# Data of one split only: this share of it is drawn as the test split
TEST_SHARE = 0.2

def saved_dataset(folder: Path) -> bool:
    """Whether `folder` holds a DatasetDict written by `save_to_disk` (its `dataset_dict.json`)."""
    return (folder / "dataset_dict.json").is_file()


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


def check_model_source(model: str) -> None:
    """Refuses, before any work, a model that cannot load, naming it and what would: a path that is no folder, a
    folder without a model, a Hub id that offline mode cannot find in the cache."""
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.constants import is_offline_mode

    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(f"ScoreArguments.model={model!r}: the folder holds no config.json, so no transformers "
                             "model (save one there with save_pretrained, or name the model's folder).")
        if not any((path / name).is_file() for name in WEIGHT_FILES):
            raise ValueError(f"ScoreArguments.model={model!r}: the folder holds a config.json but no weights "
                             f"({', '.join(WEIGHT_FILES[::2])}): save the model there whole (save_pretrained).")
        return
    if looks_like_a_path(model):
        raise ValueError(f"ScoreArguments.model={model!r}: no such local folder (and not a Hub repo id of the form "
                         "ORG/NAME).")
    if is_offline_mode() and not isinstance(try_to_load_from_cache(model, "config.json"), str):
        raise ValueError(f"ScoreArguments.model={model!r}: HF_HUB_OFFLINE=1 is set and the repo is not in the "
                         f"Hugging Face cache: download it once with network access (`hf download {model}`), or name "
                         "a local folder.")


def check_data_source(name: str, data: str) -> None:
    """Refuses, before any work, data that cannot load, naming the flag and what would: a path that is no folder, a
    folder holding neither a `save_to_disk` dataset nor any image (imagefolder's extensions, in any sub-folder)."""
    from datasets.packaged_modules.imagefolder.imagefolder import ImageFolder

    path = Path(data).expanduser()
    if path.is_dir():
        if saved_dataset(path):
            return
        extensions = {extension.lower() for extension in ImageFolder.EXTENSIONS}
        if not any(p.suffix.lower() in extensions and p.is_file() for p in path.rglob("*")):
            raise ValueError(f"ScoreArguments.{name}={data!r}: the folder holds no images and no dataset_dict.json: "
                             "give a folder of images in class sub-folders (train/ and test/ optional), a folder "
                             "written by `save_to_disk`, or a datasets id.")
        return
    if looks_like_a_path(data):
        raise ValueError(f"ScoreArguments.{name}={data!r}: no such local folder: give a folder that exists, or a "
                         "datasets id (NAME or ORG/NAME).")


def load_data(name: str, args) -> DatasetDict:
    """A datasets id, a `save_to_disk` folder or an image folder, as a DatasetDict."""
    path = Path(name).expanduser()
    if path.is_dir():
        if saved_dataset(path):
            return load_from_disk(str(path))
        check_image_sizes(path)
        return load_dataset("imagefolder", data_dir=str(path))
    return load_dataset(name)


def check_image_sizes(folder: Path) -> None:
    """Refuses, naming the file, an image in `folder` past PIL's decompression-bomb limit (`Image.MAX_IMAGE_PIXELS`
    doubled, where PIL itself stops); reads headers only, before any work."""
    from PIL import Image

    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        try:
            Image.open(path).close()  # the header: PIL checks the size on open
        except Image.DecompressionBombError as error:
            raise ValueError(
                f"ScoreArguments.dataset: {path} is too large for PIL to open ({error}); downscale it, or raise "
                "PIL.Image.MAX_IMAGE_PIXELS in your own script if you trust the file."
            ) from None
        except OSError:
            continue  # not an image (a metadata file, a caption): the image folder loader decides


def with_test_split(data: DatasetDict, args) -> DatasetDict:
    """`data` as it is when it has the test split or other splits too; data of one split only (a folder of class
    sub-folders, a `save_to_disk` of one split) with a seeded `TEST_SHARE` of it as `--test_split`, stratified by
    label where every class has two rows, said in the output."""
    if args.test_split in data or len(data) != 1:
        return data
    (only,) = data
    rows = data[only]
    if len(rows) < 2:
        raise ValueError(f"ScoreArguments.dataset={args.dataset!r}: its one split {only!r} has {len(rows)} row(s), and "
                         f"the test split is drawn from it ({TEST_SHARE:.0%}): give 2 rows at least, or a "
                         f"{args.test_split!r} split of its own.")
    labels = rows.features.get(args.label_column)
    stratify = args.label_column if hasattr(labels, "num_classes") and min(
        np.bincount(rows[args.label_column])) >= 2 else None
    split = rows.train_test_split(test_size=TEST_SHARE, seed=args.seed, stratify_by_column=stratify)
    print(f"[score] {args.dataset} has one split ({only!r}, {len(rows)} rows) and no {args.test_split!r}: "
          f"{len(split['test'])} of its rows drawn at random (seed {args.seed}"
          f"{', stratified by label' if stratify else ''}) are the test split, the other {len(split['train'])} "
          f"the {args.train_split!r} split", flush=True)
    return DatasetDict({args.train_split: split["train"], args.test_split: split["test"]})


def check_test_classes(data: DatasetDict, args) -> None:
    """Refuses a test split holding classes the training split has none of (an image folder labels the class
    folders of both splits in one space): the probe could never predict them."""
    if args.train_split not in data or args.test_split not in data or any(
            args.label_column not in data[split].column_names for split in (args.train_split, args.test_split)):
        return
    names = getattr(data[args.test_split].features[args.label_column], "names", None)
    unseen = sorted(set(data[args.test_split][args.label_column]) - set(data[args.train_split][args.label_column]))
    if unseen:
        said = [names[i] for i in unseen] if names else unseen
        raise ValueError(f"ScoreArguments.dataset={args.dataset!r}: its {args.test_split!r} split has classes its "
                         f"{args.train_split!r} split lacks ({said}), which the probe could never predict: give both "
                         "splits the same classes.")


def modality(data: DatasetDict, split: str, args) -> str:
    """"image" or "text": which of `--image_column` and `--text_column` the split `split` holds (images first)."""
    if split not in data:
        raise ValueError(f"ScoreArguments: the data has no split {split!r}; it has {sorted(data)}.")
    columns = data[split].column_names
    for kind, column in (("image", args.image_column), ("text", args.text_column)):
        if column in columns:
            return kind
    raise ValueError(f"ScoreArguments: split {split!r} has neither the image column {args.image_column!r} nor the "
                     f"text column {args.text_column!r}; its columns are {columns} (--image_column, --text_column).")


def _split(data: DatasetDict, split: str, args, count: int, labelled: bool = True):
    """(images or texts, labels or None) of the first `count` rows of `split`, checked by name."""
    column = args.image_column if modality(data, split, args) == "image" else args.text_column
    rows = data[split]
    needed = [column] + ([args.label_column] if labelled else [])
    missing = [name for name in needed if name not in rows.column_names]
    folder = Path(args.dataset).expanduser()
    if (missing == [args.label_column] and column == args.image_column and folder.is_dir()
            and not saved_dataset(folder) and "label" not in rows.column_names):
        raise ValueError(f"ScoreArguments.dataset={args.dataset!r}: split {split!r} has no labels: an image folder "
                         "gives them by its class sub-folders, and this one has one class only (imagefolder labels "
                         "two or more); put the images in one sub-folder per class (DATA/cat/..., DATA/dog/...).")
    if missing:
        raise ValueError(f"ScoreArguments: split {split!r} has no column {missing[0]!r}; its columns are "
                         f"{rows.column_names} (--image_column, --text_column, --label_column).")
    rows = rows.select(range(min(count, len(rows))))
    labels = torch.as_tensor(rows[args.label_column]) if labelled else None
    return list(rows[column]), labels

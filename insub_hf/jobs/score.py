"""`insub-hf score MODEL --dataset DATA` (or `--model MODEL`): the harness's label-free and probe numbers for any image or text encoder,
given by Hub repo id or local folder: an InSub model, or a stock transformers encoder (`AutoModel` with its
`AutoImageProcessor`, or with its `AutoTokenizer` and mean pooling over the tokens, as sentence-transformers pools)
for everything but the heads' spread.

On the data a user names (a `datasets` id, a folder saved with `save_to_disk`, or a folder of images in class
sub-folders, with or without `train/` and `test/` above them: data with one split only has a seeded `TEST_SHARE` of
it drawn as the test split, said in the output), images or texts as its `--image_column` or `--text_column` says: a linear probe on the frozen features
(its accuracy, ECE, TACE, NLL, Brier, and ECE and NLL after a temperature fitted on a held-out tenth of the training
split), and OOD AUROC and FPR95 against another data set's test split, or else uniform noise images or the test
sentences with their words shuffled, by the probe's max probability, the label-free k-NN distance to the training
features (`kth_neighbour_distance`, k from the data unless `--knn_k` says) and, for an InSub model, its
`uncertainty`; each AUROC with its 90 % bootstrap interval, which says how little a small set measures; and the share
of the test split an InSub model's `uncertainty` flags above 0.95, beside the band that share falls in when the test
split is drawn as the model's calibration inputs were (`expected_flag_band`). Writes
`results.json` and `model_index.yaml` (a card's model-index block) to `--output_dir`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from datasets import DatasetDict, load_dataset, load_from_disk
from PIL import Image

from ..checkpointing import write_json
from ..encoders.text import masked_mean
from ..evaluation.flagging import FLAG_THRESHOLD, expected_flag_band, flag_rate, served_rows
from ..evaluation.harness import summarize
from ..evaluation.metrics import fit_temperature, fpr_at_tpr, ood_auroc
from ..evaluation.metrics.ood import auroc_interval
from ..evaluation.ood_detector import kth_neighbour_distance
from ..uncertainty.readings import is_calibrated
from ..uncertainty.settings import DEFAULT_K
from ..evaluation.probes import ProbeArguments, fit_probes, member_probabilities
from ..evaluation.text_ood_sets import shuffled_words
from ..hub.model_card import score_model_index
from ..validation import CheckedArguments, checked
from .outliers import listed_outliers, outliers_lines


@dataclass
class ScoreArguments(CheckedArguments):
    """What is scored, on what, and where the numbers go."""

    _argument_group_name = 'score'

    model: str = field(default=None, metadata={"help": "Required, or the first argument (`insub-hf score MODEL "
                                                       "--dataset DATA`). The model: a Hub repo id or a local folder "
                                                       "(an InSub model, or any transformers image or text "
                                                       "encoder)."})
    dataset: str = field(default=None, metadata={"help": "Required. The data: a datasets id, a folder saved with "
                                                         "save_to_disk, or a folder with one folder of images per "
                                                         "class (DATA/cat/1.png ...; or DATA/train/cat/... and "
                                                         "DATA/test/cat/...). Data with one split only: a seeded fifth "
                                                         "of it is the test split (said in the output)."})
    ood_dataset: str | None = field(default=None, metadata={"help": "OOD data (the same forms; its test split); "
                                                                    "default: uniform noise images."})
    train_split: str = field(default="train", metadata={"help": "The split the probe and the k-NN bank read."})
    test_split: str = field(default="test", metadata={"help": "The split that is scored."})
    image_column: str = field(default="image", metadata={"help": "The column holding the images (image data)."})
    text_column: str = field(default="text", metadata={"help": "The column holding the texts (text data, when the "
                                                              "data has no image column)."})
    label_column: str = field(default="label", metadata={"help": "The column holding the class labels."})
    max_train: int = checked(5000, "Training images read at most (the first ones).", low=20, integer=True)
    max_test: int = checked(2000, "Test and OOD images read at most.", low=10, integer=True)
    knn_k: int | None = checked(None, f"k of the k-NN distance (at most the training rows); default {DEFAULT_K}, "
                                "or the training rows less one where there are fewer (said in the output).", low=1,
                                integer=True, optional=True)
    batch_size: int = checked(128, "Images or texts per forward pass.", low=1, integer=True)
    max_length: int = checked(128, "Tokens per text at most (longer texts are truncated).", low=1, integer=True)
    seed: int = checked(0, "Seed of the probe and the noise images.", low=0, integer=True)
    trust_remote_code: bool = field(default=False, metadata={"help": "Run the model's own code from its repo (an "
                                                                     "InSub model where insub-hf is not the loader)."})
    fdr: float | None = checked(None, "List the scored split's outliers at this false discovery rate (in (0, 1), "
                                "e.g. 0.1; an InSub model with a fitted uncertainty): outliers.json and the output.",
                                low=0.0, high=1.0, low_inclusive=False, high_inclusive=False, optional=True)
    output_dir: str = field(default="runs/score", metadata={"help": "Where results.json and model_index.yaml go."})

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("model", "dataset"):
            if not getattr(self, name):
                raise ValueError(f"ScoreArguments.{name} is required: a Hub repo id or a local folder "
                                 f"(`insub-hf score MODEL --dataset DATA`).")
        if self.ood_dataset and (self.ood_dataset == self.dataset or Path(self.ood_dataset).expanduser().resolve()
                                 == Path(self.dataset).expanduser().resolve()):
            raise ValueError(f"ScoreArguments.ood_dataset={self.ood_dataset!r} is the in-distribution data itself "
                             "(--dataset): give other data as --ood_dataset, or leave it out (uniform noise).")
        if self.knn_k is not None and self.knn_k > self.max_train:
            raise ValueError(f"ScoreArguments.knn_k={self.knn_k} is more than max_train={self.max_train}.")
        if Path(self.output_dir).exists() and not Path(self.output_dir).is_dir():
            raise ValueError(f"ScoreArguments.output_dir={self.output_dir!r} is a file; results.json and "
                             "model_index.yaml go into a folder: name a folder (--output_dir).")
        check_model_source(self.model)
        for name in ("dataset", "ood_dataset"):
            if getattr(self, name):
                check_data_source(name, getattr(self, name))


# Data of one split only: this share of it is drawn as the test split
TEST_SHARE = 0.2
# Test or OOD inputs below which the printed AUROC says it measures little
SMALL_SET = 50

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


def check_model_source(model: str) -> None:
    """Refuses, before any work, a model that cannot load, naming it and what would: a path that is no folder, a
    folder without a model, a Hub id that offline mode cannot find in the cache."""
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.constants import is_offline_mode

    from ..validation import looks_like_a_path

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

    from ..validation import looks_like_a_path

    path = Path(data).expanduser()
    if path.is_dir():
        if (path / "dataset_dict.json").is_file():
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


def select(command: str, argv: list[str]):
    """`insub-hf score MODEL ...`: a first argument that is not a flag is the model (`--model`)."""
    import sys

    if argv and not argv[0].startswith("-"):
        argv = ["--model", argv[0], *argv[1:]]
    return sys.modules[__name__], command, argv


def load_data(name: str, args: ScoreArguments) -> DatasetDict:
    """A datasets id, a `save_to_disk` folder or an image folder, as a DatasetDict."""
    path = Path(name).expanduser()
    if path.is_dir():
        if (path / "dataset_dict.json").is_file():
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


def with_test_split(data: DatasetDict, args: ScoreArguments) -> DatasetDict:
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


def check_test_classes(data: DatasetDict, args: ScoreArguments) -> None:
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


def modality(data: DatasetDict, split: str, args: ScoreArguments) -> str:
    """"image" or "text": which of `--image_column` and `--text_column` the split `split` holds (images first)."""
    if split not in data:
        raise ValueError(f"ScoreArguments: the data has no split {split!r}; it has {sorted(data)}.")
    columns = data[split].column_names
    for kind, column in (("image", args.image_column), ("text", args.text_column)):
        if column in columns:
            return kind
    raise ValueError(f"ScoreArguments: split {split!r} has neither the image column {args.image_column!r} nor the "
                     f"text column {args.text_column!r}; its columns are {columns} (--image_column, --text_column).")


def _split(data: DatasetDict, split: str, args: ScoreArguments, count: int, labelled: bool = True):
    """(images or texts, labels or None) of the first `count` rows of `split`, checked by name."""
    column = args.image_column if modality(data, split, args) == "image" else args.text_column
    rows = data[split]
    needed = [column] + ([args.label_column] if labelled else [])
    missing = [name for name in needed if name not in rows.column_names]
    folder = Path(args.dataset).expanduser()
    if (missing == [args.label_column] and column == args.image_column and folder.is_dir()
            and not (folder / "dataset_dict.json").is_file() and "label" not in rows.column_names):
        raise ValueError(f"ScoreArguments.dataset={args.dataset!r}: split {split!r} has no labels: an image folder "
                         "gives them by its class sub-folders, and this one has one class only (imagefolder labels "
                         "two or more); put the images in one sub-folder per class (DATA/cat/..., DATA/dog/...).")
    if missing:
        raise ValueError(f"ScoreArguments: split {split!r} has no column {missing[0]!r}; its columns are "
                         f"{rows.column_names} (--image_column, --text_column, --label_column).")
    rows = rows.select(range(min(count, len(rows))))
    labels = torch.as_tensor(rows[args.label_column]) if labelled else None
    return list(rows[column]), labels


class Encoder:
    """The model as a function of PIL images or texts: `(representations (N, d), uncertainty (N,) or None)`."""

    def __init__(self, args: ScoreArguments, kind: str = "image"):
        from transformers import AutoImageProcessor, AutoModel, AutoTokenizer

        remote = args.trust_remote_code
        self.kind, self.batch_size, self.max_length = kind, args.batch_size, args.max_length
        # the processor first: a model of the other modality is named as such, before its weights load
        load, what, other = ((AutoImageProcessor, "image processor", "texts (--text_column)") if kind == "image"
                             else (AutoTokenizer, "tokenizer", "images (--image_column)"))
        try:
            self.processor = load.from_pretrained(args.model, trust_remote_code=remote)
        except (OSError, ValueError, ImportError) as error:
            raise ValueError(
                f"ScoreArguments.model={args.model!r} has no {what}, so it does not read {kind}s, and the data "
                f"{args.dataset!r} holds {kind}s: score a model of {kind}s on it, or this model on data of "
                f"{other}. ({type(error).__name__}: {str(error).splitlines()[0][:120]})"
            ) from None
        self.model = AutoModel.from_pretrained(args.model, trust_remote_code=remote).eval()
        # an InSub model (loaded by insub-hf or by its remote code) gives its representation and uncertainty
        self.insub = getattr(self.model.config, "model_type", None) == "insub"

    def inputs(self, batch: list) -> dict[str, torch.Tensor]:
        if self.kind == "text":
            return self.processor(batch, padding=True, truncation=True, max_length=self.max_length,
                                  return_tensors="pt")
        if not self.insub:  # a stock processor expects RGB; an InSub one converts to the model's channels
            batch = [image.convert("RGB") for image in batch]
        return self.processor(images=batch, return_tensors="pt")

    @torch.no_grad()
    def __call__(self, items: list) -> tuple[torch.Tensor, torch.Tensor | None]:
        reps, uncertainty = [], []
        for start in range(0, len(items), self.batch_size):
            inputs = self.inputs(items[start:start + self.batch_size])
            out = self.model(**inputs)
            if self.insub:
                reps.append(out.representation)
                if out.uncertainty is not None:  # None: the model's reading is not fitted
                    uncertainty.append(out.uncertainty)
            elif self.kind == "text":  # the mean over real tokens, as sentence-transformers pools
                reps.append(masked_mean(out.last_hidden_state, inputs["attention_mask"]))
            else:
                pooled = getattr(out, "pooler_output", None)
                reps.append(pooled if pooled is not None else out.last_hidden_state.mean(dim=1))
        return torch.cat(reps).float(), torch.cat(uncertainty).float() if uncertainty else None


def noise_like(images: list, count: int, seed: int) -> list:
    """`count` uniform-noise images of the first image's size and mode."""
    rng = np.random.default_rng(seed)
    first = images[0]
    channels = len(first.getbands())
    shape = (first.height, first.width) + ((channels,) if channels > 1 else ())
    return [Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode=first.mode) for _ in range(count)]


def score(args: ScoreArguments) -> dict:
    """Scores `args.model` (see the module's docstring); returns what results.json holds."""
    data = with_test_split(load_data(args.dataset, args), args)
    check_test_classes(data, args)
    kind = modality(data, args.train_split, args)
    train_items, train_labels = _split(data, args.train_split, args, args.max_train)
    if args.knn_k is not None and args.knn_k > len(train_items):  # before any encoding
        raise ValueError(f"ScoreArguments.knn_k={args.knn_k} is more than the {len(train_items)} training rows of "
                         f"split {args.train_split!r}: give --knn_k {len(train_items)} or less.")
    k = args.knn_k or max(1, min(DEFAULT_K, len(train_items) - 1))
    if args.knn_k is None:
        print(f"[score] k-NN distance to the {k}-th nearest of {len(train_items)} training rows (--knn_k sets it)",
              flush=True)
    test_items, test_labels = _split(data, args.test_split, args, args.max_test)
    encoder = Encoder(args, kind)
    block = encoder.model.config.uncertainty if encoder.insub else {}
    if args.fdr is not None and not is_calibrated(block):  # before any encoding
        raise ValueError(f"ScoreArguments.fdr={args.fdr}: {args.model!r} serves no calibrated `uncertainty` (not an "
                         "InSub model, or not fitted): fit it with model.fit_uncertainty(your_inputs) and save it, "
                         "or leave --fdr out.")
    if args.ood_dataset:
        ood_name = args.ood_dataset
        ood_items, _ = _split(load_data(args.ood_dataset, args), args.test_split, args, args.max_test, False)
    elif kind == "image":
        ood_name, ood_items = "uniform noise", noise_like(test_items, len(test_items), args.seed)
    else:  # the same words, no longer sentences
        ood_name, ood_items = "shuffled words", shuffled_words(test_items, args.seed)
    (train, _), (test, test_uncertainty), (ood, ood_uncertainty) = (encoder(x) for x in (
        train_items, test_items, ood_items))
    classes = int(max(train_labels.max(), test_labels.max())) + 1
    held = torch.randperm(len(train), generator=torch.Generator().manual_seed(args.seed))[: max(len(train) // 10, 2)]
    fit = torch.ones(len(train), dtype=torch.bool)
    fit[held] = False
    probes = fit_probes(train[fit][:, None], train_labels[fit], classes, 1, ProbeArguments(probe_seed=args.seed))
    temperature = fit_temperature(member_probabilities(probes, train[~fit][:, None]).mean(dim=1), train_labels[~fit])
    test_probs, ood_probs = (member_probabilities(probes, x[:, None]) for x in (test, ood))
    scores = {  # higher = more likely OOD, test then OOD
        "msp": (-test_probs.mean(dim=1).max(dim=1).values, -ood_probs.mean(dim=1).max(dim=1).values),
        "knn": tuple(kth_neighbour_distance(x, train, k) for x in (test, ood)),
    }
    if test_uncertainty is not None:
        scores["uncertainty"] = (test_uncertainty, ood_uncertainty)
    results = {
        "job": "score", "model": args.model, "dataset": args.dataset, "ood_dataset": ood_name,
        "modality": kind, "images" if kind == "image" else "texts": {"train": len(train), "test": len(test),
                                                                     "ood": len(ood)},
        "knn_k": k,
        "test": asdict(summarize(test_probs, test_labels, temperature)),
        "ood": {name: ood_auroc(t, o, higher_is_in=False) for name, (t, o) in scores.items()},
        "ood_interval": {name: list(auroc_interval(t, o, higher_is_in=False)) for name, (t, o) in scores.items()},
        "ood_fpr95": {name: fpr_at_tpr(t, o, higher_is_in=False) for name, (t, o) in scores.items()},
    }
    calibrated = test_uncertainty is not None and is_calibrated(block)
    if calibrated:  # what a threshold at 0.95 does on in-distribution data (a reading in [0, 1] ranked on them)
        results["flag_rate"] = flagged(test_uncertainty, block["calibration_size"][1])
    out = Path(args.output_dir)
    if args.fdr is not None:  # the list in its own file; results.json counts them
        listed = listed_outliers(test_items, test_uncertainty, block, args.fdr, args.test_split)
        write_json(out / "outliers.json", listed)
        results["outliers"] = {**listed, "flagged": len(listed["flagged"])}
    write_json(out / "results.json", results)
    (out / "model_index.yaml").write_text(score_model_index(results), encoding="utf-8")
    print(f"[score] {args.model} on {args.dataset}: accuracy {100 * results['test']['accuracy']:.2f} %, "
          f"OOD AUROC vs {ood_name} (90 % bootstrap interval) " + ", ".join(
              f"{name} {100 * v:.1f} % ({100 * results['ood_interval'][name][0]:.1f}-"
              f"{100 * results['ood_interval'][name][1]:.1f})" for name, v in results["ood"].items())
          + f"; {out}/results.json", flush=True)
    if calibrated:
        print(flag_line(results["flag_rate"], args.test_split), flush=True)
    if args.fdr is not None:
        print("\n".join(outliers_lines(listed)), flush=True)
    if min(len(test), len(ood)) < SMALL_SET:
        print(f"[score] {len(test)} test and {len(ood)} OOD inputs: an AUROC of fewer than {SMALL_SET} a side "
              "measures little; read its interval, or score more data", flush=True)
    return results


def flagged(uncertainty: torch.Tensor, calibration_inputs: int) -> dict:
    """The share of `uncertainty (N,)` above `FLAG_THRESHOLD`, beside the share expected and its 95 % band for N
    inputs drawn as the model's `calibration_inputs` were (`expected_flag_band`); NaN readings (inputs outside the
    calibrated lengths) are counted apart as `unserved`."""
    served = int(served_rows(uncertainty).sum())
    unserved = len(uncertainty) - served
    expected, low, high = expected_flag_band(calibration_inputs, served)
    return {"threshold": FLAG_THRESHOLD, "share": flag_rate(uncertainty), "inputs": served, "unserved": unserved,
            "calibration_inputs": calibration_inputs, "expected": expected, "band_95": [low, high]}


def flag_line(rate: dict, split: str) -> str:
    """What `flagged` measured, in one line, with what a share outside the band says."""
    low, high = rate["band_95"]
    share = rate["share"]
    verdict = ("within it" if low <= share <= high else
               f"{'above' if share > high else 'below'} it: the {split} split is "
               f"{'less' if share > high else 'more'} typical than the data the model was calibrated on")
    return (f"[score] uncertainty > {rate['threshold']} flags {100 * share:.1f} % of the {rate['inputs']:,} {split} "
            f"inputs; {rate['inputs']:,} inputs drawn as its {rate['calibration_inputs']:,} calibration inputs were "
            f"would flag {100 * low:.1f}-{100 * high:.1f} % (95 % band): {verdict}")


ARGUMENT_GROUPS = (ScoreArguments,)
run = score

"""`insub-hf score MODEL --dataset DATA` (or `--model MODEL`): the harness's label-free and probe numbers for any image or text encoder,
given by Hub repo id or local folder: an InSub model, or a stock transformers encoder (`AutoModel` with its
`AutoImageProcessor`, or with its `AutoTokenizer` and mean pooling over the tokens, as sentence-transformers pools)
for everything but the heads' spread.

On the data a user names (a `datasets` id, a folder saved with `save_to_disk`, or a folder of images in class
sub-folders, with or without `train/` and `test/` above them: data with one split only has a seeded
`score_data.TEST_SHARE` of it drawn as the test split, said in the output), images or texts as its `--image_column`
or `--text_column` says: a linear probe on the frozen features (its accuracy, ECE, TACE, NLL, Brier, and ECE and NLL
after a temperature fitted on a held-out tenth of the training split), and OOD AUROC and FPR95 against another data
set's test split, or else uniform noise images or the test sentences with their words shuffled, by the probe's max
probability, the label-free k-NN distance to the training features (`kth_neighbour_distance`, k from the data unless
`--knn_k` says) and, for an InSub model, its `uncertainty`; each AUROC with its 90 % bootstrap interval, which says
how little a small set measures; and the share of the test split an InSub model's `uncertainty` flags above 0.95,
beside the band that share falls in when the test split is drawn as the model's calibration inputs were
(`expected_flag_band`). Writes `results.json` and `model_index.yaml` (a card's model-index block) to `--output_dir`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
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
from .score_data import (_split, check_data_source, check_model_source, check_test_classes, load_data, modality,
                         with_test_split)


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


# Test or OOD inputs below which the printed AUROC says it measures little
SMALL_SET = 50


def select(command: str, argv: list[str]):
    """`insub-hf score MODEL ...`: a first argument that is not a flag is the model (`--model`)."""
    import sys

    if argv and not argv[0].startswith("-"):
        argv = ["--model", argv[0], *argv[1:]]
    return sys.modules[__name__], command, argv


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

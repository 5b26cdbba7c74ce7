"""`insub-hf hub`: a saved checkpoint and the evaluation results of a finished run -> the Hub repo's folder (checked,
with the generated card) and, with `--push true`, the upload."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id
from transformers import (
    AutoConfig,
    AutoImageProcessor,
    AutoModel,
    AutoModelForImageClassification,
    AutoModelForPreTraining,
    AutoModelForSequenceClassification,
    AutoTokenizer,
)

from ..checkpointing import atomic_folder
from ..checksums import weights_fingerprint
from ..data import IMAGE_DATASET_PRESETS
from ..evaluation.ood_detector import CONFIG_NAME as DETECTOR_CONFIG
from ..evaluation.ood_detector import InSubOODDetector
from ..evaluation.results import ComparisonRow, MethodResults
from ..hub import hub_token, push_model_to_hub, save_for_hub
from ..model_card import HubCard, genomics_eval_results, harness_eval_results, senteval_eval_results
from .arguments import HYPERPARAMETERS
from ..validation import CheckedArguments, path_field


# what a demo run records of the harness's `MethodResults`
DEMO_RESULT_KEYS = ("test", "knn_accuracy", "ood", "head_spread_calibration", "fingerprints", "modality")
AUTO_BY_ARCHITECTURE = {
    "InSubForPreTraining": AutoModelForPreTraining, "InSubForSequenceClassification": AutoModelForSequenceClassification,
    "InSubForImageClassification": AutoModelForImageClassification,
}


@dataclass
class HubArguments:
    """Where `insub-hf hub` pushes (the names of `TrainingArguments`' Hub fields; the training jobs take those)."""

    _argument_group_name = "hub"

    hub_model_id: str | None = field(
        default=None, metadata={"help": "The Hub repo to push the model and its results to.", "aliases": ["--repo_id"]}
    )
    hub_token: str | None = field(
        default=None, metadata={"help": "Hub token (default: HF_TOKEN / `hf auth login`).", "aliases": ["--token"]}
    )
    hub_private_repo: bool | None = field(
        default=None, metadata={"help": "Create the Hub repo as private.", "aliases": ["--private"]}
    )

    def __post_init__(self) -> None:
        if self.hub_model_id is not None:
            try:
                validate_repo_id(self.hub_model_id)
            except HFValidationError as error:
                raise ValueError(f"hub_model_id={self.hub_model_id!r} is not a Hub repo id: {error}") from None


@dataclass
class HubCommandArguments(CheckedArguments):
    """What `insub-hf hub` builds the repo folder from; the repo itself is `--hub_model_id` (or `--repo_id`)."""

    _argument_group_name = "model and results"

    model_dir: str = path_field(help="A saved InSub model (its save_pretrained folder, e.g. runs/demo/insub_m5/model).",
                                kind="model")
    results: str | None = path_field(None, "results.json of `insub-hf demo`, `compare` or `text` to put on the card.")
    row: str | None = field(
        default=None, metadata={"help": "Which model of the results: a demo run ('insub_m5'), a compare row name "
                                        "('InSub (M=5)') or a text model name ('scd_insub_m3')."},
    )
    dataset: str | None = field(default=None, metadata={"help": "Data set name on the card (compare results)."})
    training_data: str | None = field(default=None, metadata={"help": "A sentence on the pretraining data."})
    license: str = field(default="apache-2.0", metadata={"help": "The card's license (a Hub license id)."})
    base_model: str | None = field(
        default=None, metadata={"help": "The Hub id the model started from (a pretrained backbone), for the card."}
    )
    folder: str | None = field(default=None, metadata={"help": "Build the repo folder here (default runs/hub/NAME)."})
    push: bool = field(default=False, metadata={"help": "Upload the folder (needs a token)."})


def _named(entries: list[dict], row: str | None, kind: str, path) -> dict:
    """The entry of `entries` (demo runs, compare rows) whose `name` is `row`; refuses another, naming the allowed."""
    chosen = next((entry for entry in entries if entry["name"] == row), None)
    if chosen is None:
        names = [entry["name"] for entry in entries]
        raise ValueError(f"HubCommandArguments.row={row!r} is not a {kind} of {path}; allowed: {names}.")
    return chosen


def card_from_results(path: str | Path, row: str | None, dataset: str | None, model=None) -> dict:
    """`HubCard` fields for one model of a demo, compare or text results.json: its model-index entries (on the split
    the run measured, named by size and source), the training data and settings the run recorded (`args`, `data`),
    the data sets' Hub ids and, for the text model, its base model. With `model`, the row must be that model's
    (`check_row_is_the_models`)."""
    results = json.loads(Path(path).read_text())
    args, data = results.get("args") or {}, results.get("data") or {}
    if "results" in results and "corpus" in args:  # insub-hf text
        _check_named_model(results, row, "text", path, model)
        start = results.get("base_model") or _named_file(args.get("encoder", "?"))
        return dict(
            eval_results=senteval_eval_results(results["results"][row]),
            training_data=f"SCD on the {args.get('corpus', '?')!r} sentence corpus, starting from {start} (the "
                          "settings below).",
            hyperparameters=_hyperparameters(results),
            base_model=results.get("base_model"),
        )
    if "results" in results and results.get("modality") == "dna":  # insub-hf genomics
        _check_named_model(results, row, "dna", path, model)
        labelled = _named_file(args.get("labelled") or "the bundled splice junctions")
        return dict(
            eval_results=genomics_eval_results(results["results"][row], labelled),
            training_data=f"Self-GenomeNet on {_named_file(args.get('pretrain_fasta') or 'the bundled Drosophila upstream regions')} "
                          f"(crops of {args.get('crop_length', '?')} nt); transfer to {labelled}.",
            hyperparameters=_hyperparameters(results),
        )
    if "runs" in results:  # insub-hf demo: one run per model, the harness's numbers under their own keys
        chosen = _named(results["runs"], row, "run", path)
        measured = MethodResults.from_dict({"members": 1, **{k: chosen[k] for k in DEMO_RESULT_KEYS if k in chosen}})
        name, shown = "fashion_mnist", "Fashion-MNIST"
    elif "rows" in results:  # insub-hf compare
        chosen = _named(results["rows"], row, "row", path)
        measured = ComparisonRow.from_dict(chosen).results
        name = shown = args.get("dataset", "fashion_mnist")
    else:
        raise ValueError(
            f"HubCommandArguments.results={str(path)!r} is not a results.json of insub-hf demo, compare or text (it "
            "has none of their keys 'runs', 'rows', 'results' with a text corpus)."
        )
    if model is not None:
        check_row_is_the_models(model, measured.fingerprints, measured.modality, row, path)
    hub_ids = dataset_hub_ids(name)
    split = f"test ({data['test']} images)" if "test" in data else "test"
    training = (f"{data['train']} training images of {name}: {data['source']}." if data
                else f"{name} (the run recorded no data description).")
    return dict(
        eval_results=harness_eval_results(measured, dataset or shown, (hub_ids or [name])[0], split=split),
        training_data=training, datasets=hub_ids or None, hyperparameters=_hyperparameters(results, chosen.get("seed")),
    )


def _check_named_model(results: dict, row: str | None, modality: str, path, model) -> None:
    """A text or genomics results.json (`{"results": {name: ...}, "fingerprints": {name: ...}}`) has the model `row`,
    and with `model`, it is that model (`check_row_is_the_models`)."""
    if row not in results["results"]:
        raise ValueError(
            f"HubCommandArguments.row={row!r} is not a model of {path}; allowed: {sorted(results['results'])}."
        )
    if model is not None:
        fingerprint = results.get("fingerprints", {}).get(row)
        check_row_is_the_models(model, [fingerprint] if fingerprint else [], modality, row, path)


def _named_file(value: str) -> str:
    """A recorded argument as a card may show it: a local path by its name only (no folder of this machine)."""
    return Path(value).name if Path(value).is_absolute() else value


def dataset_hub_ids(name: str) -> list[str]:
    """The Hub ids of the image data set `name` (a key of `IMAGE_DATASET_PRESETS`), for a card's `datasets:`."""
    preset = IMAGE_DATASET_PRESETS.get(name)
    return sorted(key for key, known in IMAGE_DATASET_PRESETS.items() if known is preset and "/" in key)


def _hyperparameters(results: dict, seed: int | None = None) -> dict | None:
    """The training settings a results.json recorded (`hyperparameters`; results written before it: the recorded
    arguments of `HYPERPARAMETERS`), with the row's own `seed` where it has one."""
    recorded = results.get("hyperparameters") or {
        k: v for k, v in (results.get("args") or {}).items() if k in HYPERPARAMETERS
    }
    return {**recorded, **({"seed": seed} if seed is not None else {})} or None


def check_row_is_the_models(model, fingerprints: list[str], modality: str | None, row: str | None, path) -> None:
    """Refuses to put a results row on `model`'s card unless the row measured exactly this model: its modality and
    its weights (`weights_fingerprint` of the encoder and heads), naming both sides."""
    own_modality = model.config.modality
    if modality is not None and modality != own_modality:
        raise ValueError(
            f"HubCommandArguments.row={row!r} of {path} measured a model of modality {modality!r}; "
            f"HubCommandArguments.model_dir holds one of modality {own_modality!r}. Choose the results of this model."
        )
    own = weights_fingerprint(getattr(model, "insub", model))
    if fingerprints != [own]:
        measured = (f"the weights {', '.join(f[:12] for f in fingerprints)}" if fingerprints else
                    "weights it does not record (results written before rows named their model)")
        raise ValueError(
            f"HubCommandArguments.row={row!r} of {path} measured {measured}; HubCommandArguments.model_dir holds the "
            f"weights {own[:12]}. A card carries only the numbers of its own model: choose that model's row (or "
            "evaluate this model again)."
        )


def run_hub(args: HubCommandArguments, hub: HubArguments):
    """Builds (and checks) the folder; pushes it with `args.push`. Returns the folder's files or the CommitInfo."""
    repo_id = hub.hub_model_id
    if not repo_id:
        raise ValueError("insub-hf hub needs the repo: --hub_model_id (or --repo_id), e.g. your-name/insub-vit-tiny.")
    token = hub_token(hub.hub_token, f"insub-hf hub --push ({repo_id!r})") if args.push else None
    folder = Path(args.folder or Path("runs/hub") / repo_id.split("/")[-1])
    if not args.push and folder.exists():
        raise ValueError(f"HubCommandArguments.folder={str(folder)!r} exists; choose a new folder or remove it first.")
    architectures = AutoConfig.from_pretrained(args.model_dir).architectures or []
    auto = next((AUTO_BY_ARCHITECTURE[a] for a in architectures if a in AUTO_BY_ARCHITECTURE), AutoModel)
    model = auto.from_pretrained(args.model_dir)
    facts = card_from_results(args.results, args.row, args.dataset, model) if args.results else {}
    model_dir = Path(args.model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir) if (model_dir / "tokenizer_config.json").is_file() else None
    processor = (AutoImageProcessor.from_pretrained(model_dir) if (model_dir / "preprocessor_config.json").is_file()
                 else None)
    detector = None
    if (model_dir / DETECTOR_CONFIG).is_file():  # a fitted InSubOODDetector travels with its model
        detector = InSubOODDetector.from_pretrained(model_dir)
    given = {"training_data": args.training_data, "base_model": args.base_model}  # flags replace what the run says
    card = HubCard(**{**facts, **{k: v for k, v in given.items() if v is not None}}, tokenizer=tokenizer,
                   processor=processor, detector=detector, license=args.license)
    if args.push:
        commit = push_model_to_hub(model, repo_id, card, token=token, private=hub.hub_private_repo)
        print(f"pushed {args.model_dir} to {repo_id}: {commit}")
        return commit
    with atomic_folder(folder) as tmp:  # only a complete, checked folder appears under its name
        files = save_for_hub(model, tmp, repo_id, card)
    print(f"{folder}: {len(files)} files, checked; the card is {folder / 'README.md'}. Upload with --push true.")
    return files


ARGUMENT_GROUPS = (HubCommandArguments, HubArguments)
run = run_hub

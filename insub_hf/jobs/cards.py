"""The cards' engine: a model card's fields from what a run recorded (`card_from_results`: a demo, compare, text or
genomics results.json). `jobs.hub` and `release.build` render every card through these (the sections only a release
adds: `release.cards`); `model_card.HubCard` writes it."""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..data import IMAGE_DATASET_PRESETS
from ..uncertainty.knn import encoder_and_heads_fingerprint
from ..evaluation.results import ComparisonRow, MethodResults
from ..hub.model_card import HubCard, genomics_eval_results, harness_eval_results, senteval_eval_results
from ..training.training_args import HYPERPARAMETERS

__all__ = ["HubCard", "RunRecord", "card_from_results", "run_card"]

# The text release's fitted example: the first transfer tweets calibrate, the next ones are its test
TEXT_VALIDATION, TEXT_TEST = 500, 1000

# what a demo run records of the harness's `MethodResults`
DEMO_RESULT_KEYS = ("test", "knn_accuracy", "ood", "head_spread_calibration", "fingerprints", "modality")


@dataclass
class RunRecord:
    """What a job's run wrote to its results.json (`jobs.experiment.Experiment.finish`).

    Attributes:
        job: the command that wrote it (`"demo"`, `"compare"`, `"text"`, `"genomics"`, ...); a card renders it by this.
        args: the job's arguments and the training settings it changed from its recipe.
        hyperparameters: the training settings in full (`training_args.HYPERPARAMETERS`).
        numbers: the job's own entries (demo: `data`, `runs`; compare: `rows`; text and genomics: `results`,
            `fingerprints`, ...).
    """

    job: str
    args: dict
    hyperparameters: dict
    numbers: dict

    def to_dict(self) -> dict:
        return {"job": self.job, "args": self.args, "hyperparameters": self.hyperparameters, **self.numbers}

    @classmethod
    def read(cls, path: str | Path) -> RunRecord:
        """The record in the results.json at `path`; refuses, naming the file and the way out, one that is not JSON
        (cut or edited), names no job, or lacks what its job writes (`RECORD_KEYS`)."""
        try:
            values = json.loads(Path(path).read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{path} is not a whole results.json ({error.msg} at line {error.lineno}, column {error.colno}: cut or "
                "edited after its run wrote it); restore it from its copy (a released folder keeps one under "
                "evaluation/) or run the job again."
            ) from None
        if not isinstance(values, dict) or "job" not in values:
            raise ValueError(
                f"HubCommandArguments.results={str(path)!r} names no job (it is not a results.json of an insub-hf run "
                f"of this version); a card takes the results.json of one of {sorted(CARDS)}: run that job again."
            )
        missing = [key for key in RECORD_KEYS.get(values["job"], ()) if key not in values]
        rows = values.get("rows") if values["job"] == "compare" else None
        for i, row in enumerate(rows if isinstance(rows, list) else []):  # each row's identity, which cards name
            missing += [f"rows[{i}].{key}" for key in ROW_KEYS if not isinstance(row, dict) or key not in row]
        if missing:
            raise ValueError(
                f"{path} is the results.json of an insub-hf {values['job']} run without its {missing} (cut or edited "
                "after its run wrote it); restore it from its copy or run the job again."
            )
        values = dict(values)
        return cls(values.pop("job"), values.pop("args", {}) or {}, values.pop("hyperparameters", {}) or {}, values)


def _named(entries: list[dict], row: str | None, kind: str, path) -> dict:
    """The entry of `entries` (demo runs, compare rows) whose `name` is `row`; refuses another, naming the allowed."""
    chosen = next((entry for entry in entries if entry["name"] == row), None)
    if chosen is None:
        names = [entry["name"] for entry in entries]
        raise ValueError(f"HubCommandArguments.row={row!r} is not a {kind} of {path}; allowed: {names}.")
    return chosen


def card_from_results(path: str | Path, row: str | None, dataset: str | None, model=None) -> dict:
    """`HubCard` fields for one model of a demo, compare, text or genomics results.json (`RunRecord`, rendered by its
    job): its model-index entries (on the split the run measured, named by size and source), the training data and
    settings the run recorded, the data sets' Hub ids and, for the text model, its base model. With `model`, the row
    must be that model's (`check_row_is_the_models`)."""
    record = RunRecord.read(path)
    if record.job not in CARDS:
        raise ValueError(
            f"HubCommandArguments.results={str(path)!r} was written by `insub-hf {record.job}`, whose results no card "
            f"shows; allowed: the results.json of {sorted(CARDS)}."
        )
    return CARDS[record.job](record, row, dataset, model, path)


def run_card(results: str | Path | None, row: str | None = None, model=None, dataset: str | None = None,
             report: bool = False, **attachments) -> HubCard:
    """The one place a run's model card is built: what the run record `results` (a job's results.json) gives for
    the model of `row` (`card_from_results`; with `model`, the row must be that model's), the record itself under
    `evaluation/results.json` (with `report`, its results.md beside it), and `attachments`: further `HubCard`
    fields (tokenizer, processor, detector, notes, provenance, license, ...), where one given as None keeps what
    the record says. `results` None: a card of `attachments` alone (a model with no run record)."""
    facts, extra = {}, {}
    if results is not None:
        path = Path(results)
        facts = card_from_results(path, row, dataset, model)
        extra = {"evaluation/results.json": path}
        if report:
            extra["evaluation/results.md"] = path.with_name("results.md")
    given = {name: value for name, value in attachments.items() if value is not None}
    return HubCard(**{**facts, **given, "extra_files": {**extra, **given.get("extra_files", {})} or None})


def _text_card(record: RunRecord, row, dataset, model, path) -> dict:
    _check_named_model(record.numbers, row, "text", path, model)
    base_model = record.numbers.get("base_model")
    start = base_model or _named_file(record.args.get("encoder", "?"))
    return dict(
        eval_results=senteval_eval_results(record.numbers["results"][row]),
        training_data=f"SCD on the {record.args.get('corpus', '?')!r} sentence corpus, starting from {start} (the "
                      "settings below).",
        hyperparameters=_hyperparameters(record), base_model=base_model,
    )


def _genomics_card(record: RunRecord, row, dataset, model, path) -> dict:
    _check_named_model(record.numbers, row, "dna", path, model)
    args = record.args
    labelled = _named_file(args.get("labelled") or "the bundled splice junctions")
    fasta = _named_file(args.get("pretrain_fasta") or "the bundled Drosophila upstream regions")
    return dict(
        eval_results=genomics_eval_results(record.numbers["results"][row], labelled),
        training_data=f"Self-GenomeNet on {fasta} (crops of {args.get('crop_length', '?')} nt); transfer to {labelled}.",
        hyperparameters=_hyperparameters(record),
    )


def _demo_card(record: RunRecord, row, dataset, model, path) -> dict:
    chosen = _named(record.numbers["runs"], row, "run", path)  # the harness's numbers under their own keys
    with _cut_or_edited(path, f"run {row!r}"):
        measured = MethodResults.from_dict({"members": 1, **{k: chosen[k] for k in DEMO_RESULT_KEYS if k in chosen}})
    return _image_card(record, chosen, measured, "fashion_mnist", "Fashion-MNIST", dataset, model, row, path)


def _compare_card(record: RunRecord, row, dataset, model, path) -> dict:
    chosen = _named(record.numbers["rows"], row, "row", path)
    name = record.args.get("dataset", "fashion_mnist")
    with _cut_or_edited(path, f"row {row!r}"):
        measured = ComparisonRow.from_dict(chosen).results
    return _image_card(record, chosen, measured, name, name, dataset, model, row, path)


@contextmanager
def _cut_or_edited(path, entry: str):
    """Refuses a record whose entry does not read back (`MethodResults.from_dict`), naming the file and the way
    out."""
    try:
        yield
    except (ValueError, TypeError) as error:
        raise ValueError(
            f"{path}: the {entry} does not read back ({error}): cut or edited after its run wrote it; restore it "
            "from its copy or run the job again."
        ) from None


def _image_card(record: RunRecord, chosen: dict, measured, name: str, shown: str, dataset, model, row, path) -> dict:
    if model is not None:
        check_row_is_the_models(model, measured.fingerprints, measured.modality, row, path)
    data = record.numbers.get("data") or {}
    hub_ids = dataset_hub_ids(name)
    split = f"test ({data['test']} images)" if "test" in data else "test"
    training = (f"{data['train']} training images of {name}: {data['source']}." if data
                else f"{name} (the run recorded no data description).")
    return dict(
        eval_results=harness_eval_results(measured, dataset or shown, (hub_ids or [name])[0], split=split),
        training_data=training, datasets=hub_ids or None, hyperparameters=_hyperparameters(record, chosen.get("seed")),
    )


# How a card renders each job's record
CARDS = {"demo": _demo_card, "compare": _compare_card, "text": _text_card, "genomics": _genomics_card}
# What each job's results.json holds besides its job, arguments and settings, which a card and a release read
RECORD_KEYS = {"demo": ("runs",), "compare": ("rows",), "text": ("results", "fingerprints"),
               "genomics": ("results", "fingerprints")}
# What each row of a comparison holds besides its numbers (`ComparisonRow`'s identity, and its test metrics)
ROW_KEYS = ("name", "method", "num_heads", "seed", "test")


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


def _hyperparameters(record: RunRecord, seed: int | None = None) -> dict | None:
    """The training settings a run recorded (`hyperparameters`, else its recorded arguments among
    `HYPERPARAMETERS`), with the row's own `seed` where it has one."""
    recorded = record.hyperparameters or {k: v for k, v in record.args.items() if k in HYPERPARAMETERS}
    return {**recorded, **({"seed": seed} if seed is not None else {})} or None


def check_row_is_the_models(model, fingerprints: list[str], modality: str | None, row: str | None, path) -> None:
    """Refuses to put a results row on `model`'s card unless the row measured exactly this model: its modality and
    its weights (`encoder_and_heads_fingerprint`), naming both sides."""
    own_modality = model.config.modality
    if modality is not None and modality != own_modality:
        raise ValueError(
            f"HubCommandArguments.row={row!r} of {path} measured a model of modality {modality!r}; "
            f"HubCommandArguments.model_dir holds one of modality {own_modality!r}. Choose the results of this model."
        )
    own = encoder_and_heads_fingerprint(model)
    if fingerprints != [own]:
        measured = (f"the weights {', '.join(f[:12] for f in fingerprints)}" if fingerprints else
                    "weights it does not record (a row that names no model)")
        raise ValueError(
            f"HubCommandArguments.row={row!r} of {path} measured {measured}; HubCommandArguments.model_dir holds the "
            f"weights {own[:12]}. A card carries only the numbers of its own model: choose that model's row (or "
            "evaluate this model again)."
        )

"""The cards' engine: a model card's fields from what a run recorded (`card_from_results`: a demo, compare, text or
genomics results.json), and the sections a release adds (InSub against its baselines, the text model's uncertainty,
how the model was made). `jobs.hub` and `jobs.release` render every card through these; `model_card.HubCard`
writes it."""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from ..data import IMAGE_DATASET_PRESETS
from ..evaluation.cost import device_description
from ..evaluation.flagging import FLAG_THRESHOLD, measured_separation
from ..uncertainty.knn import encoder_and_heads_fingerprint
from ..evaluation.results import ComparisonRow, MethodResults
from ..hub.model_card import (
    HubCard, genomics_eval_results, harness_eval_results, package_provenance, senteval_eval_results,
)
from ..training.training_args import HYPERPARAMETERS

__all__ = ["HubCard", "RunRecord", "card_from_results", "dna_versus_baseline", "run_card", "provenance", "shipped_readings", "text_uncertainty_section",
           "text_versus_baseline", "threshold_section", "versus_baseline", "versus_others"]

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


def provenance(command: str, seed: int, seconds: float, pretraining: float | None = None) -> str:
    """The card's sentence on how this model was made: the command, commit, machine, date, seed and wall time; with
    `pretraining` (seconds, both models, as their runs measured them) the time of the pretraining too, which a
    command that found it in its run cache did not spend again."""
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    made = f"Made by `{command}` at insub-hf {package_provenance()} on {device_description()}, {date}; seed {seed}; "
    if pretraining is None:
        return made + f"{seconds / 60:.1f} min wall time (baseline and InSub, training and evaluation)."
    return made + (f"{seconds / 60:.1f} min wall time for this command; the pretraining of the baseline and InSub took "
                   f"{pretraining / 60:.1f} min of training steps (reused from the run cache where it was done).")


# (metric, label, higher is better) of the test metrics a card compares with the baseline
VERSUS = (("accuracy", "accuracy", True), ("ece", "ECE", False), ("nll", "NLL", False), ("brier", "Brier", False))


def versus_baseline(baseline, insub) -> str:
    """The card's section on InSub against its single-head baseline at the same budget (two `MethodResults`): the
    test metrics and the OOD AUROCs of both, and in plain words where InSub is not better."""
    rows, better, worse = [], [], []

    def add(label: str, base: float, ours: float, higher: bool, percent: bool) -> None:
        shown = (lambda v: f"{100 * v:.2f} %") if percent else (lambda v: f"{v:.4f}")
        wins = ours > base if higher else ours < base
        (better if wins else worse).append(label)
        rows.append(f"| {label} | {shown(base)} | {shown(ours)} | {'yes' if wins else 'no'} |")

    for key, label, higher in VERSUS:
        add(label, getattr(baseline.test, key), getattr(insub.test, key), higher, key in ("accuracy", "ece"))
    for ood_set, scores in insub.ood.items():
        for score in ("msp", "knn"):
            if score in scores and score in baseline.ood.get(ood_set, {}):
                add(f"OOD AUROC vs {ood_set} ({score})", baseline.ood[ood_set][score], scores[score], True, True)
    verdict = (f"InSub is better than the baseline in {', '.join(better) or 'nothing measured here'}, and **not better "
               f"in {', '.join(worse)}**." if worse else "InSub is better than the baseline in every metric here.")
    return "\n".join([
        "## InSub against its baseline", "",
        "The single-head baseline (M = 1, no diversity term) was trained at the same budget and measured by the same "
        "harness, one seed each:", "",
        "| Metric | Baseline | InSub | InSub better |", "|---|---|---|---|", *rows, "", verdict,
    ])


READING_NAMES = {"knn": "k-NN distance", "spread": "heads' spread", "spread_by_length": "spread per length bucket",
                 "length": "sentence length (reference)"}


def text_uncertainty_section(measured: dict, fitted: dict) -> str:
    """The text card's section on its uncertainty: it ships unfitted; what fitting gives on the pretraining tweets and
    on another domain (`fitted`: `jobs.text_reading.fitted_examples`, each a `threshold_section`); then each single
    reading's test AUROCs with the measured bank (`measured`: `jobs.text_reading.measure`) against the OOD sets, for
    the transfer classifier's errors, and its Spearman correlation with length, the one chosen on validation named."""
    test, chosen = measured["test"], measured["reading"]
    sets = measured["ood_sets"]
    tweets, docstrings = fitted["tweets"], fitted["docstrings"]
    lines = ["## Its uncertainty: fitted on your sentences", "",
             "A general-purpose text model cannot know what its user calls in-distribution, so this one ships "
             "**unfitted**: `output_value=\"uncertainty\"` is left out (None through transformers) until "
             "`model[0].fit_uncertainty(your_sentences)` fits the calibrated reading on a few thousand sentences of "
             "your domain (kept by `model.save(folder)`). The heads' spread stays available as "
             "`output_value=\"head_spread\"`. What that one line gave on two kinds of data, each measured on "
             "held-out sentences of its own kind:", "",
             threshold_section(tweets, "transfer tweets after the calibration ones",
                               f"{tweets['calibration']} transfer tweets, a bank of {tweets['bank']} pretraining "
                               "sentences", tweets["components"], "### Fitted on the pretraining sentences"), "",
             threshold_section(docstrings, "held-out docstring sentences",
                               f"{docstrings['calibration']} docstring sentences, a bank of {docstrings['bank']} "
                               "others", docstrings["components"],
                               "### Fitted on another domain: the standard library's docstrings"), "",
             "### Each single reading with a fixed bank", "",
             f"Each single reading, measured as `insub-hf text-candidates` measures a candidate, on held-out test data "
             f"(AUROC, higher uncertainty = the other kind of text, or = a wrong transfer prediction; 50 % is chance); "
             f"`text-candidates` chose the **{READING_NAMES[chosen]}** on validation data:", "",
             "| Reading | mean OOD AUROC | " + " | ".join(sets) + " | error AUROC | Spearman with length |",
             "|" + "---|" * (len(sets) + 4)]
    for r, numbers in test["readings"].items():
        label = f"**{READING_NAMES[r]}** (chosen)" if r == chosen else READING_NAMES[r]
        lines.append(f"| {label} | {100 * numbers['mean_ood_auroc']:.1f} % | "
                     + " | ".join(f"{100 * numbers['ood_auroc'][s]:.1f} %" for s in sets)
                     + f" | {100 * numbers['error_auroc']:.1f} % | {numbers['length_spearman']:.2f} |")
    lines += ["", f"Transfer on the test tweets: {100 * test['transfer_accuracy']:.2f} %; the rank correlation of its "
              f"pairwise cosines with the base model's: {test['cosine_spearman_with_base']:.3f}."]
    if measured.get("second_domain"):
        lines += ["", *own_bank_section(measured["second_domain"], measured.get("bank_sources"))]
    return "\n".join(lines)


# What a threshold section calls each reading (`evaluation.flagging.SHOWN_READINGS`)
SHOWN_NAMES = {"uncertainty": "calibrated (`uncertainty`)", "knn": "k-NN distance", "head_spread": "heads' spread"}


def threshold_section(numbers: dict, inside: str, fitted: str, components: list[str],
                      title: str = "## Flagging unusual inputs") -> str:
    """A card's section on thresholding the calibrated `uncertainty`: the line that flags, the measured share of
    `inside` (in-distribution inputs the reading never saw, described) above the threshold, and each OOD set's AUROC
    and FPR95 for the calibrated reading beside each single reading it combines (`numbers`:
    `evaluation.flagging.separation_by_reading`; `fitted`: what the reading was fitted on, in words; `components`:
    the readings it combines, `config.uncertainty['components']`)."""
    readings = [r for r in SHOWN_NAMES if any(r in cells for cells in numbers["sets"].values())]
    lines = [title, "",
             f"`flagged = out.uncertainty > {FLAG_THRESHOLD}` flags an input less typical than "
             f"{100 * FLAG_THRESHOLD:.0f} % of the held-out in-distribution inputs the reading was calibrated on "
             f"({fitted}): about {100 * (1 - FLAG_THRESHOLD):.0f} % of in-distribution inputs, by construction. "
             f"Measured on {numbers['inside']} {inside}: **{100 * numbers['flag_rate']:.1f} %** flagged.", "",
             "Each OOD set against those inputs (AUROC: 50 % is chance, higher is better; FPR95: the share of the set "
             "taken as in-distribution where 95 % of in-distribution inputs are, lower is better), the calibrated "
             "reading beside the single readings it combines" + ("" if "spread" in components else
                                                                 " (here the k-NN distance alone: the heads' spread, "
                                                                 "shown as it is, held no direction)") + ":", "",
             "| OOD set | " + " | ".join(f"{SHOWN_NAMES[r]} AUROC | FPR95" for r in readings) + " |",
             "|" + "---|" * (2 * len(readings) + 1)]
    for name, cells in numbers["sets"].items():
        lines.append(f"| {name} | " + " | ".join(
            f"{100 * cells[r]['auroc']:.1f} % | {100 * cells[r]['fpr95']:.1f} %" if r in cells else "– | –"
            for r in readings) + " |")
    return "\n".join(lines)


def own_bank_section(numbers: dict, sources: dict[str, int] | None = None) -> list[str]:
    """The text card's lines on the k-NN distance in another domain, with the measured fixed bank (of `sources`:
    sentences per source; None: the pretraining tweets) and the domain's own."""
    sets = list(numbers["own"])
    sources = dict(sources or {"tweets": None})
    digest = sources.pop("pool sha256", None)
    holds = ", ".join(name if count is None else f"{count} {name}" for name, count in sources.items())
    pinned = (f" (drawn from insub-hf's pool `insub_hf/data/bundled/broad_english.csv.gz`, SHA-256 {digest})"
              if digest else "")
    return [
        "#### Your data, your bank",
        "",
        f"The k-NN distance measures how far a sentence is from its bank: the fixed one holds {holds} sentences"
        f"{pinned}, "
        f"not what you call in-distribution. Held out: {numbers['held_out']} English sentences of a domain the bank "
        "was not built from (the Python standard library's docstrings) against the other kinds of text (AUROC, 50 % "
        "is chance), with the fixed bank and "
        f"with a bank of {numbers['own_bank']} other sentences of that domain (what `fit_uncertainty` keeps):",
        "",
        "| Bank | " + " | ".join(sets) + " |",
        "|" + "---|" * (len(sets) + 1),
        f"| fixed ({holds}) | " + " | ".join(f"{100 * numbers['shipped'][s]:.1f} %" for s in sets) + " |",
        f"| your own ({numbers['own_bank']} sentences of the domain) | "
        + " | ".join(f"{100 * numbers['own'][s]:.1f} %" for s in sets) + " |",
    ]


def text_versus_baseline(per_model: dict, name: str, frozen: bool = False) -> str:
    """The text card's section: transfer of the base model, the SCD baseline and InSub, in plain words where InSub
    is not better (with a `frozen` encoder all three embed as the base does)."""
    models = [m for m in ("pretrained (no SCD)", "scd_baseline", name) if m in per_model]
    rows = [(task, key, [per_model[m][task][key] for m in models], higher)
            for task, numbers in per_model[name].items()
            for key, higher in (("accuracy", True), ("ece", False), ("nll", False), ("spearman", True)) if key in numbers]
    same = (" The encoder was frozen (only the heads were trained), so all three give the base model's embeddings "
            "and the same transfer numbers: InSub adds an uncertainty, not better embeddings." if frozen else "")
    return versus_others(
        "## InSub against its baselines",
        "The base model as it is, and SCD with one head (no diversity term) at the same budget, measured by the same "
        f"transfer code (logistic regression on frozen embeddings; one seed).{same}",
        ("Task", "Metric", *models), rows, "the best of the others", "InSub is better than both in every transfer "
        "metric here.",
    )


def versus_others(title: str, intro: str, header: tuple[str, ...], rows: list, others: str, all_better: str) -> str:
    """A card section comparing InSub with other models: `rows` of (group, metric, values with InSub's last, higher is
    better), each value to 4 decimals, and in plain words where InSub is not better than `others` (the best of the
    other values)."""
    lines = [title, "", intro, "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    worse = []
    for group, metric, values, higher in rows:
        lines.append(f"| {group} | {metric} | " + " | ".join(f"{v:.4f}" for v in values) + " |")
        best_other = max(values[:-1]) if higher else min(values[:-1])
        if (values[-1] <= best_other) if higher else (values[-1] >= best_other):
            worse.append(f"{group} {metric}")
    lines += ["", f"InSub is **not better** than {others} in: {', '.join(worse)}." if worse else all_better]
    return "\n".join(lines)


def dna_versus_baseline(per_model: dict, name: str) -> str:
    """The DNA card's section: the baseline's and InSub's probe and fine-tuning numbers, in plain words where InSub
    is not better."""
    rows = [(protocol, key, [per_model["baseline"][protocol][key], per_model[name][protocol][key]], higher)
            for protocol in ("linear_probe", "finetune")
            for key, higher in (("accuracy", True), ("ece", False), ("nll", False))]
    return versus_others(
        "## InSub against its baseline",
        "Self-GenomeNet with one head (no diversity term) at the same budget, measured the same way (one seed):",
        ("Protocol", "Metric", "Baseline", "InSub"), rows, "the baseline",
        "InSub is better than the baseline in every metric here.",
    )


def shipped_readings(card: HubCard, model, data, dataset: str, full: dict) -> tuple[HubCard, dict]:
    """`card` with its label-free OOD rows as the shipped `model` (an `InSubModel` with its fitted `uncertainty`)
    gives them on the evaluation's test and OOD images (`data`, of `dataset`; its own bank, not the evaluation's whole training set: what
    the folder's weights give): for each OOD set the MSP rows it had, then the calibrated `uncertainty`, the k-NN
    distance and the heads' spread, each AUROC and FPR95; a note with the whole-set k-NN values (`full`: OOD set ->
    AUROC) and the threshold section (`threshold_section`). Returns the card and the measured numbers
    (`evaluation.flagging.separation_by_reading`)."""
    numbers = measured_separation(model, data.inputs(data.test_images),
                                  {name: data.inputs(images) for name, images in data.ood_images.items()})
    block = getattr(model, "insub", model).config.uncertainty
    labels = {"uncertainty": "calibrated uncertainty, label-free, the model's own",
              "knn": f"k-NN to the shipped {block['bank_size']}-image bank, label-free",
              "head_spread": "head spread, label-free" + ("" if block["direction"] else ", as it is: no direction held")}
    sets = numbers["sets"]
    others = [r for r in card.eval_results if r.metric_config not in sets]
    results = list(others)
    for name, cells in sets.items():
        msp = [r for r in card.eval_results if r.metric_config == name and "(MSP" in (r.metric_name or "")]
        template = msp[0] if msp else replace(others[0], metric_config=name)
        results += msp
        for reading, label in labels.items():
            if reading in cells:
                results += [
                    replace(template, metric_type="auroc", metric_name=f"OOD AUROC vs {name} ({label})",
                            metric_value=round(cells[reading]["auroc"], 4), metric_config=name),
                    replace(template, metric_type="fpr95", metric_name=f"OOD FPR95 vs {name} ({label}; lower is better)",
                            metric_value=round(cells[reading]["fpr95"], 4), metric_config=name),
                ]
    note = (f"The k-NN rows read the model's own bank ({block['bank_size']} training images in its weights, k = "
            f"{block['k']}); with all {len(data.train_images)} training images as the bank (the "
            "comparison with the baseline) its k-NN AUROCs are " + ", ".join(
                f"{name} {100 * value:.1f} %" for name, value in full.items()) + ".")
    section = threshold_section(numbers, f"{dataset} test images",
                                f"{block['calibration_size'][1]} held-out training images, a bank of "
                                f"{block['bank_size']}", block["components"])
    notes = "\n\n".join(n for n in (card.notes, note, section) if n)
    return replace(card, eval_results=results, notes=notes), numbers

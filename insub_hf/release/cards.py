"""The sections a release adds to a model card (`release.build`): how the model was made, InSub against its
baseline (image, text, DNA), the text model's uncertainty, the shipped readings and the threshold they flag at."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

from ..evaluation.cost import device_description
from ..evaluation.flagging import FLAG_THRESHOLD, measured_separation
from ..hub.model_card import HubCard, package_provenance


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
    on another domain (`fitted`: `release.text_reading.fitted_examples`, each a `threshold_section`); then each single
    reading's test AUROCs with the measured bank (`measured`: `release.text_reading.measure`) against the OOD sets, for
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

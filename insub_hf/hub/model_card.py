"""The generated model card: what a model repo's README.md says (`HubCard`: evaluation, training data and settings,
how the model was made, the detector, the files beside the weights), its model-index entries from the jobs' results,
and the card itself from `templates/modelcard_template.md`."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..encoders.frozen_base import frozen_base_facts
from ..uncertainty.fitting import SEES_OUTLIERS
from ..uncertainty.readings import is_calibrated, reads_bank, reads_lengths, served_reading, single_reading


TEMPLATE = Path(__file__).resolve().parents[1] / "templates" / "modelcard_template.md"

CITATION = """@inproceedings{vahidi2024insub,
  title     = {Diversified Ensemble of Independent Sub-Networks for Robust Self-Supervised Representation Learning},
  author    = {Vahidi, Amirhossein and Wimmer, Lisa and G{\\"u}nd{\\"u}z, H{\\"u}seyin Anil and Bischl, Bernd and
               H{\\"u}llermeier, Eyke and Rezaei, Mina},
  booktitle = {Proceedings of the AAAI Conference on Artificial Intelligence},
  year      = {2024}
}"""

# What each model class is loaded with, and what the usage snippet calls.
AUTO_CLASSES = {
    "InSubModel": "AutoModel", "InSubForPreTraining": "AutoModel",
    "InSubForSequenceClassification": "AutoModelForSequenceClassification",
    "InSubForImageClassification": "AutoModelForImageClassification",
}
PERCENT_METRICS = ("accuracy", "ece", "tace", "auroc", "aurc", "fpr95")
# (encoder input, is a classifier) -> the Hub's pipeline tag
PIPELINE_TAGS = {
    ("pixel_values", False): "image-feature-extraction", ("pixel_values", True): "image-classification",
    ("input_ids", False): "feature-extraction", ("input_ids", True): "text-classification",
    ("dna_one_hot", False): "feature-extraction", ("dna_one_hot", True): "text-classification",
}
METRIC_NAMES = {"accuracy": "Accuracy", "ece": "ECE", "tace": "TACE", "nll": "NLL", "brier": "Brier"}


@dataclass
class HubCard:
    """What a model repo holds besides the weights and config: the generated card's content and files beside them.

    Args:
        eval_results: model-index metrics (`harness_eval_results`, `senteval_eval_results`); also shown as a table.
        training_data: a sentence on what the model was pretrained on.
        datasets: Hub ids of the training data sets (card metadata).
        notes: extra markdown under the evaluation table.
        tags: extra metadata tags.
        tokenizer: saved beside the model (text models).
        processor: the image processor saved beside the model (`AutoImageProcessor`, `pipeline()`); the usage
            snippet then reads images through it.
        detector: the `insub_hf.evaluation.InSubOODDetector` fitted on the model (its bank is in the weights, its k and
            direction in the config): the card states how the head spread's direction was fixed.
        sentence_uncertainty: former: a reading set on the model at save time, through its card (it still works,
            with one warning); a card reads the model, so give the reading to the model instead
            (`InSubSentenceEncoder.save_sentence_transformer(path, uncertainty=...)`, `model.with_reading`).
        license: the card's license (the package's, Apache-2.0, unless the data or base model says otherwise).
        base_model: the Hub id the model started from (a pretrained backbone, or the InSub model it was fine-tuned
            from), for the card's metadata.
        extra_files: `{path in repo: local file}`, e.g. evaluation results.
        hyperparameters: the run's training settings (`InSubTrainingArguments` fields, as `Trainer.create_model_card`
            lists them), for the card's training section.
        provenance: how the model was made (command, commit, machine, date, seed, wall time), for the card.
    """

    eval_results: list[EvalResult] | None = None
    training_data: str | None = None
    datasets: list[str] | None = None
    notes: str | None = None
    tags: list[str] | None = None
    tokenizer: Any = None
    processor: Any = None
    detector: Any = None
    sentence_uncertainty: dict | None = None
    license: str = "apache-2.0"
    base_model: str | None = None
    extra_files: dict[str, str | Path] | None = None
    hyperparameters: dict[str, Any] | None = None
    provenance: str | None = None


# ----------------------------------------------------------------------------------------------- evaluation results
# Decimals of a card's model-index values: fractions to 0.01 points of a percentage (no 0.40114000000000005)
CARD_DECIMALS = 4


def card_value(value) -> float:
    """A measured number as the card's metadata gives it (`CARD_DECIMALS` decimals)."""
    return round(float(value), CARD_DECIMALS)


def harness_eval_results(results, dataset_name: str, dataset_type: str, split: str = "test") -> list[EvalResult]:
    """model-index entries from one method's `insub_hf.evaluation.MethodResults` (`MethodResults.from_dict` reads a
    row of `insub-hf compare`'s results.json).

    Accuracy, ECE, TACE, NLL and Brier of the linear probe on `split`, its ECE and NLL after temperature scaling
    and the AURC of its max probability (where the results have them), and per OOD set the AUROC and the FPR at 95 %
    TPR of the max softmax probability, of the label-free k-NN score and (M > 1) of the head spread in the model's
    stored orientation (its `uncertainty` output). Values as the harness gives them (fractions; the card's table
    shows accuracy, calibration errors, AURC, AUROC and FPR95 in %).
    """
    task = dict(task_type="image-classification", task_name="Linear probe on the frozen encoder")
    data = dict(dataset_type=dataset_type, dataset_name=dataset_name, dataset_split=split)
    out = [
        EvalResult(**task, **data, metric_type=key, metric_name=METRIC_NAMES[key],
                   metric_value=card_value(getattr(results.test, key)))
        for key in ("accuracy", "ece", "tace", "nll", "brier")
    ]
    if results.test.temperature is not None:
        scaled = f"after temperature scaling (T = {results.test.temperature:.2f}, fitted on validation data)"
        out += [EvalResult(**task, **data, metric_type=key, metric_name=f"{METRIC_NAMES[key]} {scaled}",
                           metric_value=card_value(getattr(results.test, f"{key}_scaled"))) for key in ("ece", "nll")]
    if "aurc" in results.selective:
        out.append(EvalResult(**task, **data, metric_type="aurc", metric_name="AURC (max probability; lower is better)",
                              metric_value=card_value(results.selective["aurc"])))
    # the spread is the model's uncertainty only where its direction held across resamples of the validation data
    holds = all(c.usable_direction is not None for c in results.head_spread_calibration)
    spread = "head spread, label-free, " + ("the model's uncertainty" if holds else "its direction not holding")
    for ood_set, scores in results.ood.items():
        for score, label in (("msp", "MSP"), ("knn", "k-NN, label-free"), ("head_spread", spread)):
            if score in scores:
                out.append(EvalResult(
                    **task, **data, metric_type="auroc", metric_name=f"OOD AUROC vs {ood_set} ({label})",
                    metric_value=card_value(scores[score]), metric_config=ood_set,
                ))
            if score in results.ood_fpr95.get(ood_set, {}):
                out.append(EvalResult(
                    **task, **data, metric_type="fpr95", metric_name=f"OOD FPR95 vs {ood_set} ({label}; lower is better)",
                    metric_value=card_value(results.ood_fpr95[ood_set][score]), metric_config=ood_set,
                ))
    return out


def senteval_eval_results(per_task: dict[str, dict]) -> list[EvalResult]:
    """model-index entries from the text job's results of one model (`{task: {accuracy, ece, nll} | {spearman}}`)."""
    out = []
    for name, numbers in per_task.items():
        if "spearman" in numbers:
            out.append(EvalResult(
                task_type="sentence-similarity", dataset_type=name.lower(), dataset_name=f"SentEval {name}",
                metric_type="spearmanr", metric_name="Spearman", metric_value=card_value(numbers["spearman"]),
            ))
            continue
        for key in ("accuracy", "ece", "nll"):
            if key in numbers:
                out.append(EvalResult(
                    task_type="text-classification", task_name="Logistic regression on frozen sentence embeddings",
                    dataset_type=name.lower(), dataset_name=f"SentEval {name}", metric_type=key,
                    metric_name=METRIC_NAMES[key], metric_value=card_value(numbers[key]),
                    ))
    return out


def genomics_eval_results(per_protocol: dict[str, dict], dataset_name: str) -> list[EvalResult]:
    """model-index entries from the genomics job's results of one model (`{linear_probe | finetune: metrics}`)."""
    tasks = {"linear_probe": "Linear probe on the frozen encoder", "finetune": "Fine-tuned encoder and classifier"}
    return [
        EvalResult(task_type="text-classification", task_name=tasks[protocol], dataset_type="dna_sequences",
                   dataset_name=dataset_name, metric_type=key, metric_name=f"{METRIC_NAMES[key]} ({protocol})",
                   metric_value=card_value(numbers[key]))
        for protocol, numbers in per_protocol.items() if protocol in tasks
        for key in ("accuracy", "ece", "nll") if key in numbers
    ]


# The scores `insub-hf score` measures OOD AUROCs by, as a card names them
def blind_reading(block) -> str | None:
    """The fitted reading's AUROC against its made outliers, formatted, where it is below `SEES_OUTLIERS` (the
    reading cannot see outliers); else None."""
    auroc = block.get("made_outlier_auroc")
    return None if auroc is None or auroc >= SEES_OUTLIERS else f"{100 * auroc:.1f}"


SCORE_NAMES = {"msp": "max probability", "knn": "k-NN, label-free", "uncertainty": "the model's uncertainty"}


def score_model_index(results: dict) -> str:
    """The model-index block (YAML) a model card can take, from the results of `insub-hf score` (`jobs.score`):
    the probe's test metrics, raw and after temperature scaling, and its OOD AUROCs by score."""
    unit = "images" if results["modality"] == "image" else "texts"
    task = dict(task_type=f"{results['modality']}-classification", task_name="Linear probe on the frozen encoder",
                dataset_type=results["dataset"], dataset_name=results["dataset"],
                dataset_split=f"test ({results[unit]['test']} {unit})")
    test = results["test"]
    entries = [EvalResult(**task, metric_type=key, metric_name=name, metric_value=round(test[key], 4))
               for key, name in (("accuracy", "Accuracy"), ("ece", "ECE"), ("nll", "NLL"))]
    entries += [EvalResult(**task, metric_type=key, metric_name=f"{name} after temperature scaling",
                           metric_value=round(test[f"{key}_scaled"], 4)) for key, name in (("ece", "ECE"), ("nll", "NLL"))]
    entries += [EvalResult(**task, metric_type="auroc", metric_name=f"OOD AUROC vs {results['ood_dataset']} "
                           f"({SCORE_NAMES[key]})", metric_value=round(value, 4))
                for key, value in results["ood"].items()]
    name = results["model"].rstrip("/").split("/")[-1]
    return ModelCardData(model_name=name, eval_results=entries).to_yaml() + "\n"


def eval_table(results: list[EvalResult]) -> str:
    """The card's markdown table of `results`, each value with its unit: accuracy, ECE, TACE and AUROC (fractions)
    in %, NLL (nats) and Brier as they are; shown as the model-index holds them (`CARD_DECIMALS`), so that no value
    is rounded twice (0.89155 -> 0.8915 -> "0.891")."""
    lines = ["| Dataset | Split | Metric | Value |", "|---|---|---|---|"]
    for r in results:
        value = f"{100 * r.metric_value:.2f} %" if r.metric_type in PERCENT_METRICS else f"{r.metric_value:.4f}"
        lines.append(f"| {r.dataset_name} | {r.dataset_split or '–'} | {r.metric_name or r.metric_type} | {value} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------- the card
def describe_encoder(config) -> str:
    """A short description of the encoder an `InSubConfig` names, every value read from its encoder config (a CIFAR
    ResNet: `insub_cifar_resnet` (depth 10, width multiplier 0.25, hidden size 128, image size 28))."""
    if config.timm_model_name:
        return f"timm `{config.timm_model_name}`"
    encoder = config.encoder_config
    parts = [f"`{encoder.model_type}`"]
    for key, label in (("depth", "depth"), ("width_multiplier", "width multiplier"), ("hidden_size", "hidden size"),
                       ("num_hidden_layers", "layers"), ("image_size", "image size"), ("patch_size", "patch"),
                       ("conv_filters", "filters"), ("lstm_hidden_size", "LSTM")):
        if getattr(encoder, key, None) is not None:
            parts.append(f"{label} {getattr(encoder, key)}")
    return " ".join(parts[:1]) + (f" ({', '.join(parts[1:])})" if len(parts) > 1 else "")


def _usage(config, main_input: str, auto_class: str, repo_id: str, processor: bool = False) -> dict[str, str]:
    if main_input == "input_ids":
        inputs = ("from transformers import AutoTokenizer\n\n"
                  f"tokenizer = AutoTokenizer.from_pretrained(\"{repo_id}\", trust_remote_code=True)\n"
                  "inputs = tokenizer([\"A sentence to embed.\"], padding=True, truncation=True, return_tensors=\"pt\")"
                  "  # truncation: at the model's length, as sentence-transformers")
        call = "(**inputs)"
        batch = "dict(inputs)"
    elif main_input == "dna_one_hot":
        fitted = config.uncertainty["length_range"]  # the window length its uncertainty was calibrated at
        length = fitted[0] if fitted else 200
        said = f"{length} bases, the windows its uncertainty was calibrated on; " if fitted else ""
        inputs = (f"sequence = (\"ACGT\" * {-(-length // 4)})[:{length}]  # {said}(B, L, 4) one-hot, channels A, C, "
                  "G, T\n"
                  "dna_one_hot = torch.nn.functional.one_hot(torch.tensor([\"ACGT\".index(b) for b in sequence]), 4)"
                  ".float()[None]")
        call = "(dna_one_hot=dna_one_hot)"
        batch = "{\"dna_one_hot\": dna_one_hot}"
    elif processor:
        inputs = ("from PIL import Image\nfrom transformers import AutoImageProcessor\n\n"
                  f"processor = AutoImageProcessor.from_pretrained(\"{repo_id}\", trust_remote_code=True)\n"
                  "inputs = processor(Image.open(\"your_image.png\"), return_tensors=\"pt\")  # resize, crop, normalise")
        call = "(**inputs)"
        batch = "dict(inputs)"
    else:
        encoder = config.encoder_config
        size = getattr(encoder, "image_size", 224) if encoder is not None else 224
        channels = getattr(encoder, "num_channels", 3) if encoder is not None else 3
        inputs = f"pixel_values = torch.randn(1, {channels}, {size}, {size})  # your normalised images"
        call = "(pixel_values=pixel_values)"
        batch = "{\"pixel_values\": pixel_values}"
    if auto_class == "AutoModelForImageClassification" and config.num_heads > 1:
        outputs = ("probabilities = out.logits.softmax(-1)  # the M heads' mean prediction\n"
                   "uncertainty = out.mutual_information     # (B,): how much the heads disagree, higher = less certain")
    elif auto_class == "AutoModelForImageClassification":
        outputs = ("probabilities = out.logits.softmax(-1)\n"
                   "uncertainty = out.entropy  # (B,): the prediction's entropy (one head: no mutual information)")
    elif auto_class == "AutoModelForSequenceClassification":
        outputs = "probabilities = out.logits.softmax(-1)"
    else:
        reading = served_reading(config.uncertainty)
        said = (reading.comment if reading is not None else
                "None: not fitted; model.fit_uncertainty(your_inputs) with insub-hf fits it")
        outputs = ("features = out.representation  # (B, d): what probes and k-NN read\n"
                   f"uncertainty = out.uncertainty   # (B,): {said}")
        single = single_reading(config.uncertainty)
        if single is not None and not single.note:  # a single reading has its own output, as it is
            outputs += f"\n{single.output} = out.{single.output}  # (B,): {single.comment}"
    return {"usage_inputs": inputs, "usage_call": call, "usage_outputs": outputs, "detector_batch": batch}


def package_provenance() -> str:
    """The package's git commit (with `-dirty` when its files differ from it), or its version outside a checkout:
    what a card says made it."""
    from ..version import __version__

    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "insub_hf"], cwd=root, capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"insub-hf {__version__} (not a git checkout)"
    return f"commit {head}{'-dirty' if dirty else ''}"


def model_card(model, repo_id: str, card: HubCard | None = None) -> ModelCard:
    """The generated model card of `model` (an InSub model) for the repo `repo_id`, with `card`'s content."""
    import transformers

    from ..version import __version__

    card = card or HubCard()
    eval_results = card.eval_results
    config = model.config
    block = config.uncertainty
    class_name = type(model).__name__
    auto_class = AUTO_CLASSES.get(class_name, "AutoModel")
    name = repo_id.split("/")[-1]
    heads = "MLP " + "-".join(str(s) for s in [*config.head_hidden_sizes, config.head_output_size])
    main_input = getattr(model, "main_input_name", "pixel_values")
    classifier = is_classifier(model)
    sentences = is_sentence_model(model, card.tokenizer)
    card_data = ModelCardData(
        model_name=name, library_name="sentence-transformers" if sentences else "transformers", datasets=card.datasets,
        eval_results=eval_results or None, license=card.license, base_model=card.base_model,
        tags=["insub-hf", "insub", "self-supervised-learning", "uncertainty", config.objective,
              *(["sentence-transformers", "feature-extraction"] if sentences else []), *(card.tags or [])],
        pipeline_tag="sentence-similarity" if sentences else PIPELINE_TAGS[main_input, classifier],
    )
    return ModelCard.from_template(
        card_data, template_path=str(TEMPLATE), model_name=name, repo_id=repo_id, class_name=class_name,
        auto_class=auto_class, encoder=describe_encoder(config), num_heads=config.num_heads, heads=heads,
        objective=config.objective_options.title, alpha=config.diversity_alpha, weight=config.diversity_weight,
        eps=config.diversity_eps, loss_form=_loss_form(config), reduction=(
            "averaged over the two views, as in the authors' code" if config.diversity_reduction == "mean"
            else "summed over the two views"
        ), training_data=card.training_data or "Not recorded when this card was generated.",
        eval_table=eval_table(eval_results) if eval_results else "", notes=card.notes, citation=CITATION,
        insub_version=__version__, transformers_version=transformers.__version__,
        frozen_base=frozen_base_facts(model),
        direction=block["direction"], calibration=CALIBRATION_SETS[main_input],
        bank={"k": block["k"], "size": block["bank_size"]} if reads_bank(block) else None,
        by_length=reads_lengths(block), hyperparameters=card.hyperparameters,
        served=getattr(served_reading(block), "comment", None),
        calibrated=None if not is_calibrated(block) else {
            "components": block["components"], "combination": block["combination"], "direction": block["direction"],
            "k": block["k"],
            "bank": block["bank_size"], "calibration": block["calibration_size"][1],
            "blind": blind_reading(block)},
        detector=_detector_facts(block, card.detector), provenance=card.provenance,
        requirements=" ".join(REQUIREMENTS[main_input] + (("sentence-transformers",) if sentences else ())),
        sentences=sentences,
        **_usage(config, main_input, auto_class, repo_id, processor=card.processor is not None),
    )


# What the jobs fix the spread's direction on, per input (in-distribution inputs against these)
CALIBRATION_SETS = {
    "pixel_values": "training images against noise images",
    "input_ids": "held-out sentences against their shuffled words",
    "dna_one_hot": "training sequences against uniformly random ones",
}


# What a model of each input needs to load with trust_remote_code=True (no insub-hf)
REQUIREMENTS = {
    "pixel_values": ("torch", "transformers", "safetensors", "pillow"),
    "input_ids": ("torch", "transformers", "safetensors"),
    "dna_one_hot": ("torch", "transformers", "safetensors"),
}


def is_classifier(model) -> bool:
    """Whether `model` is one of the InSub classifiers (its card and folder differ: no sentence-transformers files)."""
    return AUTO_CLASSES.get(type(model).__name__) in ("AutoModelForSequenceClassification",
                                                      "AutoModelForImageClassification")


def is_sentence_model(model, tokenizer) -> bool:
    """Whether `model` with `tokenizer` is published as a sentence model (a sentence-transformers folder and card): a
    text model that is not a classifier, with its tokenizer."""
    return getattr(model, "main_input_name", None) == "input_ids" and not is_classifier(model) and tokenizer is not None


def _detector_facts(block: dict, detector) -> dict | None:
    """What the card says of the model's k-NN bank and head-spread direction (its config's `uncertainty` block),
    and of how `detector` (an `InSubOODDetector`, or None) fixed that direction; None where there is neither."""
    calibration = getattr(detector, "calibration", None)
    if not block["bank_size"] and calibration is None:
        return None
    interval = None if calibration is None else calibration.interval
    return {"k": block["k"], "bank": block["bank_size"], "direction": block["direction"],
            "holds": None if interval is None else calibration.usable_direction is not None,
            "interval": None if interval is None else f"{100 * interval[0]:.1f}-{100 * interval[1]:.1f} %"}


def _loss_form(config) -> str:
    """How the objective read the mean head embedding, in words."""
    if config.objective != "simclr":
        return "the raw mean of the L2-normalised heads"
    options = config.objective_options
    if options.normalize_mean:
        return f"cosine similarity of the re-normalised mean, temperature {options.temperature:g}"
    scale = "" if options.base_temperature is None else f", scaled by tau / {options.base_temperature:g}"
    return (f"the authors' objective: dot product of the raw mean of the L2-normalised heads, temperature "
            f"{options.temperature:g}{scale}")



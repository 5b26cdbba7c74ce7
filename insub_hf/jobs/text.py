"""The text job: SCD pretraining of a single-head baseline and of InSub on a BERT-style encoder (by the text recipe,
heads only over the frozen encoder: `--freeze_encoder false` tunes it too), then SentEval-style transfer of the
frozen sentence embeddings (the bundled tweets offline; MR ... MRPC and STS-B through the Hub)."""

from __future__ import annotations

import copy

from dataclasses import asdict
from functools import partial
from pathlib import Path

import numpy as np
import torch
from transformers import AutoConfig

from ..data import TextViews, balanced_indices, load_sentence_corpus, load_tweet_sentiment
from ..encoders import load_encoder_weights
from ..encoders.pretrained import MINILM_HUB_ID, base_tokenizer, encoder_path
from ..evaluation.flagging import served_rows
from ..evaluation.metrics import split_half_r_auroc
from ..checksums import weights_fingerprint
from ..uncertainty.knn import encoder_and_heads_fingerprint
from ..evaluation.senteval import evaluate_task, load_senteval_task
from .cards import HubCard, run_card
from ..model.modeling_insub import InSubModel
from .arguments import TextArguments, text_config, training_arguments
from .experiment import UNCERTAINTY_ROWS, Experiment, Variant, baseline_and_insub
from ..recipes import TEXT
from ..model.sentence_embeddings import InSubSentenceEncoder
from ..training.trainer import InSubTrainingArguments
from ..uncertainty.readings import served_reading

# The text recipe's training (`recipes.TEXT`: 1 epoch, batch 64, the heads at 1e-3 over the frozen encoder)
TRAINING_DEFAULTS = TEXT.training_arguments(output_dir="runs/text")


def _tweets(args: TextArguments, seed: int):
    """A seeded class-balanced draw of `transfer_sentences` bundled transfer tweets."""
    data = load_tweet_sentiment("transfer")
    return data.select(balanced_indices(np.asarray(data["label"]), args.transfer_sentences // 3, seed))


def run_text(args: TextArguments, training_args: InSubTrainingArguments | None = None) -> dict:
    """Pretrained encoder as is, SCD baseline (M=1, lambda=0), SCD InSub (M, lambda), trained with `training_args`
    (default: `TRAINING_DEFAULTS`; its seed also draws the transfer data and folds): transfer table + JSON; with
    `--push_to_hub`, the InSub sentence model and its numbers are pushed."""
    training_args = training_args or training_arguments(TRAINING_DEFAULTS)
    seed = training_args.seed
    path = encoder_path(args.encoder)
    experiment = Experiment("text", training_args, asdict(args), TRAINING_DEFAULTS,
                            overwrite=args.overwrite_output_dir)
    tokenizer = base_tokenizer(path)
    encoder_config = AutoConfig.from_pretrained(path)
    corpus = load_sentence_corpus(args.corpus, args.text_column, max_sentences=args.max_sentences)
    views = TextViews(tokenizer, args.text_column, args.max_length, encoder_config.vocab_size)
    train = corpus.with_transform(views)
    task_data = {
        name: _tweets(args, seed) if name == "TWEETS" else load_senteval_task(name, args.task_path) for name in args.tasks
    }
    print(f"corpus {args.corpus!r}: {len(corpus)} sentences; encoder {path}; tasks {args.tasks}")

    untouched = InSubModel(text_config(args, encoder_config, 1, 0.0))
    load_encoder_weights(untouched, path)
    models = {"pretrained (no SCD)": untouched}
    # the saved models' uncertainty: fitted on pretraining sentences (a bank, and some of them to rank against)
    fit_on = dict(tokenizer(list(corpus[args.text_column][:UNCERTAINTY_ROWS]), max_length=args.max_length,
                            truncation=True, padding=True, return_tensors="pt"))
    for name, config in baseline_and_insub(partial(text_config, args, encoder_config), args.num_heads, args.diversity_weight, prefix="scd_"):
        variant = Variant(name, config, seed)
        result = experiment.pretrain(variant, train, init_encoder_from=path, uncertainty_inputs=(fit_on, None))
        tokenizer.save_pretrained(experiment.output_dir / name / "model")  # loads with InSubSentenceEncoder
        models[name] = result.model.insub
    results, transfer = {}, {}
    for name, model in models.items():
        encoder = InSubSentenceEncoder(model, tokenizer)  # the base model's length, as its users embed
        embed = lambda sentences: encoder.encode(sentences).embeddings  # noqa: E731
        # the transfer reads the encoder alone: models whose encoders are one (heads trained over a frozen encoder,
        # the recipe's default) share its numbers, computed once
        key = weights_fingerprint(model.encoder)
        if key not in transfer:
            print(f"[text] transfer of {name}: {', '.join(task_data)} ({args.folds}-fold where cross-validated)",
                  flush=True)
            transfer[key] = {task: evaluate_task(embed, task, data, args.folds, seed) for task, data in task_data.items()}
        else:
            print(f"[text] transfer of {name}: its encoder's numbers, measured above (the same weights)", flush=True)
        results[name] = copy.deepcopy(transfer[key])
        # the per-sentence uncertainty as a representation's (R-AUROC), beside 1-NN distance, where the model has one
        if "TWEETS" in task_data and served_reading(model.config.uncertainty) is not None:
            tweets = task_data["TWEETS"]
            encoded = encoder.encode(list(tweets["text"]))
            served = served_rows(encoded.uncertainty)  # not served: a tweet outside the calibrated token counts
            results[name]["TWEETS"].update(mean_uncertainty=float(encoded.uncertainty[served].mean()),
                                           **split_half_r_auroc(encoded.embeddings[served], encoded.uncertainty[served],
                                                                torch.as_tensor(tweets["label"])[served]))
    lines = ["\nmodel                    task     accuracy     ECE      NLL   (STS: Spearman x100)"]
    for name, per_task in results.items():
        for task, r in per_task.items():
            if "spearman" in r:
                lines.append(f"{name:<24} {task:<6} {r['spearman']:8.2f}")
            else:
                lines.append(
                    f"{name:<24} {task:<6} {100 * r['accuracy']:8.2f}   {100 * r['ece']:6.2f}   {r['nll']:6.3f}"
                )
    out = experiment.output_dir
    lines.append(f"models: {out}/<name>/model (InSubSentenceEncoder.from_pretrained); numbers: {out}/results.json")
    fingerprints = {name: encoder_and_heads_fingerprint(model) for name, model in models.items()}  # which model each row is
    base_model = MINILM_HUB_ID if args.encoder == "minilm" else None  # the Hub id the models start from
    results_file = experiment.finish({"results": results, "fingerprints": fingerprints, "base_model": base_model},
                                     "\n".join(lines))
    name = f"scd_insub_m{args.num_heads}"
    if experiment.push_target is not None:
        experiment.push(models[name], text_model_card(results_file, name, tokenizer, models[name]),
                        commit_message="InSub sentence model and insub-hf text results")
    return results


def text_model_card(results_file: Path, name: str, tokenizer, model=None) -> HubCard:
    """What the InSub sentence model `name` of the job's `results_file` is pushed with: its tokenizer, the card the
    results give (`cards.card_from_results`: transfer numbers, corpus, settings, base model) and the whole
    results.json under `evaluation/`."""
    return run_card(results_file, name, model, tokenizer=tokenizer)


ARGUMENT_GROUPS = (TextArguments, InSubTrainingArguments)
run = run_text

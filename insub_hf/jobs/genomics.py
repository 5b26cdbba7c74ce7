"""The genomics job: Self-GenomeNet pretraining (single-head baseline and InSub) on unlabelled DNA, then calibrated
sequence classification by a linear probe on the frozen encoder and by fine-tuning, with the harness's metrics."""

from __future__ import annotations

from dataclasses import asdict
from functools import partial
from pathlib import Path

import torch
from datasets import ClassLabel

from ..model.configuration_insub import InSubConfig
from ..data import DNAViews, bundled_upstream_path, load_fasta_dataset, load_labelled_sequences, load_splice_junctions
from ..data.dna_views import one_hot_dna
from ..evaluation.features import extract_features
from ..evaluation.harness import summarize
from ..uncertainty.knn import encoder_and_heads_fingerprint
from ..evaluation.probes import ProbeArguments, fit_probes, member_probabilities
from ..model.modeling_classification import InSubForSequenceClassification
from ..model.modeling_insub import InSubModel
from .arguments import GenomicsArguments, genomics_config, training_arguments
from .experiment import UNCERTAINTY_ROWS, Experiment, Variant, baseline_and_insub
from ..recipes import DNA
from ..training.trainer import InSubTrainer, InSubTrainingArguments

# The DNA recipe's training (`recipes.DNA`: 4 epochs, batch 64, learning rate 1e-3)
TRAINING_DEFAULTS = DNA.training_arguments(output_dir="runs/genomics")


def encode_labelled(data) -> tuple[torch.Tensor, torch.Tensor]:
    """One-hot `(N, L, 4)` (all sequences must share L) and labels `(N,)`; errors name the record (its `name`
    column: FASTA header or file row), else the row."""
    names = data["name"] if "name" in data.column_names else [f"sequence[{i}]" for i in range(len(data))]
    encoded = [one_hot_dna(s, name=name) for s, name in zip(data["sequence"], names)]
    lengths = {x.shape[0] for x in encoded}
    if len(lengths) != 1:
        raise ValueError(f"labelled sequences must share one length to be batched, got lengths {sorted(lengths)[:5]}.")
    return torch.stack(encoded), torch.as_tensor(data["label"])


def finetune(
    pretrained: InSubModel, train, test, num_classes: int, args: GenomicsArguments,
    training_args: InSubTrainingArguments, out: Path,
) -> torch.Tensor:
    """Fine-tunes encoder + a linear classifier with the Trainer (`args.finetune_epochs`, the pretraining's batch,
    learning rate and seed; no weight decay or warm-up, a linear decay); returns test probabilities `(T, C)`."""
    config = InSubConfig.from_dict({**pretrained.config.to_dict(), "num_labels": num_classes})
    model = InSubForSequenceClassification(config)
    model.insub.encoder.load_state_dict(pretrained.encoder.state_dict())
    rows = [{"dna_one_hot": x, "labels": y} for x, y in zip(*train)]
    trainer_args = InSubTrainingArguments(
        output_dir=str(out), num_train_epochs=args.finetune_epochs,
        per_device_train_batch_size=training_args.per_device_train_batch_size, learning_rate=training_args.learning_rate,
        save_strategy="no", report_to=[], seed=training_args.seed, disable_tqdm=True, logging_strategy="epoch",
    )
    InSubTrainer(model=model, args=trainer_args, train_dataset=rows).train()
    model.eval()
    with torch.no_grad():
        return torch.softmax(model(dna_one_hot=test[0]).logits.double(), dim=-1)


def run_genomics(args: GenomicsArguments, training_args: InSubTrainingArguments | None = None) -> dict:
    """Baseline (M=1) and InSub (M) pretraining with `training_args` (default: `TRAINING_DEFAULTS`; its seed also
    splits the labelled set), then probe and fine-tuning on the labelled set; table + JSON."""
    training_args = training_args or training_arguments(TRAINING_DEFAULTS)
    seed = training_args.seed
    experiment = Experiment(  # checks the output folder before the data are read
        "genomics", training_args, asdict(args), TRAINING_DEFAULTS, overwrite=args.overwrite_output_dir,
    )
    fasta = args.pretrain_fasta or bundled_upstream_path()
    corpus = load_fasta_dataset(fasta)
    labelled = load_labelled_sequences(args.labelled) if args.labelled else load_splice_junctions()
    num_classes = labelled.features["label"].num_classes if isinstance(labelled.features["label"], ClassLabel) else (
        int(max(labelled["label"])) + 1)
    split = labelled.train_test_split(test_size=args.test_fraction, seed=seed, stratify_by_column="label")
    train, test = encode_labelled(split["train"]), encode_labelled(split["test"])
    print(f"pretraining: {len(corpus)} sequences from {fasta}, crops of {args.crop_length} nt; classification: "
          f"{len(train[1])} train / {len(test[1])} test, {num_classes} classes")
    views = corpus.with_transform(DNAViews(args.crop_length, two_views=False))
    out, results, fingerprints = experiment.output_dir, {}, {}
    # the saved models' uncertainty: fitted on crops of the pretraining sequences (a bank, and some to rank against)
    crops = views[:UNCERTAINTY_ROWS]["dna_one_hot"]
    fit_on = {"dna_one_hot": torch.stack(crops)}
    for name, config in baseline_and_insub(partial(genomics_config, args), args.num_heads, args.diversity_weight):
        run = experiment.pretrain(Variant(name, config, seed), views, uncertainty_inputs=(fit_on, None))
        encoder = run.model.insub
        fingerprints[name] = encoder_and_heads_fingerprint(encoder)  # which model each row is (before fine-tuning copies it)
        features = extract_features(encoder, {"dna_one_hot": train[0]}).representations  # (N, 1, d)
        probes = fit_probes(features, train[1], num_classes, 1, ProbeArguments(probe_seed=seed))
        test_features = extract_features(encoder, {"dna_one_hot": test[0]}).representations
        probe_probs = member_probabilities(probes, test_features)
        finetuned = finetune(encoder, train, test, num_classes, args, training_args, out / name / "finetune")
        results[name] = {
            "pretraining": {"final_ssl_loss": [r["ssl_loss"] for r in run.log_history if "ssl_loss" in r][-1]},
            "linear_probe": asdict(summarize(probe_probs, test[1])),
            "finetune": asdict(summarize(finetuned.unsqueeze(1), test[1])),
        }
    lines = ["\nmodel          protocol        accuracy     ECE     TACE      NLL"]
    for name, r in results.items():
        for protocol in ("linear_probe", "finetune"):
            s = r[protocol]
            lines.append(f"{name:<14} {protocol:<14} {100 * s['accuracy']:8.2f}  {100 * s['ece']:6.2f}  "
                         f"{100 * s['tace']:6.2f}   {s['nll']:6.3f}")
    lines.append(f"numbers: {out}/results.json")
    experiment.finish({"results": results, "fingerprints": fingerprints, "modality": "dna"}, "\n".join(lines))
    return results


# The DNA release's calibration and in-distribution test: each the share of the pretraining sequences before the last
# and the last, at most this many windows
DNA_HELD_OUT, HELD_OUT_ROWS = 0.2, 2000


def dna_windows(sequences: list[str], length: int) -> torch.Tensor:
    """Every whole window of `length` nt of each sequence, one-hot, in order: `(W, length, 4)`."""
    return torch.stack([one_hot_dna(s[i:i + length]) for s in sequences for i in range(0, len(s) - length + 1, length)])


def dna_parts(sequences: list[str], seed: int) -> tuple[list[str], list[str], list[str]]:
    """The DNA release's sequences in a seeded order, then split by sequence (no window's neighbours sit across
    parts; a file's own order, by chromosome for instance, does not decide the parts): the bank's, the calibration's
    and the test's, each of the last two `DNA_HELD_OUT` of them."""
    order = torch.randperm(len(sequences), generator=torch.Generator().manual_seed(seed)).tolist()
    shuffled = [sequences[i] for i in order]
    part = max(1, round(DNA_HELD_OUT * len(sequences)))
    return shuffled[:-2 * part], shuffled[-2 * part:-part], shuffled[-part:]


ARGUMENT_GROUPS = (GenomicsArguments, InSubTrainingArguments)
run = run_genomics

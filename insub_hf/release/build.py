"""`insub-hf release RECIPE`: one command from nothing to a published model. It runs the recipe's job (`compare` for
images, `text`, `genomics` for DNA: baseline and InSub at the same budget, resumable from their run folders and the
run cache), fits the label-free OOD detector on the InSub model, and writes the complete Hub folder (weights, config,
remote code, image processor or tokenizer and sentence-transformers files, the detector, the generated card whose
numbers come from this run, with the commit, data, seed, machine and wall time) to `output_dir/hub`, and that folder
to `model_cards/NAME` when its files fit the repository (else the card alone). `--push_to_hub` uploads the folder
once, at the end (to `--hub_model_id`, default the release's name under the token's account).

`insub-hf release image --help` lists every flag of that recipe: its job's own, the Trainer's, and the release's.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace

import torch
from transformers import TrainingArguments

from ..jobs.cards import HubCard, RunRecord, run_card
from .cards import (
    dna_versus_baseline, provenance, shipped_readings, text_uncertainty_section, text_versus_baseline,
    threshold_section, versus_baseline,
)
from ..checkpointing import atomic_folder
from ..model.model_files import CARD_ONLY_KEY
from ..evaluation.ood_detector import CALIBRATION_SEED
from ..hub import final_push_target, save_for_hub, upload_hub_folder
from ..uncertainty.fitting import CALIBRATION_ROWS
from ..training.training_args import TRAINER_FIELDS
from ..validation import CheckedArguments, checked
from ..jobs import compare, genomics, text
from ..jobs.genomics import DNA_HELD_OUT, HELD_OUT_ROWS, dna_parts, dna_windows
from ..jobs.heartbeat import heartbeat
from . import text_reading
from .shipped import MIN_DETECTOR_BANK, fit_shipped, measured_model, reused_run
from .text_reading import TextReleaseArguments
from .publish import MetricsArguments, PublishArguments, fits_the_repository, publish_metrics, publish_releases

# Training inputs the shipped detector keeps as its bank (the Hub folder stays small; k-NN distances barely move)
DETECTOR_BANK = 10_000


@dataclass
class ReleaseArguments(CheckedArguments):
    """Where a release goes beside its runs (`--output_dir`) and the Hub (`--push_to_hub --hub_model_id`). Checked
    before any training: a name that is one folder name, a `model_cards` folder, and a published card kept unless
    `--replace_card` says to replace it."""

    _argument_group_name = 'release'

    name: str | None = field(default=None, metadata={"help": "The model's name (card title, model_cards/NAME); "
                                                              "default: the recipe's release name. RECIPE is image, "
                                                              "text or dna: `insub-hf release RECIPE --help` lists "
                                                              "its job's and the Trainer's flags too."})
    model_cards: str = field(default="model_cards", metadata={"help": "Where the card is copied (model_cards/NAME)."})
    detector_bank: int = checked(DETECTOR_BANK, "Training inputs the shipped OOD detector keeps (at least "
                                 f"{MIN_DETECTOR_BANK}: its k-NN scores need neighbours).", low=MIN_DETECTOR_BANK,
                                 integer=True)
    replace_card: bool = field(default=False, metadata={"help": "Replace the published card model_cards/NAME/README.md "
                                                                 "(refused otherwise, before any training)."})
    reuse: str | None = field(default=None, metadata={"help": "The image recipe only: re-make the release from a "
                                                      "folder it published (its weights and evaluation/results.json, "
                                                      "the run's own settings) without training, with this commit's "
                                                      "files, bank and card; how a folder made by an earlier commit "
                                                      "is brought up to date."})

    def check_places(self, command: str | None = None, hub_model_id: str | None = None) -> None:
        """The name and the card's place, before any work (`name` is set by then). A published card is replaced only
        with `replace_card`, or when `command` made it (a re-run of the same release: its card says "Made by
        `COMMAND`") for the repo it names (its `evaluation/results.json`'s `hub_model_id`, which the command leaves
        out): a re-run never relabels it."""
        if not self.name or Path(self.name).name != self.name or self.name in (".", ".."):
            raise ValueError(f"ReleaseArguments.name must be one folder name (no '/' or '..'), got {self.name!r}.")
        cards = Path(self.model_cards)
        if cards.exists() and not cards.is_dir():
            raise ValueError(f"ReleaseArguments.model_cards={self.model_cards!r} is a file; it must be a folder.")
        published = cards / self.name / "README.md"
        own = command is not None and published.is_file() and f"Made by `{command}`" in published.read_text(
            encoding="utf-8")
        if published.is_file() and not (self.replace_card or own):
            raise ValueError(
                f"ReleaseArguments.model_cards: {published} is a published card; a release replaces it only with "
                "--replace_card true (or give another --model_cards or --name)."
            )
        named = recorded_repo(published.parent) if own and not self.replace_card else None
        if named and hub_model_id != named:
            raise ValueError(
                f"ReleaseArguments.model_cards: {published} is a published card for the repo {named!r}, and this run "
                f"would name {hub_model_id!r}: give --hub_model_id {named} to make it again, --replace_card true to "
                "relabel it, or another --model_cards or --name."
            )


def recorded_repo(folder: Path) -> str | None:
    """The repo a release folder's run record names (`evaluation/results.json`'s `args.hub_model_id`); None when the
    folder has no whole record to say it (none, or one `RunRecord.read` refuses)."""
    try:
        named = RunRecord.read(folder / "evaluation" / "results.json").args.get("hub_model_id")
    except (OSError, ValueError, AttributeError):  # AttributeError: `args` recorded as other than a mapping
        return None
    return named if isinstance(named, str) else None


def card_only_notice(command: str, minutes: float, folder: str) -> str:
    """The first lines of a card kept without its model (over the repository's size limits): how to build the
    folder the card describes (`folder`, where the command writes it by default), and how long that took here."""
    return (f"> **This folder holds the model's card only**: its files are over the repository's size limits. "
            f"`{command}` builds the whole Hub folder (weights, tokenizer, remote code, sentence-transformers files) "
            f"into `{folder}` (`--output_dir`/hub) in about {max(1, round(minutes))} min on a 2-core CPU machine "
            "(quiet; several times that when the machine is busy); load that folder where the snippets below name "
            "the repo, or add `--push_to_hub --hub_model_id ORG/NAME` to upload it.\n\n")


def card_only_files(target: Path, name: str, built: tuple[str, float, str] | None) -> None:
    """Beside a card kept without its model (in `target`): a config.json whose `CARD_ONLY_KEY` holds one line saying
    how to build the folder, and whose `auto_map` names a configuration module that raises that line. So
    `SentenceTransformer(target, trust_remote_code=True)` and `AutoModel.from_pretrained(target,
    trust_remote_code=True)`, where insub-hf is not installed, stop in that line; with insub-hf, so does
    `from_pretrained` without remote code. Not a model: `publish_releases` and the released-folder checks skip it."""
    how = (f"`{built[0]}` builds it into {built[2]} in about {max(1, round(built[1]))} min on a 2-core CPU machine "
           "(quiet)" if built else "`insub-hf release` builds it into its output_dir/hub")
    line = (f"{target.name} holds the card of {name} only (its files are over the repository's size limits), no "
            f"model: {how}; load that folder, or the Hub repo it was pushed to.")
    config = {"model_type": "insub", CARD_ONLY_KEY: line, "auto_map": {"AutoConfig": "configuration_insub.InSubConfig"}}
    (target / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    (target / "configuration_insub.py").write_text(
        f'"""{name}: the card of a model whose files are not here. Loading this folder with remote code stops here, '
        'saying how to build the folder."""\n\n'
        f"raise ImportError({line!r})\n", encoding="utf-8")


def publish(release: ReleaseArguments, model, card: HubCard, training_args, push,
            built: tuple[str, float, str] | None = None) -> Path:
    """Writes the Hub folder to `output_dir/hub` (only a complete, checked folder appears), copies its card to
    `model_cards/NAME` (the whole folder when it `fits_the_repository`, else the card, led by how to build the
    folder when `built` gives (command, minutes it took, the folder it writes): `card_only_notice`), and uploads
    the folder when `push` (a `final_push_target`) is set. The card's
    snippets load the repo it goes to: the pushed one, else `--hub_model_id` (default: the release's name)."""
    output_dir = Path(training_args.output_dir)
    folder = output_dir / "hub"
    with atomic_folder(folder) as tmp:
        save_for_hub(model, tmp, push[0] if push is not None else training_args.hub_model_id or release.name, card)
    target = Path(release.model_cards) / release.name
    files = [path for path in folder.rglob("*") if path.is_file()]
    if fits_the_repository(files):  # the whole Hub folder, as `hf upload` would send it
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(folder, target)
        kept = "the whole Hub folder"
    else:  # e.g. the text model, whose base model alone is 90 MB: the card only, leading with how to build it
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        text = (folder / "README.md").read_text(encoding="utf-8")
        if built is not None:
            _, front, body = text.split("---\n", 2)
            title, rest = body.split("\n\n", 1) if body.lstrip().startswith("#") else ("", body)
            text = f"---\n{front}---\n{title}\n\n{card_only_notice(*built)}{rest}"
        (target / "README.md").write_text(text, encoding="utf-8")
        card_only_files(target, release.name, built)
        kept = "its card only (the folder is over the repository's size limits)"
    print(f"[release] {folder}: the Hub folder; {target} holds {kept}", flush=True)
    if push is not None:
        repo_id, token = push
        print(f"[release] pushed to {repo_id}: {upload_hub_folder(folder, repo_id, token)}", flush=True)
    return folder


def release_image(command: str, release, args, training_args, probe_args, harness_args) -> Path:
    """The image release: `insub-hf compare` with the baseline and InSub (the image recipe), then the InSub model's
    calibrated `uncertainty` fitted on training images (`fit_shipped`) and measured on the test and OOD images."""
    from ..evaluation.results import ComparisonRow
    from ..jobs.comparison import load_protocol_data

    missing = [method for method in ("baseline", "insub") if method not in args.methods]
    if missing:  # before any training: the card sets InSub beside its baseline
        raise ValueError(
            f"ComparisonArguments.methods={args.methods} lacks {missing}: the image release publishes the InSub "
            "model beside its baseline; give --methods baseline insub (and any others)."
        )
    start, push = time.time(), final_push_target(training_args)
    out = Path(training_args.output_dir)
    if release.reuse:
        args = reused_run(Path(release.reuse), out, args)
    else:
        compare.run_comparison(args, training_args, probe_args, harness_args)
    rows = {}  # each method's row of the first seed: the model the card names (`cards._named` takes the first too)
    for entry in RunRecord.read(out / "results.json").numbers["rows"]:
        rows.setdefault(entry["method"], ComparisonRow.from_dict(entry))
    row = rows["insub"]
    model = measured_model(Path(release.reuse) if release.reuse else out, row.results.fingerprints)
    data = load_protocol_data(args).evaluation  # images in [0, 1] and the normalisation the model was trained with
    fit_shipped(model, data.inputs(data.train_images), release.detector_bank)
    card = replace(compare.comparison_card(out, row.name, args.dataset, model),
                   notes=versus_baseline(rows["baseline"].results, row.results))
    card, _ = shipped_readings(card, model, data, args.dataset, {name: s["knn"] for name, s in row.results.ood.items()})
    card = replace(card, provenance=provenance(command, row.seed, time.time() - start,
                                               sum(r.results.cost.pretraining_seconds for r in rows.values())))
    return publish(release, model, card, training_args, push)


def run_job(job, args, training_args, name: str):
    """Runs a text or genomics `job` (its push turned off: the release pushes once); returns the start time, the push
    target, the output folder, the numbers of its results.json (`RunRecord.numbers`) and the trained model `name`."""
    start, push = time.time(), final_push_target(training_args)
    job(args, training_args)
    out = Path(training_args.output_dir)
    results = RunRecord.read(out / "results.json").numbers
    return start, push, out, results, measured_model(out, [results["fingerprints"][name]])


def release_text(command: str, release, reading: TextReleaseArguments, args, training_args) -> Path:
    """The text release: `insub-hf text` (the MiniLM base, the single-head baseline and InSub on the text recipe,
    transfer to the tweets), then the InSub model's single uncertainty readings measured with a bank, and what
    fitting its calibrated `uncertainty` on a user's sentences gives (`release.text_reading`). The sentence-transformers
    folder ships unfitted: a general-purpose text model serves no `uncertainty` until fitted on its user's data."""
    from transformers import AutoTokenizer

    from ..data import load_sentence_corpus
    from ..model.sentence_embeddings import InSubSentenceEncoder

    if reading.k > release.detector_bank:  # the k-NN reading searches the bank
        raise ValueError(
            f"TextReleaseArguments.k={reading.k} is more than ReleaseArguments.detector_bank={release.detector_bank}, "
            "the sentences its k-NN reading searches; give k <= detector_bank."
        )
    if reading.bank == "broad":
        bank, sources = text_reading.broad_bank(release.detector_bank, training_args.seed)
    name = f"scd_insub_m{args.num_heads}"
    start, push, out, results, model = run_job(text.run_text, args, training_args, name)
    tokenizer = AutoTokenizer.from_pretrained(out / name / "model")
    corpus = load_sentence_corpus(args.corpus, args.text_column, max_sentences=args.max_sentences)[args.text_column]
    if reading.bank == "pretraining":
        bank = list(corpus[:release.detector_bank])
        sources = {"pretraining": len(bank)}
    encoder = InSubSentenceEncoder(model.insub, tokenizer)
    print(f"[release] the single uncertainty readings with a bank of {len(bank)} sentences ({sources}): base model, "
          "then InSub on validation, test and a second domain", flush=True)
    measured = {**text_reading.measure(model.insub, tokenizer, args, reading, bank, training_args.seed),
                "bank_sources": sources}
    (out / "text_uncertainty.json").write_text(json.dumps(measured, indent=2) + "\n")
    print("[release] the calibrated uncertainty fitted on the pretraining tweets, then on docstrings; the model "
          "ships unfitted", flush=True)
    fitted = text_reading.fitted_examples(model.insub, encoder, list(corpus), release.detector_bank, reading.k,
                                          training_args.seed)
    (out / "text_fitted.json").write_text(json.dumps(fitted, indent=2) + "\n")
    card = text.text_model_card(out / "results.json", name, tokenizer, model)
    notes = "\n\n".join([text_versus_baseline(results["results"], name, model.config.freeze_encoder),
                          text_uncertainty_section(measured, fitted)])
    card = replace(card, notes=notes, provenance=provenance(command, training_args.seed, time.time() - start),
                   extra_files={**card.extra_files, "evaluation/text_fitted.json": out / "text_fitted.json",
                                "evaluation/text_uncertainty.json": out / "text_uncertainty.json"})
    return publish(release, model.insub, card, training_args, push,
                   built=(command, (time.time() - start) / 60, f"{RELEASES['text'].defaults['output_dir']}/hub"))


def release_dna(command: str, release, args, training_args) -> Path:
    """The DNA release: `insub-hf genomics` (Self-GenomeNet baseline and InSub, probe and fine-tuning on the splice
    junctions), then the InSub model's calibrated `uncertainty` fitted on windows of the pretraining sequences
    (`fit_shipped`; the sequences split by `dna_parts`: the bank's, the calibration's), and measured on windows of
    the test's sequences (never fitted on) against uniformly random sequences and those windows with their bases
    shuffled."""
    from ..data import bundled_upstream_path, load_fasta_dataset
    from ..evaluation.flagging import measured_separation
    from ..uncertainty.fitting import shuffled_within

    name = f"insub_m{args.num_heads}"
    start, push, out, results, model = run_job(genomics.run_genomics, args, training_args, name)
    sequences = load_fasta_dataset(args.pretrain_fasta or bundled_upstream_path())["sequence"]
    bank, calibration, test = (dna_windows(part, args.crop_length) for part in dna_parts(sequences, training_args.seed))
    bank = bank[:release.detector_bank]
    fit_shipped(model, {"dna_one_hot": torch.cat([bank, calibration[:CALIBRATION_ROWS]])}, len(bank))
    held_out = {"dna_one_hot": test[:HELD_OUT_ROWS]}
    generator = torch.Generator().manual_seed(CALIBRATION_SEED)
    rows = len(held_out["dna_one_hot"])
    random = torch.eye(4)[torch.randint(0, 4, (rows, args.crop_length), generator=generator)]
    numbers = measured_separation(model, held_out, {
        "uniform random": {"dna_one_hot": random},
        "shuffled bases": shuffled_within(held_out, "dna_one_hot", generator),
    })
    block = model.insub.config.uncertainty
    section = threshold_section(
        numbers, f"windows of {100 * DNA_HELD_OUT:.0f} % of the pretraining sequences, drawn at random (never fitted on)",
        f"{block['calibration_size'][1]} held-out windows, a bank of {block['bank_size']}", block["components"])
    card = run_card(out / "results.json", name, model,
                    notes="\n\n".join([dna_versus_baseline(results["results"], name), section]),
                    provenance=provenance(command, training_args.seed, time.time() - start))
    return publish(release, model.insub, card, training_args, push)


# Each release by the recipe it is made with: its job, its name, how it runs and its defaults
RELEASES = {
    "image": SimpleNamespace(
        job=compare, name="insub-resnet10-fashion-mnist", run=release_image,
        # what its card and results.json keep, nothing more: no corruptions, no semi-supervised probes
        defaults=dict(methods=["baseline", "insub"], corruptions=[], label_fractions=[],
                      output_dir="runs/release/image"),
    ),
    "text": SimpleNamespace(
        job=text, name="insub-minilm-scd", run=release_text, defaults=dict(output_dir="runs/release/text"),
        groups=(TextReleaseArguments,),
    ),
    "dna": SimpleNamespace(
        job=genomics, name="insub-genomenet-dm3", run=release_dna, defaults=dict(output_dir="runs/release/dna"),
    ),
}


ARGUMENT_GROUPS = (ReleaseArguments,)  # each recipe adds its job's groups (`select`)

# Flags that say where a release goes or who pushes it, not what it is: left out of the command its card names
NOT_REPRODUCING = {*TRAINER_FIELDS["place"], "model_cards", "replace_card", "overwrite_output_dir", "token", "repo_id",
                   "private"}


def reproducing(argv: list[str]) -> list[str]:
    """`argv` without `NOT_REPRODUCING` flags and their values, and local files by their names only (no token or
    folder of this machine reaches a card)."""
    out, skip = [], False
    for arg in argv:
        if skip and not arg.startswith("--"):
            continue
        name = arg[2:].split("=", 1)[0] if arg.startswith("--") else None
        skip = name in NOT_REPRODUCING
        if not skip:
            out.append(Path(arg).name if os.path.isabs(arg) else arg)
    return out


def select(command: str, argv: list[str]):
    """`insub-hf release RECIPE ...`: the recipe's job as the command to parse and run (`cli.run_command`)."""
    if argv and argv[0] in ("-h", "--help"):  # the release's own flags; each recipe's --help lists the rest
        return SimpleNamespace(ARGUMENT_GROUPS=ARGUMENT_GROUPS, TRAINING_DEFAULTS=None, run=None), \
            f"{command} RECIPE", argv
    if argv and argv[0] == "publish":  # what is built already goes up, nothing is rebuilt
        return SimpleNamespace(ARGUMENT_GROUPS=(PublishArguments,), TRAINING_DEFAULTS=None, run=publish_releases), \
            f"{command} publish", argv[1:]
    if argv and argv[0] == "metrics":
        return SimpleNamespace(ARGUMENT_GROUPS=(MetricsArguments,), TRAINING_DEFAULTS=None, run=publish_metrics), \
            f"{command} metrics", argv[1:]
    if not argv or argv[0] not in RELEASES:
        raise ValueError(f"RECIPE must be one of {sorted(RELEASES)}, or publish or metrics (e.g. `insub-hf {command} image "
                         f"--help`); got {argv[0] if argv else 'none'!r}.")
    recipe, rest = RELEASES[argv[0]], argv[1:]
    line = " ".join(["insub-hf", command, argv[0], *reproducing(rest)])

    def run(release: ReleaseArguments, *groups):
        if release.reuse and argv[0] != "image":
            raise ValueError(f"ReleaseArguments.reuse is for the image recipe only (its folder holds the run's weights "
                             f"and record); the {argv[0]} release trains again: leave --reuse out.")
        release.name = release.name or recipe.name
        for group in groups:  # pushed, the repository takes the release's name, not the output folder's
            if isinstance(group, TrainingArguments) and not group.hub_model_id:
                group.hub_model_id = release.name
        release.check_places(line, next((group.hub_model_id for group in groups
                                         if isinstance(group, TrainingArguments)), release.name))
        with heartbeat(f"release {argv[0]}"):  # a line at least every 30 s, whatever stage runs
            return recipe.run(line, release, *groups)

    return SimpleNamespace(
        ARGUMENT_GROUPS=(ReleaseArguments, *getattr(recipe, "groups", ()), *recipe.job.ARGUMENT_GROUPS),
        TRAINING_DEFAULTS={**recipe.job.TRAINING_DEFAULTS, **recipe.defaults}, run=run,
    ), f"{command} {argv[0]}", rest

"""`insub-hf hub`: a saved checkpoint and the evaluation results of a finished run -> the Hub repo's folder (checked,
with the generated card) and, with `--push true`, the upload."""

from __future__ import annotations

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
from ..hub import hub_token, push_model_to_hub, save_for_hub
from .cards import run_card
from ..validation import CheckedArguments, path_field


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
    model_dir = Path(args.model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir) if (model_dir / "tokenizer_config.json").is_file() else None
    processor = (AutoImageProcessor.from_pretrained(model_dir) if (model_dir / "preprocessor_config.json").is_file()
                 else None)
    # the flags replace what the run says; the record travels under evaluation/
    card = run_card(args.results, args.row, model, args.dataset, tokenizer=tokenizer, processor=processor,
                    license=args.license, training_data=args.training_data,
                    base_model=args.base_model)
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

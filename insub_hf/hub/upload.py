"""Uploading to the Hub through `huggingface_hub.HfApi`: the token and its account checked before any work, one
commit per model folder, a Space, the final model of a training script, and offline mode said in one line."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from huggingface_hub import HfApi, get_token
from huggingface_hub.constants import HF_HUB_CACHE, is_offline_mode
from huggingface_hub.errors import HfHubHTTPError

from .folder import check_hub_folder, save_for_hub
from .model_card import HubCard

def hub_token(token: str | bool | None, action: str) -> str:
    """The token to upload with; raises before anything is built or sent when offline (`ConnectionError`: the CLI
    answers it in one line) or without one."""
    if is_offline_mode():
        raise ConnectionError(
            f"{action}: HF_HUB_OFFLINE=1 is set, so nothing can be uploaded. Unset it to push, or write the repo's "
            "folder locally with insub_hf.hub.save_for_hub(...) and upload it later."
        )
    resolved = token if isinstance(token, str) else get_token() if token in (None, True) else None
    if not resolved:
        raise ValueError(
            f"{action}: no Hugging Face token. Pass token=..., set the HF_TOKEN environment variable or run "
            "`hf auth login` (a token with write access); nothing was created or uploaded."
        )
    return resolved


def hub_access(token: str | bool | None, action: str) -> tuple[str, str]:
    """`(token, account)` for a push, checked before any work: the token resolved (`hub_token`), then the Hub asked
    whom it belongs to (`HfApi.whoami`), so that an unreachable Hub or a refused token stops a push before training
    or building rather than after."""
    token = hub_token(token, action)
    api = HfApi(token=token)
    try:
        return token, api.whoami(token=token)["name"]
    except HfHubHTTPError as error:
        status = getattr(error.response, "status_code", None)
        raise ValueError(
            f"{action}: the Hub at {api.endpoint} refused the token (HTTP {status}: {' '.join(str(error).split())}); pass a token with "
            "write access (--hub_token, HF_TOKEN or `hf auth login`). Nothing was trained, built or uploaded."
        ) from None
    except Exception as error:  # the HTTP client's transport errors (their classes vary by huggingface_hub version)
        raise ConnectionError(
            f"{action}: the Hub at {api.endpoint} cannot be reached ({type(error).__name__}: {' '.join(str(error).split())}). Check the "
            "network or HF_ENDPOINT, or leave out --push_to_hub and upload the saved folder later (`hf upload`). "
            "Nothing was trained, built or uploaded."
        ) from None


def push_model_to_hub(
    model,
    repo_id: str,
    card: HubCard | None = None,
    *,
    token: str | bool | None = None,
    private: bool | None = None,
    commit_message: str | None = None,
    commit_description: str | None = None,
    revision: str | None = None,
    create_pr: bool = False,
    max_shard_size: int | str = "50GB",
    api: HfApi | None = None,
):
    """Builds the repo folder in a temporary directory (`save_for_hub` with `card`), then creates the repo (if needed)
    and uploads the folder as one commit. A failure before the commit leaves the repo as it was. Raises before
    building or sending anything when HF_HUB_OFFLINE=1 is set, no token is available (`hub_token`) or the Hub does not
    answer to it (`hub_access`).

    Returns the `CommitInfo` of the upload.
    """
    token, _ = hub_access(token, f"push_to_hub({repo_id!r})")
    with tempfile.TemporaryDirectory() as tmp:
        save_for_hub(model, tmp, repo_id, card, max_shard_size)
        return upload_hub_folder(
            tmp, repo_id, token, private=private, revision=revision, create_pr=create_pr, api=api,
            commit_message=commit_message or f"Upload {type(model).__name__} with insub-hf",
            commit_description=commit_description,
        )


def upload_hub_folder(
    folder: str | Path, repo_id: str, token: str, *, private: bool | None = None, commit_message: str | None = None,
    commit_description: str | None = None, revision: str | None = None, create_pr: bool = False,
    api: HfApi | None = None,
):
    """Checks a built repo folder (`check_hub_folder`), creates the repo if needed and uploads the folder as one
    commit; returns its `CommitInfo`."""
    check_hub_folder(folder)
    api = api or HfApi(token=token)
    repo = api.create_repo(repo_id, private=private, exist_ok=True, token=token)
    return api.upload_folder(
        repo_id=getattr(repo, "repo_id", repo_id), folder_path=str(folder), token=token, revision=revision,
        create_pr=create_pr, commit_message=commit_message or "Upload an InSub model with insub-hf",
        commit_description=commit_description,
    )


def upload_space_folder(folder: str | Path, repo_id: str, token: str, commit_message: str) -> str:
    """Creates the Space `repo_id` if needed (a static one: what an `evaluate` metric lives in) and uploads `folder`
    as one commit; returns the commit URL."""
    api = HfApi(token=token)
    repo = api.create_repo(repo_id, repo_type="space", space_sdk="static", exist_ok=True, token=token)
    return api.upload_folder(repo_id=getattr(repo, "repo_id", repo_id), repo_type="space", folder_path=str(folder),
                             token=token, commit_message=commit_message).commit_url


def offline_load_error(name: str, error: OSError) -> OSError | None:
    """A clearer error for `from_pretrained(name)` failing under HF_HUB_OFFLINE=1 (None when it does not apply)."""
    if not is_offline_mode() or os.path.isdir(name):
        return None
    return OSError(
        f"from_pretrained({name!r}): HF_HUB_OFFLINE=1 is set and {name!r} is neither a local folder nor in the "
        f"Hugging Face cache ({HF_HUB_CACHE}). Download it once with network access (`hf download {name}`), point "
        f"HF_HUB_CACHE at a cache that holds it, or pass a local folder. ({error})"
    )


def final_push_target(training_args) -> tuple[str, str] | None:
    """For training scripts: `(repo_id, token)` when `--push_to_hub` was given, else None. `repo_id` is
    `--hub_model_id` (default: the output folder's name), under the token's account when it names no namespace.

    Checks the token, and that the Hub answers to it, before training starts, and turns the Trainer's own per-checkpoint pushes off: the final model
    goes up once, through `push_to_hub` with its generated card and remote code.
    """
    if not training_args.push_to_hub:
        return None
    repo_id = training_args.hub_model_id or Path(training_args.output_dir).name
    token, account = hub_access(training_args.hub_token, f"--push_to_hub (repo {repo_id!r})")
    training_args.push_to_hub = False
    # the full id, as the Hub will name the repo: the card's snippets must load what they name
    return (repo_id if "/" in repo_id else f"{account}/{repo_id}"), token


def save_final_model(trainer, push: tuple[str, str] | None, training_data: str) -> None:
    """For training scripts, after `trainer.train()`: on the main process, saves `output_dir/model` atomically and,
    with a `final_push_target`, pushes the model with its generated card."""
    from transformers.image_processing_utils import BaseImageProcessor

    from ..checkpointing import save_pretrained_atomic

    if not trainer.is_world_process_zero():
        return
    processor = trainer.processing_class
    save_pretrained_atomic(trainer.model, Path(trainer.args.output_dir) / "model", processor=processor)
    if push is not None:
        repo_id, token = push
        is_image = isinstance(processor, BaseImageProcessor)
        card = HubCard(training_data=training_data, processor=processor if is_image else None,
                       tokenizer=None if is_image else processor)
        trainer.model.push_to_hub(repo_id, card, token=token, private=trainer.args.hub_private_repo)

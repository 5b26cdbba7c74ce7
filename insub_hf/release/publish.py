"""Publishing what `insub-hf release` built, without rebuilding it: `insub-hf release publish` uploads the release
folders in `model_cards/` to the repos their cards name, `insub-hf release metrics` the calibration and OOD metrics as
`evaluate` modules; and what of a release may live in the repository (`fits_the_repository`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..checksums import verify_checksums
from ..model.model_files import card_only_line
from ..hub import check_hub_folder, hub_access, upload_hub_folder, upload_space_folder
from ..validation import CheckedArguments

# What model_cards/ may hold of a release: files git takes without LFS (the Hub's limit outside LFS is 10 MiB)
MAX_FILE_BYTES = 10 * 2**20
MAX_MODEL_BYTES = 15 * 10**6


def fits_the_repository(files: list[Path]) -> bool:
    """Whether a release's files may live in the repository: each at most `MAX_FILE_BYTES`, together at most
    `MAX_MODEL_BYTES`."""
    sizes = [path.stat().st_size for path in files]
    return max(sizes, default=0) <= MAX_FILE_BYTES and sum(sizes) <= MAX_MODEL_BYTES


@dataclass
class PublishArguments(CheckedArguments):
    """`insub-hf release publish`: upload the releases already built in `model_cards/` without rebuilding them."""

    _argument_group_name = 'publish'

    model_cards: str = field(default="model_cards", metadata={"help": "The folder whose release folders (a Hub "
                                                                       "folder each: config, weights, card) go up."})
    hub_token: str | None = field(default=None, metadata={"help": "A token with write access (default: HF_TOKEN or "
                                                                  "the one `hf auth login` saved)."})


def card_repo_id(folder: Path) -> str:
    """The repo a release folder's card loads in its snippets: where the folder goes."""
    found = re.search(r'from_pretrained\("([^"]+)"', (folder / "README.md").read_text(encoding="utf-8"))
    if found is None or "/" not in found[1]:
        raise ValueError(
            f"{folder / 'README.md'} names no repo of the form ORG/NAME ({found[1] if found else 'none'!r}): rebuild "
            "the release with --hub_model_id ORG/NAME, so that its card's snippets load where it goes."
        )
    return found[1]


def publish_releases(args: PublishArguments) -> dict[str, str]:
    """Uploads every built release in `args.model_cards` (a folder holding config.json beside its card) to the repo
    its card names, each as one commit; everything is checked (complete, pickle-free folders; weights against their
    checksums and config; the Hub answering to the token) before the first upload. Returns repo id -> commit URL."""
    cards = Path(args.model_cards)
    folders = sorted(path.parent for path in cards.glob("*/config.json")
                     if card_only_line(path.parent) is None) if cards.is_dir() else []
    if not folders:
        raise ValueError(
            f"PublishArguments.model_cards={args.model_cards!r} holds no built release (a folder with config.json "
            "beside its card); build one with `insub-hf release RECIPE --hub_model_id ORG/NAME`."
        )
    targets: dict[str, list[Path]] = {}
    for folder in folders:
        check_hub_folder(folder)
        verify_checksums(folder)
        check_measured_weights(folder)
        targets.setdefault(card_repo_id(folder), []).append(folder)
    shared = {repo: [f.name for f in found] for repo, found in targets.items() if len(found) > 1}
    if shared:  # e.g. a release and an older copy of it: which one is meant is not for publish to guess
        raise ValueError(
            "insub-hf release publish: several folders of " + f"{args.model_cards!r} go to one repo: "
            + "; ".join(f"{repo} <- {names}" for repo, names in shared.items())
            + ". Keep one folder per repo in it (move the others out) and publish again."
        )
    for card in sorted(cards.glob("*/README.md")):
        if card.parent not in folders:
            print(f"[release] skipped {card.parent}: its card only (the release's weights are over the repository's "
                  "limits); upload its Hub folder from the release's output_dir/hub (`hf upload ORG/NAME "
                  "output_dir/hub`).", flush=True)
    token, _ = hub_access(args.hub_token, "insub-hf release publish")
    pushed = {}
    for repo_id, [folder] in targets.items():
        pushed[repo_id] = str(upload_hub_folder(folder, repo_id, token,
                                                commit_message=f"Upload {folder.name} (insub-hf release)"))
        print(f"[release] {folder} -> {repo_id}: {pushed[repo_id]}", flush=True)
    return pushed


def recorded_fingerprints(value) -> set[str]:
    """Every weights fingerprint a results.json records (under `fingerprints` / `fingerprint`, at any depth)."""
    found = set()
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("fingerprints", "fingerprint"):
                items = item.values() if isinstance(item, dict) else item if isinstance(item, list) else [item]
                found.update(str(v) for v in items if isinstance(v, str))
            else:
                found |= recorded_fingerprints(item)
    elif isinstance(value, list):
        for item in value:
            found |= recorded_fingerprints(item)
    return found


def check_measured_weights(folder: Path) -> None:
    """Refuses a release folder whose weights are not among those its own `evaluation/results.json` measured (a copy
    whose weights were replaced, or numbers of another model): its card would describe another model."""
    import json

    from ..uncertainty.knn import encoder_and_heads_fingerprint
    from ..model.modeling_insub import InSubModel

    results = folder / "evaluation" / "results.json"
    if not results.is_file():
        return  # a folder built without its evaluation (e.g. `insub-hf hub`): nothing recorded to compare
    measured = recorded_fingerprints(json.loads(results.read_text(encoding="utf-8")))
    own = encoder_and_heads_fingerprint(InSubModel.from_pretrained(folder))
    if own not in measured:
        raise ValueError(
            f"insub-hf release publish: {folder} holds weights {own[:12]}, which its evaluation/results.json did not "
            f"measure ({sorted(f[:12] for f in measured)}): its card describes another model. Build the release "
            "again (`insub-hf release RECIPE`)."
        )


@dataclass
class MetricsArguments(CheckedArguments):
    """`insub-hf release metrics`: the calibration and OOD metrics as `evaluate` modules on the Hub."""

    _argument_group_name = 'metrics'

    hub_org: str = field(default=None, metadata={"help": "The Hub user or organisation the metric Spaces go to "
                                                         "(ORG/insub_calibration, ORG/insub_ood)."})
    output_dir: str = field(default="runs/release/metrics", metadata={"help": "Where the Space folders are written."})
    push: bool = field(default=True, metadata={"help": "Upload them (`--push false`: write the folders only)."})
    hub_token: str | None = field(default=None, metadata={"help": "A token with write access (default: HF_TOKEN or "
                                                                  "the one `hf auth login` saved)."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.hub_org or "/" in self.hub_org:
            raise ValueError(f"MetricsArguments.hub_org must name one Hub user or organisation, got {self.hub_org!r}.")


def publish_metrics(args: MetricsArguments) -> dict[str, str]:
    """Writes each metric's Space folder (`evaluation.hub_metrics`) and, with `push`, uploads it after checking the
    token and the Hub; returns repo id -> commit URL (empty without `push`)."""
    from ..evaluation.hub_metrics import write_metric_modules

    token = None
    if args.push:
        token, _ = hub_access(args.hub_token, "insub-hf release metrics")
    folders = write_metric_modules(args.output_dir, args.hub_org)
    pushed = {}
    for repo_id, folder in folders.items():
        if args.push:
            pushed[repo_id] = upload_space_folder(folder, repo_id, token, f"Upload {folder.name} (insub-hf)")
        print(f"[release] {folder}" + (f" -> {repo_id}: {pushed[repo_id]}" if args.push else ""), flush=True)
    return pushed

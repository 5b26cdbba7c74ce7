"""The argument group every job that can push shares (parsed beside the job's own with HfArgumentParser)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..hub import hub_token


@dataclass
class HubArguments:
    """Where a job pushes its model (the names of `TrainingArguments`' Hub fields)."""

    hub_model_id: str | None = field(
        default=None, metadata={"help": "The Hub repo to push the model and its results to.", "aliases": ["--repo_id"]}
    )
    hub_token: str | None = field(
        default=None, metadata={"help": "Hub token (default: HF_TOKEN / `hf auth login`).", "aliases": ["--token"]}
    )
    hub_private_repo: bool | None = field(
        default=None, metadata={"help": "Create the Hub repo as private.", "aliases": ["--private"]}
    )

    def token(self, action: str) -> str:
        """The token to push with; raises before any work when offline or without one."""
        return hub_token(self.hub_token, action)

    def recorded(self) -> dict:
        """What goes into a results.json (which is uploaded with the model): everything but the token."""
        return {k: v for k, v in asdict(self).items() if k != "hub_token"}

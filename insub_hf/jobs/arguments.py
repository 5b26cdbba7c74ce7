"""Argument groups the jobs share: where to push (parsed beside the job's own with HfArgumentParser) and which image
encoder to build."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..configuration_insub import NAMED_ENCODERS, named_encoder
from ..hub import hub_token
from ..validation import check_choice, check_range


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


@dataclass
class ImageEncoderArguments:
    """Which image encoder a job or example builds, by short name (`named_encoder`)."""

    encoder: str = field(
        default="resnet18_cifar",
        metadata={"help": f"One of {NAMED_ENCODERS} (CIFAR-stem ResNets: 3x3 stride-1 stem, no max-pool)."},
    )
    width: float = field(default=0.125, metadata={"help": "Width multiplier of the resnet*_cifar encoders."})

    def __post_init__(self) -> None:
        check_choice("ImageEncoderArguments.encoder", self.encoder, NAMED_ENCODERS)
        check_range("ImageEncoderArguments.width", self.width, low=0.0, low_inclusive=False)

    def encoder_config(self, image_size: int, num_channels: int) -> dict:
        """The encoder config dict for images of this geometry."""
        return named_encoder(self.encoder, image_size, num_channels, self.width)

"""Argument groups the jobs share: where to push (parsed beside the job's own with HfArgumentParser), which image
encoder to build, and the image jobs' SimCLR recipe."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from ..configuration_insub import NAMED_ENCODERS, named_encoder
from ..data.batch_views import BatchTwoViews
from ..hub import hub_token
from ..validation import CheckedArguments, checked

# InSub's setting in the image jobs (compare, demo, mechanism): alpha, lambda and M as `insub-hf ablation` chose them
# on validation data by its rule fixed before the runs (docs/evidence.md; 2026-11-23, full Fashion-MNIST, seed 0).
INSUB_SETTING = {"diversity_alpha": 0.08, "diversity_weight": 0.3, "num_heads": 5}
ENCODER_HELP = f"One of {NAMED_ENCODERS} (CIFAR-stem ResNets: 3x3 stride-1 stem, no max-pool)."
WIDTH_HELP = "Width multiplier of the resnet*_cifar encoders."
OVERWRITE_HELP = (
    "Replace the finished results and models an earlier run left in output_dir (the Trainer's convention); without "
    "it, the job refuses to start there."
)


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

    def __post_init__(self) -> None:
        if self.hub_model_id is not None:
            try:
                validate_repo_id(self.hub_model_id)
            except HFValidationError as error:
                raise ValueError(f"hub_model_id={self.hub_model_id!r} is not a Hub repo id: {error}") from None

    def token(self, action: str) -> str:
        """The token to push with; raises before any work when offline or without one."""
        return hub_token(self.hub_token, action)

    def recorded(self) -> dict:
        """What goes into a results.json (which is uploaded with the model): everything but the token."""
        return {k: v for k, v in asdict(self).items() if k != "hub_token"}


@dataclass
class TrainingSpeedArguments(CheckedArguments):
    """How fast a job trains (every pretraining job's arguments include these). The defaults take the fast path where
    a CUDA GPU is present (`insub_hf.trainer.fast_path_arguments`); docs/benchmarks.md ("Training throughput") measures it."""

    bf16: bool | None = field(
        default=None,
        metadata={"help": "bf16 autocast for training (the losses stay in float32). Default: on where a CUDA GPU "
                          "supports bf16, off on CPU."},
    )
    torch_compile: bool = field(
        default=False,
        metadata={"help": "Train the torch.compile'd model (one graph per step: no graph breaks from the encoders, "
                          "heads or losses, except the genomic encoder's LSTM); compiling takes a minute or two."},
    )
    dataloader_num_workers: int | None = checked(
        None, "Data loader worker processes. Default: min(8, CPU cores - 1) where a GPU is present, 0 on CPU.", low=0,
        integer=True, optional=True,
    )

    def speed_settings(self) -> dict:
        """The `PretrainingSettings` keywords these arguments set."""
        return dict(bf16=self.bf16, torch_compile=self.torch_compile, dataloader_num_workers=self.dataloader_num_workers)


@dataclass
class ImageEncoderArguments(CheckedArguments):
    """Which image encoder a job or example builds, by short name (`named_encoder`)."""

    encoder: str = checked("resnet18_cifar", ENCODER_HELP, choices=NAMED_ENCODERS)
    width: float = checked(0.125, WIDTH_HELP, low=0.0, low_inclusive=False)

    def encoder_config(self, image_size: int, num_channels: int) -> dict:
        """The encoder config dict for images of this geometry."""
        return named_encoder(self.encoder, image_size, num_channels, self.width)


@dataclass
class ImageRecipeArguments(ImageEncoderArguments, TrainingSpeedArguments):
    """The encoder plus the SimCLR recipe settings the image jobs share. The defaults are the CPU protocol, chosen on
    a validation split of Fashion-MNIST's training images (docs/evidence_cosine_variant.md): a CIFAR-stem ResNet-10 at width 0.25
    (128-d features) converges in minutes on 2 cores."""

    encoder: str = checked("resnet10_cifar", ENCODER_HELP, choices=NAMED_ENCODERS)
    width: float = checked(0.25, WIDTH_HELP, low=0.0, low_inclusive=False)
    temperature: float = checked(0.2, "NT-Xent temperature.", low=0.0, low_inclusive=False)
    min_crop_scale: float = checked(
        0.5, "Smallest crop area (share of the image) of the two views' RandomResizedCrop.", low=0.0, high=1.0,
        low_inclusive=False,
    )

    def make_batch_views(self, preset) -> BatchTwoViews:
        """The per-batch two-view maker for images of an `ImageDatasetPreset`."""
        return BatchTwoViews(
            preset.image_size, *preset.normalization(), num_channels=preset.num_channels,
            crop_scale=(self.min_crop_scale, 1.0),
        )

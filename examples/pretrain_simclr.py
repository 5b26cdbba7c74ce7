"""SimCLR pretraining with InSub heads on any image data set `load_dataset` can read.

    # CIFAR-10 from the Hub, the paper's CIFAR ResNet-18, M=5 (use `accelerate launch` for several GPUs). On a GPU
    # the fast path is the default: views made per batch on the GPU, bf16, loader workers; add --torch_compile true
    python examples/pretrain_simclr.py --dataset uoft-cs/cifar10 --encoder resnet18_cifar --width 1 \
        --output_dir runs/cifar10_insub --num_heads 5 --per_device_train_batch_size 256 --num_train_epochs 800 \
        --learning_rate 1e-3

    # a local copy (a folder of parquet files or an `imagefolder` tree) in the same format
    python examples/pretrain_simclr.py --dataset ./my_cifar10 --preset cifar10 --output_dir runs/local
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import HfArgumentParser

from insub_hf import InSubConfig, InSubForPreTraining
from insub_hf.hub import final_push_target, save_final_model
from insub_hf.data import BatchTwoViews, ImageDataArguments, ImageViews, ImageWithLabel, unit_image_transform
from insub_hf.jobs.arguments import ImageEncoderArguments
from insub_hf.recipes import IMAGE
from insub_hf.training.trainer import InSubTrainer, InSubTrainingArguments


@dataclass
class ModelArguments:
    # the image recipe's setting (insub_hf.recipes.IMAGE), chosen on validation data
    num_heads: int = field(default=IMAGE.num_heads, metadata={"help": "M, independent projection heads."})
    diversity_alpha: float = field(default=IMAGE.diversity_alpha, metadata={"help": "alpha of the diversity hinge."})
    diversity_weight: float = field(
        default=IMAGE.diversity_weight, metadata={"help": "lambda; 0 with num_heads=1 is the baseline."}
    )
    timm_model_name: str | None = field(default=None, metadata={"help": "A timm encoder instead of --encoder."})
    batch_views: bool | None = field(
        default=None,
        metadata={"help": "Make the two views per batch on the training device (BatchTwoViews), from images only decoded in "
                          "the loader workers; false: each view per image in the workers (torchvision). Default: "
                          "true where a GPU is present."},
    )


def main() -> None:
    data_args, encoder_args, model_args, training_args = HfArgumentParser(
        (ImageDataArguments, ImageEncoderArguments, ModelArguments, InSubTrainingArguments)
    ).parse_args_into_dataclasses()
    push = final_push_target(training_args)  # checks the token now, pushes once at the end
    train, preset = data_args.load()
    raw, views = train, None
    if torch.cuda.is_available() if model_args.batch_views is None else model_args.batch_views:
        decode = unit_image_transform(preset.image_size, preset.num_channels, preset.image_column)
        train = train.with_transform(ImageWithLabel(decode, preset.image_column, label_column=None))
        views = BatchTwoViews(preset.image_size, *preset.normalization(), num_channels=preset.num_channels)
    else:
        train = train.with_transform(ImageViews(preset.augmentation(), preset.image_column))

    encoder = None
    if model_args.timm_model_name is None:
        encoder = encoder_args.encoder_config(preset.image_size, preset.num_channels)
    timm_kwargs = {"in_chans": preset.num_channels} if encoder is None else None
    config = InSubConfig.for_images(
        encoder_config=encoder, timm_model_name=model_args.timm_model_name, timm_kwargs=timm_kwargs,
        num_heads=model_args.num_heads, diversity_alpha=model_args.diversity_alpha,
        diversity_weight=model_args.diversity_weight,
    )
    trainer = InSubTrainer(  # the image processor is saved with every checkpoint (AutoImageProcessor, pipeline())
        model=InSubForPreTraining(config), args=training_args, train_dataset=train, batch_views=views,
        processing_class=preset.image_processor(),
    )
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    # the saved model's calibrated `uncertainty` (docs/usage.md): a bank of training images, half of them ranked against
    images = raw.select(range(min(len(raw), 5000)))[preset.image_column]
    trainer.model.fit_uncertainty(list(images), processor=preset.image_processor())
    save_final_model(
        trainer, push, f"{data_args.dataset} ({data_args.split} split, {len(train)} images), SimCLR augmentations."
    )


if __name__ == "__main__":
    main()

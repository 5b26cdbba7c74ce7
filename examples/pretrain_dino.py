"""DINO pretraining with InSub heads (EMA teacher, multi-crop) on an ImageNet-style folder or any image data set.

    # ImageNet folder (train/<class>/*.JPEG), ViT-S/16, 2 x 224 + 10 x 96 crops, the paper's alpha 0.15, lambda 2, M 5
    accelerate launch examples/pretrain_dino.py --dataset imagefolder --data_dir /data/imagenet/train \
        --preset imagenet --encoder vit_small_16 --num_local_crops 10 --dino_out_dim 65536 \
        --per_device_train_batch_size 64 --num_train_epochs 100 --learning_rate 5e-4 --output_dir runs/dino_in1k

    # start from DINO weights saved in transformers format (e.g. a local copy of facebook/dino-vits16)
    python examples/pretrain_dino.py --dataset imagefolder --data_dir ./imgs --preset imagenet \
        --encoder_name_or_path ./dino-vits16 --output_dir runs/dino_ft

    # CIFAR-10 from the Hub with a ViT-tiny/32px (2 x 32 + 6 x 16 crops), or a timm ViT
    python examples/pretrain_dino.py --dataset uoft-cs/cifar10 --encoder vit_tiny_32 --output_dir runs/dino_c10
    python examples/pretrain_dino.py --dataset uoft-cs/cifar10 --encoder timm:vit_tiny_patch16_224 --output_dir r
"""

from __future__ import annotations

from dataclasses import dataclass, field

from transformers import HfArgumentParser

from insub_hf import InSubConfig, InSubForPreTraining
from insub_hf.hub import final_push_target, save_final_model
from insub_hf.encoders.presets import named_encoder
from insub_hf.data import ImageDataArguments, MultiCropViews
from insub_hf.encoders import encoder_config_from_pretrained, load_encoder_weights
from insub_hf.recipes import IMAGE
from insub_hf.training.trainer import InSubTrainer, InSubTrainingArguments


@dataclass
class CropArguments:
    num_local_crops: int = field(default=6, metadata={"help": "N local crops per image (DINO ViT-S: 10)."})
    local_crop_size: int | None = field(default=None, metadata={"help": "Default 96/224 of the image size."})


@dataclass
class ModelArguments:
    encoder: str = field(
        default="vit_tiny_32",
        metadata={"help": "A short name (vit_small_16, vit_tiny_32, resnet18_cifar, ...: NAMED_ENCODERS) or timm:<name>."},
    )
    width: float = field(default=1.0, metadata={"help": "Width multiplier of the resnet*_cifar encoders."})
    encoder_name_or_path: str | None = field(
        default=None, metadata={"help": "Start from these transformers-format weights (e.g. a dino-vits16 copy)."}
    )
    # M, alpha and lambda: the image recipe (insub_hf.recipes.IMAGE); the heads: DINO's (2048 -> 256, no BatchNorm)
    num_heads: int = field(default=IMAGE.num_heads, metadata={"help": "M."})
    diversity_alpha: float = field(default=IMAGE.diversity_alpha, metadata={"help": "alpha (paper, ImageNet: 0.15)."})
    diversity_weight: float = field(default=IMAGE.diversity_weight, metadata={"help": "lambda (paper, ImageNet: 2)."})
    head_hidden_size: int = field(default=2048, metadata={"help": "Hidden width of each head."})
    head_output_size: int = field(default=256, metadata={"help": "Bottleneck before the weight-normalised layer."})
    dino_out_dim: int = field(default=65536, metadata={"help": "K, DINO's output dimension."})


def build_config(model_args: ModelArguments, image_size: int, num_channels: int) -> InSubConfig:
    encoder, timm_name, timm_kwargs = None, None, None
    if model_args.encoder_name_or_path:
        encoder = encoder_config_from_pretrained(model_args.encoder_name_or_path)
    elif model_args.encoder.startswith("timm:"):
        timm_name = model_args.encoder.removeprefix("timm:")
        timm_kwargs = {"img_size": image_size, "in_chans": num_channels}
    else:
        encoder = named_encoder(model_args.encoder, image_size, num_channels, model_args.width)
    return InSubConfig.for_images(
        encoder_config=encoder, timm_model_name=timm_name, timm_kwargs=timm_kwargs, objective="dino",
        num_heads=model_args.num_heads, head_hidden_sizes=[model_args.head_hidden_size],
        head_output_size=model_args.head_output_size, head_norm="none",
        objective_config={"out_dim": model_args.dino_out_dim},
        diversity_alpha=model_args.diversity_alpha, diversity_weight=model_args.diversity_weight,
    )


def main() -> None:
    data_args, crops, model_args, training_args = HfArgumentParser(
        (ImageDataArguments, CropArguments, ModelArguments, InSubTrainingArguments)
    ).parse_args_into_dataclasses()
    push = final_push_target(training_args)  # checks the token now, pushes once at the end
    train, preset = data_args.load()
    views = MultiCropViews(preset.multicrop(crops.local_crop_size), crops.num_local_crops, preset.image_column)
    train = train.with_transform(views)

    model = InSubForPreTraining(build_config(model_args, preset.image_size, preset.num_channels))
    if model_args.encoder_name_or_path:
        load_encoder_weights(model, model_args.encoder_name_or_path)  # student and teacher
    trainer = InSubTrainer(  # the image processor is saved with every checkpoint (AutoImageProcessor, pipeline())
        model=model, args=training_args, train_dataset=train, processing_class=preset.image_processor()
    )
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    save_final_model(
        trainer, push, f"{data_args.dataset} ({data_args.split} split, {len(train)} images), DINO multi-crop."
    )


if __name__ == "__main__":
    main()

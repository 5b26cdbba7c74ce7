"""InSubForImageClassification (Finetune-InSub): M classifier heads whose mean probability is the prediction and whose
disagreement is returned per sample; loads from a pretraining checkpoint, trains with the stock Trainer, serves
pipeline("image-classification") in a fresh process."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from transformers import AutoModelForImageClassification, Trainer, TrainingArguments

from insub_hf import InSubConfig, InSubForImageClassification, InSubForPreTraining
from insub_hf.checkpointing import save_pretrained_atomic
from insub_hf.encoders.presets import named_encoder
from insub_hf.data import IMAGE_DATASET_PRESETS, load_fashion_mnist
from insub_hf.evaluation.metrics import mutual_information, predictive_entropy
from insub_hf.hub.model_card import model_card

PRESET = IMAGE_DATASET_PRESETS["fashion_mnist"]
NAMES = ["t-shirt", "trouser", "pullover"]


def grey_config(**overrides) -> InSubConfig:
    kwargs = dict(encoder_config=named_encoder("resnet18_cifar", 28, 1, 0.0625), num_heads=3, head_hidden_sizes=[16],
                  head_output_size=8)
    return InSubConfig(**{**kwargs, **overrides})


@pytest.fixture
def pretrained(tmp_path):
    """An InSub pretraining checkpoint with its image processor."""
    save_pretrained_atomic(InSubForPreTraining(grey_config()), tmp_path / "pretrained", processor=PRESET.image_processor())
    return tmp_path / "pretrained"


def load_classifier(path) -> InSubForImageClassification:
    return AutoModelForImageClassification.from_pretrained(
        path, num_labels=3, id2label=dict(enumerate(NAMES)), label2id={n: i for i, n in enumerate(NAMES)}
    )


@pytest.mark.numeric
def test_outputs_are_the_heads_mean_probability_and_their_mutual_information():
    model = InSubForImageClassification(grey_config(num_labels=3)).eval()
    x, labels = torch.randn(5, 1, 28, 28), torch.tensor([0, 1, 2, 1, 0])
    out = model(pixel_values=x, labels=labels)
    probs = out.head_logits.softmax(-1)  # (B, M, C)
    assert out.head_logits.shape == (5, 3, 3)
    torch.testing.assert_close(out.logits.softmax(-1), probs.mean(1))
    torch.testing.assert_close(out.mutual_information, mutual_information(probs).float(), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out.entropy, predictive_entropy(probs.mean(1)).float(), atol=1e-6, rtol=1e-5)
    per_head = torch.stack([F.cross_entropy(out.head_logits[:, m], labels) for m in range(3)]).mean()
    torch.testing.assert_close(out.loss, per_head)


def test_identical_heads_have_zero_mutual_information():
    model = InSubForImageClassification(grey_config(num_labels=3)).eval()
    with torch.no_grad():
        for weight in (model.classifier.weights[0], model.classifier.biases[0]):
            weight.copy_(weight[..., :1, :].expand_as(weight) if weight.dim() == 3 else weight[:1].expand_as(weight))
        out = model(pixel_values=torch.randn(4, 1, 28, 28))
    torch.testing.assert_close(out.mutual_information, torch.zeros(4), atol=1e-6, rtol=0)


def test_one_head_serves_no_mutual_information_and_its_card_reads_the_entropy():
    # with one head, entropy of the mean minus the mean entropy is 0 for every input: "certain", whatever it is
    model = InSubForImageClassification(grey_config(num_labels=3, num_heads=1)).eval()
    with torch.no_grad():
        out = model(pixel_values=torch.randn(4, 1, 28, 28))
    assert out.mutual_information is None and out.variance is None
    torch.testing.assert_close(out.entropy, predictive_entropy(out.logits.softmax(-1)).float(), atol=1e-6, rtol=1e-5)
    regression = InSubForImageClassification(grey_config(num_labels=2, num_heads=1, problem_type="regression")).eval()
    with torch.no_grad():
        assert regression(pixel_values=torch.randn(2, 1, 28, 28)).variance is None
    snippet = str(model_card(model, "me/one-head"))
    assert "out.entropy" in snippet and "out.mutual_information" not in snippet
    assert "out.mutual_information" in str(model_card(InSubForImageClassification(grey_config(num_labels=3)), "me/m3"))


def test_loading_a_pretraining_checkpoint_keeps_its_encoder_and_starts_independent_heads(pretrained):
    source = InSubForPreTraining.from_pretrained(pretrained)
    model = load_classifier(pretrained)
    for name, value in source.insub.encoder.state_dict().items():
        torch.testing.assert_close(model.insub.encoder.state_dict()[name], value, rtol=0, atol=0)
    weights = model.classifier.weights[0]  # (d, M, C), each head like nn.Linear: U(-1/sqrt(d), 1/sqrt(d))
    bound = 1 / weights.shape[0] ** 0.5
    assert torch.isfinite(weights).all() and weights.abs().max() <= bound and weights.std() > bound / 4
    assert not torch.equal(weights[:, 0], weights[:, 1])
    assert model.config.id2label == dict(enumerate(NAMES))


def test_an_image_classifier_needs_an_image_encoder():
    bert = dict(model_type="bert", vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                intermediate_size=32, max_position_embeddings=16)
    with pytest.raises(ValueError, match="InSubForImageClassification needs an image encoder .* reads input_ids"):
        InSubForImageClassification(InSubConfig(encoder_config=bert, pooling="mean"))


def test_freeze_encoder_trains_the_heads_only(pretrained):
    model = load_classifier(pretrained)
    model.freeze_encoder()
    model.train()
    encoder = {k: v.clone() for k, v in model.insub.encoder.state_dict().items()}
    heads = model.classifier.weights[0].detach().clone()
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    model(pixel_values=torch.randn(8, 1, 28, 28), labels=torch.arange(8) % 3).loss.backward()
    optimizer.step()
    assert not torch.equal(model.classifier.weights[0], heads)
    for name, value in model.insub.encoder.state_dict().items():  # weights and BatchNorm statistics
        torch.testing.assert_close(value, encoder[name], rtol=0, atol=0)


@pytest.mark.slow
def test_stock_trainer_fine_tunes_and_the_pipeline_serves_it_in_a_fresh_process(pretrained, tmp_path):
    data = load_fashion_mnist("bundled", train_per_class=8, test_per_class=2, seed=0)
    data = data.filter(lambda row: row["label"] < 3)
    processor = PRESET.image_processor()

    def transform(batch):
        return {"pixel_values": processor(batch["image"], return_tensors="pt").pixel_values, "labels": batch["label"]}

    model = load_classifier(pretrained)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    args = TrainingArguments(output_dir=str(tmp_path / "run"), max_steps=2, per_device_train_batch_size=8,
                             learning_rate=1e-2, report_to=[], remove_unused_columns=False, save_strategy="no",
                             use_cpu=True)
    trainer = Trainer(model=model, args=args, train_dataset=data["train"].with_transform(transform),
                      processing_class=processor)
    trainer.train()
    changed = {k for k, v in model.named_parameters() if not torch.equal(v, before[k])}
    assert any(k.startswith("classifier.") for k in changed) and any(k.startswith("insub.encoder.") for k in changed)
    trainer.save_model(str(tmp_path / "finetuned"))
    image = data["test"][0]["image"]
    image.save(tmp_path / "image.png")
    wide = (np.asarray(image, dtype=np.uint16) * 257).astype(np.uint16)  # the same image at 16 bits
    Image.fromarray(wide).save(tmp_path / "image16.png")
    # the folder names its own pipeline (it reads 16-bit images by their bit depth): run with trust_remote_code
    code = f"""
import json, insub_hf
from transformers import pipeline
classify = pipeline("image-classification", model={str(tmp_path / "finetuned")!r}, trust_remote_code=True)
print(json.dumps([classify({str(tmp_path / "image.png")!r}, top_k=3), classify({str(tmp_path / "image16.png")!r}, top_k=3)]))
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    predicted, predicted16 = json.loads(run.stdout.strip().splitlines()[-1])
    model.eval()
    with torch.no_grad():
        probs = model(pixel_values=processor([image], return_tensors="pt").pixel_values).logits.softmax(-1)[0]
    assert [p["label"] for p in predicted] == [NAMES[i] for i in probs.argsort(descending=True).tolist()]
    torch.testing.assert_close(torch.tensor([p["score"] for p in predicted]), probs.sort(descending=True).values,
                               rtol=1e-4, atol=1e-6)
    # x * 257 / 65535 = x / 255: the 16-bit file is the same image, so the same scores (8-bit conversion would clip it)
    assert [p["label"] for p in predicted16] == [p["label"] for p in predicted]
    torch.testing.assert_close(torch.tensor([p["score"] for p in predicted16]),
                               torch.tensor([p["score"] for p in predicted]), rtol=1e-4, atol=1e-6)


def test_the_problem_type_the_first_training_step_decided_is_kept(pretrained, tmp_path):
    # float targets: multi-label, recorded at the first step, so the saved model is read multi-label without labels
    # (one sigmoid per label, as transformers' own classifiers record and read it)
    images = torch.rand(4, 1, 28, 28)
    model = load_classifier(pretrained)
    assert model.config.problem_type is None
    targets = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    model(pixel_values=images, labels=targets).loss.backward()
    assert model.config.problem_type == "multi_label_classification"
    model.save_pretrained(tmp_path / "multi")
    loaded = AutoModelForImageClassification.from_pretrained(tmp_path / "multi").eval()
    with torch.no_grad():
        heads = loaded(pixel_values=images).head_logits  # (B, M, C)
        logits = loaded(pixel_values=images).logits
    # the heads' mean probability, per label (sigmoid), not a softmax over the labels
    torch.testing.assert_close(torch.sigmoid(logits), torch.sigmoid(heads).mean(dim=1), atol=1e-5, rtol=1e-5)
    # a regressor (one label): recorded as regression, so the stock pipeline reports the prediction itself
    regressor = AutoModelForImageClassification.from_pretrained(pretrained, num_labels=1)
    regressor(pixel_values=images, labels=torch.rand(4)).loss.backward()
    assert regressor.config.problem_type == "regression"
    save_pretrained_atomic(regressor, tmp_path / "regressor", processor=PRESET.image_processor())
    image = load_fashion_mnist("bundled", train_per_class=1, test_per_class=1)["test"][0]["image"]
    image.save(tmp_path / "image.png")
    code = f"""
import json, insub_hf
from transformers import pipeline
regress = pipeline("image-classification", model={str(tmp_path / "regressor")!r}, trust_remote_code=True)
print(json.dumps(regress({str(tmp_path / "image.png")!r})))
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    [served] = json.loads(run.stdout.strip().splitlines()[-1])
    regressor.eval()
    with torch.no_grad():
        prediction = regressor(pixel_values=PRESET.image_processor()([image], return_tensors="pt").pixel_values).logits
    assert served["score"] == pytest.approx(float(prediction[0, 0]), abs=1e-5)

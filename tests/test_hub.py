"""The Hub: the repo folder is built and checked for real, the card carries the harness's numbers, the remote code
loads in a fresh process without insub-hf, and uploads go over HTTP to a Hub on 127.0.0.1 (`tests/hub_server.py`)
through the real client; `tests/test_hub_http.py` downloads them again by repo id."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from huggingface_hub import HfApi, ModelCard
from PIL import Image

from insub_hf import (
    InSubConfig,
    InSubForImageClassification,
    InSubForPreTraining,
    InSubForSequenceClassification,
    InSubImageProcessor,
    InSubModel,
    named_encoder,
)
from insub_hf_cli import main
from insub_hf.evaluation.results import MethodResults, Metrics
from insub_hf.hub import check_hub_folder, save_for_hub
from insub_hf.hub.model_card import HubCard, harness_eval_results, senteval_eval_results

from .conftest import cli_error, compare_argv, tiny_config
from .hub_server import LocalHub

GENOMIC = dict(model_type="insub_genomic", conv_filters=8, kernel_size=12, stride=6, lstm_hidden_size=16)


class LocalHubApi(HfApi):
    """The real `huggingface_hub` client, pointed at a Hub on 127.0.0.1 (`tests/hub_server.py`): records the calls
    and keeps a copy of each uploaded folder (the package uploads a temporary directory), checked against what the
    server stored."""

    calls: list[tuple[str, dict]] = []
    snapshot: Path | None = None
    hub: LocalHub | None = None

    def __init__(self, token=None):
        self.calls.append(("init", {"token": token}))
        super().__init__(endpoint=self.hub.endpoint, token=token)

    def whoami(self, **kwargs):
        self.calls.append(("whoami", kwargs))
        return super().whoami(**kwargs)

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", {"repo_id": repo_id, **kwargs}))
        return super().create_repo(repo_id, **kwargs)

    def upload_folder(self, **kwargs):
        self.calls.append(("upload_folder", kwargs))
        commit = super().upload_folder(**kwargs)
        shutil.copytree(kwargs["folder_path"], self.snapshot)
        _, stored = self.hub.repos[kwargs["repo_id"]]
        for path in self.snapshot.rglob("*"):  # what went over HTTP is what the folder held
            if path.is_file():
                assert stored[str(path.relative_to(self.snapshot))] == path.read_bytes(), path
        return commit


@pytest.fixture
def fake_api(monkeypatch, tmp_path):
    with LocalHub() as hub:
        LocalHubApi.calls, LocalHubApi.snapshot, LocalHubApi.hub = [], tmp_path / "uploaded", hub
        monkeypatch.setattr("insub_hf.hub.upload.HfApi", LocalHubApi)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        yield LocalHubApi


def card_metrics(readme: Path) -> dict[str, float]:
    meta = yaml.safe_load(readme.read_text().split("---")[1])
    (entry,) = meta["model-index"]
    return {m["name"]: m["value"] for result in entry["results"] for m in result["metrics"]}


def test_compare_pushes_the_insub_model_with_its_measured_numbers(tmp_path, fake_api, capsys):
    out = tmp_path / "compare"
    argv = compare_argv(
        out, train_per_class=8, test_per_class=4, ood_images=20, methods="insub", probe_epochs=2, label_fractions=0.5,
        corruptions="contrast", corruption_images=4, push_to_hub=True, hub_model_id="someone/insub-fmnist", hub_token="hf_test",
    )
    assert main(argv) == 0
    # the Hub is asked first, before any training, and again before building the upload, which comes once, at the end
    names = [name for name, _ in fake_api.calls]
    assert names == ["init", "whoami", "init", "whoami", "init", "create_repo", "upload_folder"], names
    (_, init), (_, create), (_, upload) = (fake_api.calls[i] for i in (0, 5, 6))
    assert init == {"token": "hf_test"}
    assert create == {"repo_id": "someone/insub-fmnist", "private": None, "exist_ok": True, "token": "hf_test"}
    assert upload["repo_id"] == "someone/insub-fmnist" and upload["commit_message"].startswith("InSub (M=2)")
    folder = fake_api.snapshot
    files = check_hub_folder(folder)
    assert {"evaluation/results.md", "evaluation/results.json", "model.safetensors", "modeling_insub.py"} <= set(files)
    for path in folder.rglob("*"):  # the token never travels with the results
        assert not path.is_file() or b"hf_test" not in path.read_bytes(), path
    (row,) = json.loads((out / "results.json").read_text())["rows"]
    measured = card_metrics(folder / "README.md")
    # the card gives each value to 4 decimals (0.01 points of a percentage)
    assert measured["Accuracy"] == round(row["test"]["accuracy"], 4)
    assert measured["ECE"] == round(row["test"]["ece"], 4)
    assert measured["NLL"] == round(row["test"]["nll"], 4)
    assert measured["OOD AUROC vs mnist (MSP)"] == round(row["ood"]["mnist"]["msp"], 4)
    card = (folder / "README.md").read_text()
    split = "test (40 images)"  # the split says what was measured: 4 test images per class
    # each value with its unit, as the model-index holds it (rounded once)
    assert f"| fashion_mnist | {split} | ECE | {100 * round(row['test']['ece'], 4):.2f} % |" in card
    assert f"| fashion_mnist | {split} | NLL | {round(row['test']['nll'], 4):.4f} |" in card
    assert f"| fashion_mnist | {split} | Brier | {round(row['test']['brier'], 4):.4f} |" in card
    # where the data came from and how the model was trained, as the run recorded them
    assert "80 training images of fashion_mnist: the bundled Fashion-MNIST subset" in card
    assert "- per_device_train_batch_size: 20" in card and "- lr_scheduler_type: cosine" in card
    assert measured["OOD AUROC vs mnist (k-NN, label-free)"] == round(row["ood"]["mnist"]["knn"], 4)
    meta = yaml.safe_load(card.split("---")[1])
    assert meta["license"] == "apache-2.0" and "base_model" not in meta
    assert meta["datasets"] == ["zalando-datasets/fashion_mnist"]
    # the image processor travels with the model, and the usage snippet reads images through it
    assert "preprocessor_config.json" in files and "image_processing_insub.py" in files
    assert 'AutoImageProcessor.from_pretrained("someone/insub-fmnist", trust_remote_code=True)' in card
    assert not (folder / "objectives_dino.py").exists()  # the remote code of the model's own objective only
    alpha = json.loads((out / "results.json").read_text())["args"]["diversity_alpha"]
    from insub_hf.jobs.compare import ComparisonArguments

    assert alpha == ComparisonArguments().diversity_alpha  # compare's default
    assert "**M = 2**" in card and f"alpha = {alpha}" in card and "SimCLR" in card
    assert "the authors' objective: dot product of the raw mean" in card and "averaged over the two views" in card
    assert "@inproceedings{vahidi2024insub" in card
    # the uploaded weights are the cached run's weights
    cached = InSubForPreTraining.from_pretrained(next((out / "cache").iterdir()) / "model")
    uploaded = InSubForPreTraining.from_pretrained(folder)
    for key, value in cached.state_dict().items():
        torch.testing.assert_close(uploaded.state_dict()[key], value, msg=key)

    # the same card from the saved checkpoint and results.json, built locally by `insub-hf hub`
    model_dir = next((out / "cache").iterdir()) / "model"
    local = tmp_path / "card_folder"
    hub_argv = ["hub", "--model_dir", str(model_dir), "--repo_id", "someone/insub-fmnist", "--results",
                str(out / "results.json"), "--folder", str(local)]
    assert re.search(r"row='InSub \(M=9\)' is not a row.*allowed: \['InSub \(M=2\)'\]",
                     cli_error([*hub_argv, "--row", "InSub (M=9)"], capsys))
    assert not local.exists()
    assert main([*hub_argv, "--row", "InSub (M=2)"]) == 0
    assert card_metrics(local / "README.md") == measured
    assert json.loads((local / "config.json").read_text())["architectures"] == ["InSubForPreTraining"]
    assert "card_folder' exists" in cli_error([*hub_argv, "--row", "InSub (M=2)"], capsys)


def test_push_to_hub_of_every_model_class_sends_one_checked_folder(tmp_path, fake_api):
    for i, model in enumerate([
        InSubModel(tiny_config()), InSubForPreTraining(tiny_config(objective="dino")),
        InSubForSequenceClassification(tiny_config(num_labels=3)),
    ]):
        fake_api.snapshot = tmp_path / f"uploaded{i}"
        model.push_to_hub(f"someone/m{i}", HubCard(tags=["demo"]), token="hf_test", private=True)
        files = check_hub_folder(fake_api.snapshot)
        assert not any(f.endswith((".bin", ".pt", ".pkl")) for f in files)
        card = ModelCard.load(fake_api.snapshot / "README.md")
        assert "demo" in card.data.tags and "No evaluation results" in card.text
        reloaded = type(model).from_pretrained(fake_api.snapshot)
        for key, value in model.state_dict().items():
            torch.testing.assert_close(reloaded.state_dict()[key], value, msg=key)
    assert [c for c, _ in fake_api.calls].count("upload_folder") == 3
    # save_pretrained(push_to_hub=True) goes the same way
    fake_api.snapshot = tmp_path / "uploaded_save"
    InSubModel(tiny_config()).save_pretrained(tmp_path / "local", push_to_hub=True, repo_id="someone/s", token="hf_t")
    assert fake_api.calls[-1][1]["repo_id"] == "someone/s" and (tmp_path / "local" / "modeling_insub.py").exists()


def test_pushing_without_a_token_creates_and_uploads_nothing(tmp_path, fake_api, monkeypatch, capsys):
    monkeypatch.setattr("insub_hf.hub.upload.get_token", lambda: None)
    with pytest.raises(ValueError, match="no Hugging Face token.*HF_TOKEN.*nothing was created or uploaded"):
        InSubModel(tiny_config()).push_to_hub("someone/x")
    assert "no Hugging Face token" in cli_error(["compare", "--output_dir", str(tmp_path / "c"), "--methods", "insub",
                                                 "--push_to_hub", "--hub_model_id", "someone/x"], capsys)
    assert fake_api.calls == [] and not (tmp_path / "c").exists()


def test_the_card_of_text_results_and_a_bad_folder(tmp_path):
    per_task = {"TWEETS": {"accuracy": 0.6567, "ece": 0.0416, "nll": 0.40114000000000005}, "STSB": {"spearman": 0.71}}
    results = senteval_eval_results(per_task)
    assert [(r.dataset_name, r.metric_type, r.metric_value) for r in results] == [
        ("SentEval TWEETS", "accuracy", 0.6567), ("SentEval TWEETS", "ece", 0.0416), ("SentEval TWEETS", "nll", 0.4011),
        ("SentEval STSB", "spearmanr", 0.71),
    ]
    numbers = MethodResults(members=1, test=Metrics(accuracy=0.5, nll=1.5, ece=0.25, tace=0.2, brier=0.6),
                            ood={"svhn": {"msp": 0.9, "knn": 0.70004999}})
    folder = tmp_path / "repo"
    save_for_hub(InSubModel(tiny_config()), folder, "someone/r",
                 HubCard(eval_results=harness_eval_results(numbers, "CIFAR-10", "cifar10")))
    assert card_metrics(folder / "README.md") == {
        "Accuracy": 0.5, "ECE": 0.25, "TACE": 0.2, "NLL": 1.5, "Brier": 0.6, "OOD AUROC vs svhn (MSP)": 0.9,
        "OOD AUROC vs svhn (k-NN, label-free)": 0.7,
    }
    assert "0.70004999" not in (folder / "README.md").read_text()
    torch.save({}, folder / "optimizer.pt")
    (folder / "README.md").unlink()
    with pytest.raises(ValueError, match=r"pickle-based files.*optimizer\.pt.*README\.md is missing"):
        check_hub_folder(folder)


REMOTE_CHECK = """
import sys
sys.modules["insub_hf"] = None  # as if insub-hf were not installed
import torch
from transformers import AutoImageProcessor, AutoModel, AutoModelForImageClassification, AutoModelForSequenceClassification
AUTO = {"classifier": AutoModelForSequenceClassification, "image_classifier": AutoModelForImageClassification}
for name in ("vit", "resnet", "genomic", "text", "classifier", "dino", "image_classifier", "batch_ensemble"):
    model = AUTO.get(name, AutoModel).from_pretrained(name, trust_remote_code=True).eval()
    assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
    inputs = torch.load(f"x_{name}.pt")
    if name == "image_classifier":
        processor = AutoImageProcessor.from_pretrained(name, trust_remote_code=True)
        assert type(processor).__module__.startswith("transformers_modules."), type(processor).__module__
        inputs = processor(inputs["pixel_values"], return_tensors="pt")
    with torch.no_grad():
        out = model(**inputs)
    got = out.logits if "classifier" in name else out.mean_embedding
    torch.testing.assert_close(got, torch.load(f"y_{name}.pt"), rtol=0, atol=1e-6)
from transformers import pipeline
# the folder's own pipeline: a 16-bit PNG read by its bit depth, without insub-hf
classify = pipeline("image-classification", model="image_classifier", trust_remote_code=True)
assert type(classify).__module__.startswith("transformers_modules."), type(classify).__module__
scores = {row["label"]: row["score"] for row in classify("grey16.png", top_k=3)}
for label, probability in torch.load("y_grey16.pt").items():
    assert abs(scores[label] - probability) < 1e-5, (label, scores[label], probability)
assert not any(m == "insub_hf" or m.startswith("insub_hf.") for m in sys.modules if sys.modules[m] is not None)
print("remote code OK")
"""

PIL_ONLY_CHECK = """
import sys
sys.modules["insub_hf"] = sys.modules["torchvision"] = None  # neither insub-hf nor torchvision installed
import torch
from transformers import AutoImageProcessor
processor = AutoImageProcessor.from_pretrained("image_classifier", trust_remote_code=True)
assert type(processor).__name__ == "InSubImageProcessorPil", type(processor)
assert type(processor).__module__.startswith("transformers_modules."), type(processor).__module__
for name in ("resized", "same_size"):
    pixels, expected = torch.load(f"pixels_{name}.pt")
    got = processor(pixels, return_tensors="pt")["pixel_values"]
    # PIL resizes the 8-bit image: within about one grey level (1/255 / std 0.2) of torchvision; equal without a resize
    torch.testing.assert_close(got, expected, rtol=0, atol=0.03 if name == "resized" else 1e-6)
assert "torchvision" not in {m.split(".")[0] for m in sys.modules if sys.modules[m] is not None}
print("PIL processor OK")
"""


def test_remote_code_round_trip_in_a_fresh_process_without_the_package(tmp_path):
    from .objectives.test_scd import tiny_bert_config

    torch.manual_seed(0)
    image = {"pixel_values": torch.randn(2, 3, 32, 32)}
    models = {
        "vit": (InSubForPreTraining(tiny_config()), image),
        "resnet": (InSubModel(InSubConfig(encoder_config=named_encoder("resnet18_cifar", width=0.0625), num_heads=2,
                                          head_hidden_sizes=[8], head_output_size=4)), image),
        "genomic": (InSubModel(InSubConfig(encoder_config=GENOMIC, num_heads=2, head_hidden_sizes=[8],
                                           head_output_size=4, objective="genomenet")),
                    {"dna_one_hot": torch.eye(4)[torch.randint(0, 4, (2, 60))]}),
        "text": (InSubModel(tiny_bert_config()),
                 {"input_ids": torch.randint(0, 30522, (2, 9)), "attention_mask": torch.ones(2, 9, dtype=torch.long)}),
        "classifier": (InSubForSequenceClassification(tiny_bert_config(num_labels=3)),
                       {"input_ids": torch.randint(0, 30522, (2, 9)), "attention_mask": torch.ones(2, 9, dtype=torch.long)}),
        "dino": (InSubForPreTraining(tiny_config(objective="dino", head_norm="none")), image),
        "image_classifier": (InSubForImageClassification(tiny_config(num_labels=3)),
                             {"pixel_values": torch.randint(0, 256, (2, 3, 40, 40), dtype=torch.uint8)}),
        "batch_ensemble": (InSubModel(tiny_config(batch_ensemble_size=2)), image),
    }
    processor = InSubImageProcessor.for_images(32, 3, (0.5, 0.4, 0.3), (0.2, 0.2, 0.2))
    for name, (model, inputs) in models.items():
        if name == "image_classifier":
            processor.save_pretrained(tmp_path / name)
        model.eval().save_pretrained(tmp_path / name, remote_code=True)
        with torch.no_grad():
            if name == "image_classifier":
                y = model(**processor(inputs["pixel_values"], return_tensors="pt")).logits
            elif name == "classifier":
                y = model(**inputs).logits
            else:
                y = (model.insub if name in ("vit", "dino") else model)(**inputs).mean_embedding
        torch.save(inputs, tmp_path / f"x_{name}.pt")
        torch.save(y, tmp_path / f"y_{name}.pt")
    wide = (np.arange(40 * 40).reshape(40, 40) * 40).astype(np.uint16)  # 0 .. 63,960: most of it above 255
    Image.fromarray(wide).save(tmp_path / "grey16.png")
    classifier = models["image_classifier"][0]
    with torch.no_grad():
        probabilities = classifier(**processor(Image.open(tmp_path / "grey16.png"), return_tensors="pt")).logits.softmax(-1)
    torch.save({classifier.config.id2label[i]: float(p) for i, p in enumerate(probabilities[0])},
               tmp_path / "y_grey16.pt")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"))
    result = subprocess.run([sys.executable, "-c", REMOTE_CHECK], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0 and "remote code OK" in result.stdout, result.stderr[-3000:]
    for name, pixels in (("resized", models["image_classifier"][1]["pixel_values"]),
                         ("same_size", torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8))):
        torch.save((pixels, processor(pixels, return_tensors="pt")["pixel_values"]), tmp_path / f"pixels_{name}.pt")
    result = subprocess.run([sys.executable, "-c", PIL_ONLY_CHECK], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0 and "PIL processor OK" in result.stdout, result.stderr[-3000:]
    # each folder holds two bundles (four with the image processor), with its own objective and encoder family only
    files = {name: {p.name for p in (tmp_path / name).glob("*.py")} for name in models}
    # (and its pipelines, `pipeline_insub.py`: an image model's, and those that refuse another modality's task)
    assert files["resnet"] == {"configuration_insub.py", "modeling_insub.py", "pipeline_insub.py"}
    assert files["image_classifier"] == {"configuration_insub.py", "modeling_insub.py", "image_processing_insub.py",
                                         "image_processing_pil_insub.py", "pipeline_insub.py"}
    assert files["text"] == {"configuration_insub.py", "modeling_insub.py", "pipeline_insub.py"}
    code = {name: "".join((tmp_path / name / f).read_text() for f in sorted(files[name])) for name in models}
    assert "class CifarResNetModel" in code["resnet"] and not any(
        f"class {other}" in code["resnet"]
        for other in ("TransformersTextEncoder", "GenomicEncoder", "BatchEnsembleEncoder", "TimmEncoder"))
    assert "class GenomicEncoderModel" in code["genomic"] and "class CifarResNetConfig" not in code["genomic"]
    assert "class TransformersTextEncoder" in code["text"] and "class CifarResNet" not in code["text"]
    assert "class BatchEnsembleEncoder" in code["batch_ensemble"] and "class DINOConfig" in code["dino"]
    assert "class SimCLRConfig" in code["vit"] and "class DINOConfig" not in code["vit"]
    assert "class SCDConfig" not in code["vit"]
    # what the loaders run: no pretraining objective, no training or Hub tooling
    for name, text in code.items():
        assert not any(f"class {cls}" in text for cls in ("InSubForPreTraining", "SimCLRObjective", "DINOObjective",
                                                          "DiversityLoss")), name
        assert "def checked_from_pretrained" not in text and "def push_model_to_hub" not in text, name
    auto_map = json.loads((tmp_path / "text" / "config.json").read_text())["auto_map"]
    assert auto_map == {"AutoConfig": "configuration_insub.InSubConfig", "AutoModel": "modeling_insub.InSubModel",
                        "AutoModelForSequenceClassification": "modeling_insub.InSubForSequenceClassification"}
    assert set(json.loads((tmp_path / "resnet" / "config.json").read_text())["auto_map"]) == {
        "AutoConfig", "AutoModel", "AutoModelForImageClassification"}


def test_the_text_job_pushes_the_sentence_model_with_its_tokenizer_and_transfer_results(tmp_path, fake_api):
    from transformers import AutoTokenizer

    from insub_hf.checksums import weights_fingerprint
    from insub_hf.encoders.pretrained import MINILM_HUB_ID, packaged_minilm_path
    from insub_hf.jobs.text import TRAINING_DEFAULTS, text_model_card
    from insub_hf.jobs.arguments import training_arguments
    from insub_hf.jobs.experiment import Experiment

    from .objectives.test_scd import tiny_bert_config

    model = InSubModel(tiny_bert_config())
    per_task = {"TWEETS": {"accuracy": 0.61, "ece": 0.07, "nll": 0.9, "mean_uncertainty": 0.02}}
    training = training_arguments(TRAINING_DEFAULTS, output_dir=str(tmp_path / "text"), push_to_hub=True,
                                  hub_model_id="someone/insub-minilm", hub_token="hf_test")
    experiment = Experiment("text", training, {"corpus": "bundled", "encoder": "minilm"}, TRAINING_DEFAULTS)
    assert training.push_to_hub is False  # the runs push nothing; the job pushes its model once
    results_file = experiment.finish({"results": {"scd_insub_m3": per_task}, "base_model": MINILM_HUB_ID,
                                      "fingerprints": {"scd_insub_m3": weights_fingerprint(model)}}, "")
    tokenizer = AutoTokenizer.from_pretrained(packaged_minilm_path())
    experiment.push(model, text_model_card(results_file, "scd_insub_m3", tokenizer, model))
    files = check_hub_folder(fake_api.snapshot)
    assert {"tokenizer_config.json", "evaluation/results.json", "modeling_insub.py"} <= set(files)
    assert card_metrics(fake_api.snapshot / "README.md") == {"Accuracy": 0.61, "ECE": 0.07, "NLL": 0.9}
    card = ModelCard.load(fake_api.snapshot / "README.md")
    assert card.data.base_model == MINILM_HUB_ID  # from the run's results, no flag needed
    assert f"SCD on the 'bundled' sentence corpus, starting from {MINILM_HUB_ID}" in card.text and "- learning_rate: 0.001" in card.text
    assert "- per_device_train_batch_size: 64" in card.text  # the text recipe's training, as the run recorded it
    assert AutoTokenizer.from_pretrained(fake_api.snapshot)("a b c")["input_ids"] == tokenizer("a b c")["input_ids"]


def test_register_for_auto_class_writes_the_remote_code_and_plain_saves_do_not(tmp_path):
    model = InSubModel(tiny_config())
    model.save_pretrained(tmp_path / "plain")
    assert not (tmp_path / "plain" / "modeling_insub.py").exists()
    assert "auto_map" not in json.loads((tmp_path / "plain" / "config.json").read_text())
    # an image model's own pipelines (no model code): `pipeline(task, model=folder, trust_remote_code=True)`
    assert sorted(p.name for p in (tmp_path / "plain").glob("*.py")) == ["pipeline_insub.py"]
    InSubModel.register_for_auto_class("AutoModel")
    try:
        model.save_pretrained(tmp_path / "registered")
    finally:
        InSubModel._auto_class = None
    auto_map = json.loads((tmp_path / "registered" / "config.json").read_text())["auto_map"]
    assert auto_map["AutoModel"] == "modeling_insub.InSubModel"
    assert sorted(p.name for p in (tmp_path / "registered").glob("*.py")) == ["configuration_insub.py",
                                                                              "modeling_insub.py", "pipeline_insub.py"]
    source = (tmp_path / "registered" / "modeling_insub.py").read_text()
    assert "class TransformersVisionEncoder" in source and "from .configuration_insub import" in source
    assert not re.search(r"^from \.(?!configuration_insub )", source, flags=re.M)  # no other relative import


OFFLINE_CHECK = """
import insub_hf
from insub_hf import InSubConfig, InSubModel
model = InSubModel(InSubConfig(encoder_config=dict(model_type="vit", image_size=32, patch_size=8, hidden_size=16,
    num_hidden_layers=1, num_attention_heads=2, intermediate_size=16), num_heads=2, head_hidden_sizes=[8]))
for call in (lambda: model.push_to_hub("someone/x", token="hf_test"),
             lambda: InSubModel.from_pretrained("someone/not-cached")):
    try:
        call()
    except Exception as error:
        print(type(error).__name__, error)
"""


def test_offline_mode_says_what_to_do():
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, "-c", OFFLINE_CHECK], env=env, capture_output=True, text=True,
                            timeout=300)
    assert "ConnectionError push_to_hub('someone/x'): HF_HUB_OFFLINE=1 is set, so nothing can be uploaded" in result.stdout
    assert "OSError from_pretrained('someone/not-cached'): HF_HUB_OFFLINE=1 is set" in result.stdout
    assert "hf download someone/not-cached" in result.stdout, result.stdout + result.stderr[-2000:]


def test_a_checkpoint_naming_an_unknown_encoder_is_refused_by_name(tmp_path):
    InSubModel(tiny_config()).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["encoder_config"]["model_type"] = "vit_from_the_future"
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="encoder_config.model_type='vit_from_the_future' is not an encoder"):
        InSubModel.from_pretrained(tmp_path)


def test_training_scripts_check_the_token_first_and_push_once_at_the_end(tmp_path, monkeypatch, fake_api):
    from insub_hf import InSubTrainer, InSubTrainingArguments
    from insub_hf.hub import final_push_target, save_final_model

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr("insub_hf.hub.upload.get_token", lambda: None)
    common = dict(output_dir=str(tmp_path / "run_name"), use_cpu=True, report_to="none")
    assert final_push_target(InSubTrainingArguments(**common)) is None
    with pytest.raises(ValueError, match=r"--push_to_hub \(repo 'run_name'\): no Hugging Face token"):
        final_push_target(InSubTrainingArguments(**common, push_to_hub=True))
    args = InSubTrainingArguments(**common, push_to_hub=True, hub_model_id="someone/run", hub_token="hf_test")
    assert final_push_target(args) == ("someone/run", "hf_test") and args.push_to_hub is False
    trainer = InSubTrainer(model=InSubModel(tiny_config()), args=args)
    save_final_model(trainer, ("someone/run", "hf_test"), "nothing, untrained")
    assert (tmp_path / "run_name" / "model" / "model.safetensors").is_file()
    assert fake_api.calls[-1][1]["repo_id"] == "someone/run"
    assert "nothing, untrained" in (fake_api.snapshot / "README.md").read_text()


@pytest.mark.parametrize("repo_id", ["a/..", "my name/insub", "a/b/c", "insub-"])
def test_an_invalid_repo_id_is_refused_before_any_folder_is_written(tmp_path, monkeypatch, repo_id, capsys):
    monkeypatch.chdir(tmp_path)
    InSubModel(tiny_config(num_heads=2)).save_pretrained(tmp_path / "model")
    before = sorted(p.name for p in tmp_path.iterdir())
    error = cli_error(["hub", "--model_dir", str(tmp_path / "model"), "--hub_model_id", repo_id], capsys)
    assert f"hub_model_id='{repo_id}' is not a Hub repo id: Repo id must" in error
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no runs/hub/<name> folder


def test_the_demo_results_make_a_card_and_the_fitted_bank_travels_in_the_model_s_weights(tmp_path, capsys):
    from insub_hf import InSubOODDetector
    from insub_hf.uncertainty.knn import encoder_and_heads_fingerprint
    from insub_hf.data import IMAGE_DATASET_PRESETS

    torch.manual_seed(0)
    model = InSubModel(InSubConfig(encoder_config=named_encoder("resnet18_cifar", 28, 1, 0.0625), num_heads=2,
                                   head_hidden_sizes=[8], head_output_size=4)).eval()
    model_dir = tmp_path / "insub_m2" / "model"
    IMAGE_DATASET_PRESETS["fashion_mnist"].image_processor().save_pretrained(model_dir)
    train = {"pixel_values": torch.randn(12, 1, 28, 28)}
    detector = InSubOODDetector.fit(model, train, k=3)
    model.save_pretrained(model_dir)
    test = {"accuracy": 0.8, "nll": 0.55, "ece": 0.03, "tace": 0.02, "brier": 0.28}
    own = encoder_and_heads_fingerprint(model)  # what a results row names: the weights, the bank left out
    runs = [{"name": name, "num_heads": m, "diversity_weight": w, "history": [], "test": test, "knn_accuracy": 0.7,
             "ood": {"mnist": {"msp": 0.6, "knn": 0.65}}, "head_spread_calibration": [], "fingerprints": [fingerprint],
             "modality": modality}
            for name, m, w, fingerprint, modality in (("baseline", 1, 0.0, "0" * 64, "image"),
                                                       ("insub_m2", 2, 1.0, own, "image"),
                                                       ("text_m2", 2, 1.0, own, "text"))]
    (tmp_path / "results.json").write_text(json.dumps({"job": "demo", "args": {}, "runs": runs}))
    argv = ["hub", "--model_dir", str(model_dir), "--repo_id", "someone/insub-demo", "--results",
            str(tmp_path / "results.json"), "--folder", str(tmp_path / "folder"), "--base_model", "someone/backbone"]
    assert re.search(r"row='insub_m9' is not a run of .*allowed: \['baseline', 'insub_m2', 'text_m2'\]",
                     cli_error([*argv, "--row", "insub_m9"], capsys))
    # another model's numbers (the baseline's), another modality's, or numbers that name no model are refused
    assert re.search(rf"row='baseline' .* measured the weights 000000000000; .*model_dir holds the weights {own[:12]}",
                     cli_error([*argv, "--row", "baseline"], capsys))
    assert re.search(r"row='text_m2' .* measured a model of modality 'text'; .*model_dir holds one of modality 'image'",
                     cli_error([*argv, "--row", "text_m2"], capsys))
    unnamed = [{k: v for k, v in run.items() if k != "fingerprints"} for run in runs]
    (tmp_path / "unnamed.json").write_text(json.dumps({"job": "demo", "args": {}, "runs": unnamed}))
    assert "measured weights it does not record" in cli_error(
        [*argv[:6], str(tmp_path / "unnamed.json"), *argv[7:], "--row", "insub_m2"], capsys)
    assert not (tmp_path / "folder").exists()
    assert main([*argv, "--row", "insub_m2"]) == 0
    folder = tmp_path / "folder"
    card = (folder / "README.md").read_text()
    assert card_metrics(folder / "README.md") == {
        "Accuracy": 0.8, "ECE": 0.03, "TACE": 0.02, "NLL": 0.55, "Brier": 0.28, "OOD AUROC vs mnist (MSP)": 0.6,
        "OOD AUROC vs mnist (k-NN, label-free)": 0.65,
    }
    meta = yaml.safe_load(card.split("---")[1])
    assert meta["license"] == "apache-2.0" and meta["base_model"] == "someone/backbone"
    assert "| Fashion-MNIST | test | Accuracy | 80.00 % |" in card and "| Fashion-MNIST | test | Brier | 0.2800 |" in card
    travelled = InSubModel.from_pretrained(folder).eval()
    assert travelled.config.uncertainty == model.config.uncertainty
    for name, value in InSubOODDetector(travelled).score(train).items():
        torch.testing.assert_close(value, detector.score(train)[name], rtol=0, atol=0, msg=name)
    # a file that names no job (whatever keys it has), or a job whose results no card shows, is refused
    (tmp_path / "other.json").write_text(json.dumps({"args": {}, "runs": runs}))
    assert re.search(r"other\.json' names no job .* one of \['compare', 'demo', 'genomics', 'text'\]", cli_error(
        [*argv[:6], str(tmp_path / "other.json"), "--folder", str(tmp_path / "f2")], capsys))
    (tmp_path / "ablation.json").write_text(json.dumps({"job": "ablation", "args": {}, "runs": runs}))
    assert "written by `insub-hf ablation`, whose results no card shows" in cli_error(
        [*argv[:6], str(tmp_path / "ablation.json"), "--folder", str(tmp_path / "f2")], capsys)


def test_a_published_folder_names_nothing_of_this_machine(tmp_path):
    from transformers import AutoTokenizer

    from insub_hf.encoders import encoder_config_from_pretrained
    from insub_hf.hub import machine_paths
    from insub_hf.encoders.pretrained import packaged_minilm_path
    from insub_hf.jobs.arguments import TextArguments, text_config

    base = str(packaged_minilm_path())  # a folder inside site-packages: the config and tokenizer remember it
    model = InSubModel(text_config(TextArguments(), encoder_config_from_pretrained(base), 2, 0.01))
    folder = tmp_path / "repo"
    files = save_for_hub(model, folder, "someone/text", HubCard(tokenizer=AutoTokenizer.from_pretrained(base)))
    local = machine_paths()
    assert str(tmp_path).startswith(tuple(local)) and any(base.startswith(p) for p in local)  # the check can fire
    for name in files:
        if name.endswith((".json", ".md", ".py", ".txt")):
            text = (folder / name).read_text()
            assert not any(p in text for p in local), name
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    assert not {"is_local", "local_files_only", "max_length"} & set(tokenizer_config)
    assert "_name_or_path" not in json.loads((folder / "config.json").read_text())["encoder_config"]
    loaded = AutoTokenizer.from_pretrained(folder)
    assert loaded("A sentence.")["input_ids"] == AutoTokenizer.from_pretrained(base)("A sentence.")["input_ids"]
    torch.testing.assert_close(InSubModel.from_pretrained(folder).state_dict()["heads.weights.0"],
                               model.state_dict()["heads.weights.0"])
    (folder / "notes.txt").write_text(f"trained from {base}")
    with pytest.raises(ValueError, match=r"files name folders of this machine .*\['notes.txt'\]"):
        check_hub_folder(folder)


def test_a_system_python_prefix_is_no_machine_path(monkeypatch):
    from insub_hf.hub import machine_paths

    monkeypatch.setattr(sys, "prefix", "/usr")
    monkeypatch.setattr(sys, "base_prefix", "/usr/local")
    assert "/usr" not in machine_paths() and "/usr/local" not in machine_paths()
    assert os.path.expanduser("~").rstrip("/") in machine_paths()


def python_snippets(card: str) -> list[str]:
    """The ```python blocks of a model card."""
    return [block.split("```", 1)[0] for block in card.split("```python\n")[1:]]


def generated_card(name: str):
    """(model, HubCard) of one kind of generated card: "image" (with a detector), "classifier", "text", "dna"."""
    from transformers import AutoTokenizer

    from insub_hf import InSubForImageClassification, InSubOODDetector
    from insub_hf.data import IMAGE_DATASET_PRESETS
    from insub_hf.encoders.pretrained import packaged_minilm_path

    from .objectives.test_scd import tiny_bert_config

    torch.manual_seed(0)
    grey = dict(encoder_config=named_encoder("resnet18_cifar", 28, 1, 0.0625), head_hidden_sizes=[8], head_output_size=4)
    processor = IMAGE_DATASET_PRESETS["fashion_mnist"].image_processor()
    if name == "image":
        image = InSubModel(InSubConfig(**grey, num_heads=2, uncertainty={"direction": -1})).eval()
        detector = InSubOODDetector.fit(image, {"pixel_values": torch.randn(12, 1, 28, 28)}, k=3)
        return image, HubCard(processor=processor, detector=detector, hyperparameters={"learning_rate": 0.003})
    if name == "classifier":
        return (InSubForImageClassification(InSubConfig(**grey, num_heads=2, num_labels=3)).eval(),
                HubCard(processor=processor))
    if name == "text":
        return InSubModel(tiny_bert_config()).eval(), HubCard(tokenizer=AutoTokenizer.from_pretrained(
            packaged_minilm_path()))
    return InSubModel(InSubConfig(encoder_config=GENOMIC, num_heads=2, head_hidden_sizes=[8], head_output_size=4,
                                  objective="genomenet")).eval(), HubCard()


@pytest.mark.parametrize("name", ["image", "classifier", "text", "dna"])
def test_every_snippet_of_a_generated_card_runs_in_a_fresh_process(name, tmp_path):
    """Each kind of card its own test: its snippets (usage, and the detector's for an image model or
    sentence-transformers' for a text model) run as written against the saved folder, offline, stdin closed."""
    from PIL import Image

    model, card = generated_card(name)
    Image.fromarray(torch.randint(0, 256, (28, 28), dtype=torch.uint8).numpy()).save(tmp_path / "your_image.png")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"))
    folder = tmp_path / name
    save_for_hub(model, folder, f"someone/insub-{name}", card)
    snippets = python_snippets((folder / "README.md").read_text())
    assert len(snippets) == (2 if name in ("image", "text") else 1), name
    for snippet in snippets:
        code = snippet.replace(f'"someone/insub-{name}"', repr(str(folder)))
        # stdin closed: a snippet that asks "run the custom code? [y/N]" fails instead of waiting
        result = subprocess.run([sys.executable, "-c", code + "\nprint('snippet OK')"], cwd=tmp_path, env=env,
                                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
        assert "snippet OK" in result.stdout, f"{name}:\n{code}\n{result.stderr[-2000:]}"
    if name == "text":
        meta = ModelCard.load(folder / "README.md").data
        assert meta.library_name == "sentence-transformers" and meta.pipeline_tag == "sentence-similarity"
        assert (folder / "modules.json").is_file()  # one folder for SentenceTransformer and AutoModel
    if name == "image":
        text = (folder / "README.md").read_text()
        assert "Requirements: `pip install torch transformers safetensors pillow`." in text
        assert "representations of 12 inputs, searched at the\n3-th neighbour" in text
        assert "- learning_rate: 0.003" in text

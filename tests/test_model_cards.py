"""The released models in model_cards/: each folder that holds weights is the complete Hub repo of its release, within
the repository's size limits; every snippet of its card runs as written in a fresh process without insub-hf (the
folder served as the repo the card names, by a Hub on 127.0.0.1); and the card's headline numbers are what its
files give on the data CI has."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from insub_hf import InSubModel, InSubOODDetector
from insub_hf.hub import check_hub_folder
from insub_hf.model.model_files import card_only_line
from insub_hf.release.publish import card_repo_id, fits_the_repository

from .card_snippets import run_card_snippets
from .hub_server import LocalHub

pytestmark = pytest.mark.slow

CARDS = Path(__file__).resolve().parents[1] / "model_cards"
FOLDERS = sorted(path.parent for path in CARDS.glob("*/config.json") if card_only_line(path.parent) is None)


def card_metrics(card: str) -> dict[str, float]:
    meta = yaml.safe_load(card.split("---")[1])
    (entry,) = meta["model-index"]
    return {m["name"]: m["value"] for result in entry["results"] for m in result["metrics"]}


def dna_probe_numbers(folder: Path) -> dict[str, float]:
    """The DNA card's linear-probe numbers recomputed from the folder's weights (the genomics job's split of the
    bundled splice junctions, seed 0, its probe and its summary) and the share of held-out windows its calibrated
    `uncertainty` flags."""
    from insub_hf.data import load_splice_junctions
    from insub_hf.evaluation.features import extract_features
    from insub_hf.evaluation.probes import ProbeArguments, fit_probes, member_probabilities
    from insub_hf.evaluation.harness import summarize
    from insub_hf.jobs.genomics import GenomicsArguments, encode_labelled

    model = InSubModel.from_pretrained(folder).eval()
    labelled = load_splice_junctions()
    split = labelled.train_test_split(test_size=GenomicsArguments.test_fraction, seed=0, stratify_by_column="label")
    train, test = encode_labelled(split["train"]), encode_labelled(split["test"])
    classes = labelled.features["label"].num_classes
    features = extract_features(model, {"dna_one_hot": train[0]}).representations
    probes = fit_probes(features, train[1], classes, 1, ProbeArguments(probe_seed=0))
    probs = member_probabilities(probes, extract_features(model, {"dna_one_hot": test[0]}).representations)
    summary = summarize(probs, test[1])
    # the threshold section's share: windows of the release's test sequences, flagged at 0.95
    from insub_hf.data import bundled_upstream_path, load_fasta_dataset
    from insub_hf.jobs.genomics import HELD_OUT_ROWS, dna_parts, dna_windows

    _, _, test = dna_parts(load_fasta_dataset(bundled_upstream_path())["sequence"], seed=0)
    held_out = dna_windows(test, GenomicsArguments.crop_length)[:HELD_OUT_ROWS]
    uncertainty = InSubOODDetector(model).score({"dna_one_hot": held_out})["uncertainty"]
    return {"Accuracy (linear_probe)": summary.accuracy, "ECE (linear_probe)": summary.ece,
            "NLL (linear_probe)": summary.nll, "flag rate": (uncertainty > 0.95).double().mean().item()}


def image_ood_numbers(folder: Path) -> dict[str, float]:
    """The image card's label-free OOD AUROCs recomputed from the folder's model alone (its bank is in its weights):
    the bundled 1,000 Fashion-MNIST test images (the card: all 10,000) against the comparison's own OOD sets (the
    same seeded noise, MNIST and 8x8 digits), by the k-NN distance to its bank and by its `uncertainty` where the card
    names it so, and the share of test images its calibrated `uncertainty` flags above 0.95."""
    from insub_hf.evaluation.metrics import ood_auroc
    from insub_hf.jobs.compare import ComparisonArguments
    from insub_hf.jobs.comparison import load_protocol_data

    data = load_protocol_data(ComparisonArguments(data_source="bundled")).evaluation
    model = InSubModel.from_pretrained(folder).eval()
    detector = InSubOODDetector(model)
    size = model.config.uncertainty["bank_size"]

    def scores(images):
        inputs = data.inputs(images)
        with torch.no_grad():
            uncertainty = torch.cat([model(pixel_values=x).uncertainty for x in inputs["pixel_values"].split(500)])
        return detector.score(inputs)["knn"], uncertainty

    test_knn, test_uncertainty = scores(data.test_images)
    numbers = {}
    for name, images in data.ood_images.items():
        knn, uncertainty = scores(images)
        numbers[f"OOD AUROC vs {name} (k-NN to the shipped {size}-image bank, label-free)"] = ood_auroc(
            test_knn, knn, higher_is_in=False)
        if model.config.uncertainty["reading"] == "calibrated":
            name_ = f"OOD AUROC vs {name} (calibrated uncertainty, label-free, the model's own)"
            numbers[name_] = ood_auroc(test_uncertainty, uncertainty, higher_is_in=False)
    numbers["flag rate"] = (test_uncertainty > 0.95).double().mean().item()
    return numbers


def text_transfer_numbers(folder: Path) -> dict[str, float]:
    """The text card's headline numbers (the transfer of its frozen embeddings) as its run record holds them."""
    results = json.loads((folder / "evaluation" / "results.json").read_text())["results"]
    tweets = results[next(name for name in results if name.startswith("scd_insub"))]["TWEETS"]
    return {"Accuracy": tweets["accuracy"], "ECE": tweets["ece"], "NLL": tweets["nll"]}


HEADLINES = {"insub-genomenet-dm3": dna_probe_numbers, "insub-resnet10-fashion-mnist": image_ood_numbers,
             "insub-minilm-scd": text_transfer_numbers}
# The DNA probe is fitted again here (other threads, other rounding): its numbers may move by 0.01. The image AUROCs are
# read on the bundled tenth of the card's test images: sampling allows 0.03 (the largest deviation seen: 0.023).
TOLERANCE = {"insub-genomenet-dm3": 0.01, "insub-resnet10-fashion-mnist": 0.03, "insub-minilm-scd": 1e-4}


def mismatched_headlines(folder: Path, card: str) -> list[str]:
    """'name: card X, files give Y' for each headline number of `card` its folder's files do not give."""
    measured = HEADLINES[folder.name](folder)
    stated = card_metrics(card)
    flagged = re.search(r"\*\*([0-9.]+) %\*\* flagged", card)
    if flagged:  # the threshold section's measured share
        stated["flag rate"] = float(flagged.group(1)) / 100
    return [f"{name}: card {stated[name]}, files give {value:.4f}" for name, value in measured.items()
            if abs(stated[name] - value) > TOLERANCE[folder.name]]


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_a_released_folder_is_its_complete_hub_repo_within_the_size_limits(folder):
    files = check_hub_folder(folder)
    assert {"config.json", "model.safetensors", "configuration_insub.py", "modeling_insub.py", "README.md"} <= set(files)
    assert not [f for f in files if f.startswith("ood_detector")]  # one weights file: the bank is in it
    assert fits_the_repository([folder / f for f in files])
    card = (folder / "README.md").read_text()
    assert card_repo_id(folder).split("/")[-1] == folder.name
    InSubModel.from_pretrained(folder)  # checksums and the config's pairing hold


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_a_released_card_describes_the_encoder_and_heads_its_config_holds(folder):
    from insub_hf import InSubConfig

    config, card = InSubConfig.from_pretrained(folder), (folder / "README.md").read_text()
    encoder = config.encoder_config
    for key, label in (("depth", "depth"), ("width_multiplier", "width multiplier"), ("image_size", "image size")):
        if getattr(encoder, key, None) is not None:
            assert f"{label} {getattr(encoder, key)}" in card, (key, getattr(encoder, key))
    assert f"**M = {config.num_heads}**" in card
    assert "width 128" not in card  # the representation's size once read as the ResNet's width


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_every_snippet_of_a_released_card_runs_as_written(folder, tmp_path):
    card = (folder / "README.md").read_text()
    repo_id = card_repo_id(folder)
    with LocalHub() as hub:
        hub.repos[repo_id] = ("1" * 40, {str(p.relative_to(folder)): p.read_bytes()
                                          for p in folder.rglob("*") if p.is_file()})
        base = json.loads((folder / "config.json").read_text()).get("frozen_base")
        if base is not None:  # its base's own repo, for a machine without the packaged copy
            from insub_hf.encoders.pretrained import packaged_minilm_path

            packaged = packaged_minilm_path()
            hub.repos[base["repo_id"]] = ("2" * 40, {str(p.relative_to(packaged)): p.read_bytes()
                                                     for p in packaged.rglob("*") if p.is_file()})
        outputs = run_card_snippets(repo_id, hub.endpoint, tmp_path)
    model = InSubModel.from_pretrained(folder).eval()
    if model.config.modality == "text":  # unfitted: its first snippet fits on sentences, the second reads features
        served = outputs["0:uncertainty"]
        assert served.shape == (2,) and ((served >= 0) & (served <= 1)).all()
        inputs = {k.split(":")[1]: v for k, v in outputs.items() if k.startswith("1:") and k.split(":")[1] in (
            "input_ids", "attention_mask", "token_type_ids")}
        with torch.no_grad():
            torch.testing.assert_close(outputs["1:features"], model(**inputs).representation, rtol=1e-5, atol=1e-6)
        return
    assert len(outputs) and any(key.endswith(":knn") for key in outputs)
    number = next(key for key in outputs if key.endswith(":knn")).split(":")[0]
    inputs = {k.split(":")[1]: v for k, v in outputs.items() if k.startswith(f"{number}:")
              and k.split(":")[1] in ("dna_one_hot", "pixel_values")}
    torch.testing.assert_close(outputs[f"{number}:knn"], InSubOODDetector(model).score(inputs)["knn"], rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("folder", [f for f in FOLDERS if f.name in HEADLINES], ids=lambda p: p.name)
def test_a_released_card_s_headline_numbers_are_what_its_files_give(folder):
    assert mismatched_headlines(folder, (folder / "README.md").read_text()) == []


def test_a_card_edited_to_another_number_fails_the_check():
    folder = CARDS / "insub-genomenet-dm3"
    if not (folder / "config.json").is_file():
        pytest.fail("model_cards/insub-genomenet-dm3 holds no released model")
    card = (folder / "README.md").read_text()
    stated = card_metrics(card)["Accuracy (linear_probe)"]
    edited = re.sub(rf"value: {stated}\n(\s+)name: Accuracy \(linear_probe\)",
                    lambda m: f"value: {round(stated + 0.05, 4)}\n{m[1]}name: Accuracy (linear_probe)", card)
    assert edited != card
    (problem,) = mismatched_headlines(folder, edited)
    assert problem.startswith(f"Accuracy (linear_probe): card {round(stated + 0.05, 4)}, files give")


def test_one_command_publishes_every_built_release_to_the_repo_its_card_names(tmp_path, monkeypatch, capsys):
    import shutil

    from huggingface_hub import HfApi

    from insub_hf_cli import main

    from .conftest import cli_error

    cards = tmp_path / "cards"
    for folder in FOLDERS:
        shutil.copytree(folder, cards / folder.name)
    (cards / "insub-tuned-text").mkdir()  # a release whose card only is in git (its files over the limits)
    (cards / "insub-tuned-text" / "README.md").write_text("card only")
    with LocalHub() as hub:
        monkeypatch.setattr("insub_hf.hub.upload.HfApi", lambda token=None: HfApi(endpoint=hub.endpoint, token=token))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        assert main(["release", "publish", "--model_cards", str(cards), "--hub_token", "hf_test"]) == 0
        assert sorted(hub.repos) == sorted(card_repo_id(f) for f in FOLDERS)
        printed = capsys.readouterr().out
        assert f"skipped {cards / 'insub-tuned-text'}: its card only" in printed  # said, not passed over
        for folder in FOLDERS:  # byte for byte what the folder holds
            _, files = hub.repos[card_repo_id(folder)]
            assert files == {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
        # an older copy of a release beside it goes to the same repo: refused, naming both, before any upload
        hub.repos.clear()
        shutil.copytree(cards / FOLDERS[0].name, cards / f"{FOLDERS[0].name}-old")
        line = cli_error(["release", "publish", "--model_cards", str(cards), "--hub_token", "hf_test"], capsys)
        assert "several folders" in line and f"'{FOLDERS[0].name}', '{FOLDERS[0].name}-old'" in line and not hub.repos
        shutil.rmtree(cards / f"{FOLDERS[0].name}-old")
        # a folder whose evaluation measured other weights (another release's results.json): its card is not its own
        measured = cards / FOLDERS[0].name / "evaluation" / "results.json"
        kept = measured.read_bytes()
        shutil.copyfile(FOLDERS[1] / "evaluation" / "results.json", measured)
        line = cli_error(["release", "publish", "--model_cards", str(cards), "--hub_token", "hf_test"], capsys)
        assert "which its evaluation/results.json did not measure" in line and not hub.repos
        measured.write_bytes(kept)
        # a card that names no ORG/NAME is refused before anything goes up
        first = cards / FOLDERS[0].name / "README.md"
        first.write_text(first.read_text().replace(card_repo_id(first.parent), FOLDERS[0].name))
        hub.repos.clear()
        line = cli_error(["release", "publish", "--model_cards", str(cards), "--hub_token", "hf_test"], capsys)
        assert "names no repo of the form ORG/NAME" in line and "--hub_model_id ORG/NAME" in line and not hub.repos
    line = cli_error(["release", "publish", "--model_cards", str(tmp_path / "empty")], capsys)
    assert "holds no built release" in line


def test_the_released_image_model_gives_one_uncertainty_on_every_path():
    """Its own class, `AutoModel`, `InSubOODDetector`, `insub-hf score`'s encoder (AutoModel with
    `--trust_remote_code`) and the feature-extraction pipeline of the folder (its features searched in the model's
    bank) read one bank, one k, one direction. Without insub-hf, the card's snippets give the same `knn`
    (`test_every_snippet_of_a_released_card_runs_as_written`)."""
    import numpy as np
    from PIL import Image
    from transformers import AutoImageProcessor, AutoModel, pipeline

    from insub_hf.data import load_fashion_mnist
    from insub_hf.jobs.score import Encoder, ScoreArguments

    folder = CARDS / "insub-resnet10-fashion-mnist"
    rng = np.random.default_rng(0)
    images = list(load_fashion_mnist("bundled")["test"]["image"][:12]) + [
        Image.fromarray(rng.integers(0, 256, (28, 28), dtype=np.uint8)) for _ in range(4)]  # and noise
    inputs = dict(AutoImageProcessor.from_pretrained(folder, trust_remote_code=True)(images, return_tensors="pt"))
    model = InSubModel.from_pretrained(folder).eval()
    auto = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
    with torch.no_grad():
        own, theirs = model(**inputs), auto(**inputs)
    block = model.config.uncertainty
    assert (block["reading"], block["k"], block["bank_size"], block["direction"]) == ("calibrated", 50, 1500, 1)
    assert ((own.uncertainty >= 0) & (own.uncertainty <= 1)).all() and (own.uncertainty[12:] > 0.95).all()  # noise
    torch.testing.assert_close(theirs.uncertainty, own.uncertainty, rtol=0, atol=0)
    scores = InSubOODDetector(model).score(inputs)
    torch.testing.assert_close(scores["uncertainty"], own.uncertainty, rtol=0, atol=0)
    _, through_score = Encoder(ScoreArguments(model=str(folder), dataset="unused", trust_remote_code=True))(images)
    torch.testing.assert_close(through_score, own.uncertainty, rtol=1e-6, atol=1e-7)
    extractor = pipeline("image-feature-extraction", model=str(folder), trust_remote_code=True)
    features = torch.tensor(np.array([extractor(image)[0] for image in images]), dtype=torch.float32)
    torch.testing.assert_close(features, own.representation, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        knn = auto.knn_bank(features, auto.config.uncertainty["k"])
    torch.testing.assert_close(knn, scores["knn"], rtol=1e-5, atol=1e-6)


def test_a_card_kept_without_its_model_says_how_to_build_it_wherever_it_is_loaded(tmp_path):
    """A release over the repository's limits keeps its card only (`card_only_files`, e.g. a text model whose tuned
    encoder cannot load from its base's repo): loaded by path as its card's snippets load the repo, with remote code
    where insub-hf is not installed, and through insub-hf, one line that says how to build the folder, not
    transformers' missing model type or weights."""
    from transformers import AutoModel

    from insub_hf.release.build import card_only_files

    kept = tmp_path / "insub-tuned-text"
    kept.mkdir()
    (kept / "README.md").write_text("card only")
    card_only_files(kept, "insub-tuned-text", ("insub-hf release text --freeze_encoder false", 40.0, "runs/release/text/hub"))
    build = ("insub-tuned-text holds the card of insub-tuned-text only (its files are over the repository's size "
             "limits), no model: `insub-hf release text --freeze_encoder false` builds it into runs/release/text/hub "
             "in about 40 min")
    assert card_only_line(kept).startswith(build) and kept not in FOLDERS
    load = ("import sys\nsys.modules['insub_hf'] = None\nfrom sentence_transformers import SentenceTransformer\n"
            "from transformers import AutoModel\n"
            f"for load in (SentenceTransformer, AutoModel.from_pretrained):\n    try:\n        load({str(kept)!r}, "
            "trust_remote_code=True)\n    except ImportError as error:\n        print(error)\n")
    run = subprocess.run([sys.executable, "-c", load], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules")))
    assert [line.startswith(build) for line in run.stdout.splitlines()] == [True, True], run.stdout + run.stderr
    with pytest.raises(FileNotFoundError, match=re.escape(build)):
        AutoModel.from_pretrained(kept)


def test_the_released_text_folder_holds_the_heads_and_names_its_frozen_base():
    """model_cards/insub-minilm-scd: its weights without the base (well under the limits), the base named by its Hub
    repo id and the SHA-256 of its weights, loaded back equal to the packaged all-MiniLM-L6-v2."""
    from safetensors import safe_open
    from transformers import AutoModel as StockAutoModel

    from insub_hf.encoders.pretrained import MINILM_HUB_ID, packaged_minilm_path

    folder = CARDS / "insub-minilm-scd"
    with safe_open(folder / "model.safetensors", "pt") as f:
        assert not [k for k in f.keys() if k.startswith("encoder.model.")] and any(k.startswith("heads.") for k in f.keys())
    assert sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) < 10 * 2 ** 20
    model = InSubModel.from_pretrained(folder)
    assert model.config.frozen_base["repo_id"] == MINILM_HUB_ID
    base = StockAutoModel.from_pretrained(packaged_minilm_path()).state_dict()
    for key, tensor in model.encoder.model.state_dict().items():
        assert torch.equal(tensor, base[key]), key
    assert f"`{MINILM_HUB_ID}`" in (folder / "README.md").read_text()  # the card says where the encoder comes from


def test_the_released_dna_model_serves_only_the_window_length_it_was_calibrated_at(caplog):
    """Windows of the DNA release's own held-out sequences at 100, 150 and 200 nt: at the calibrated length about
    5 % above 0.95; at another length None, with a warning naming the calibrated one."""
    from insub_hf.data import bundled_upstream_path, load_fasta_dataset
    from insub_hf.jobs.genomics import HELD_OUT_ROWS, dna_parts, dna_windows

    folder = CARDS / "insub-genomenet-dm3"
    model = InSubModel.from_pretrained(folder).eval()
    low, high = model.config.uncertainty["length_range"]
    _, _, test = dna_parts(load_fasta_dataset(bundled_upstream_path())["sequence"], seed=0)
    assert (low, high) == (150, 150)  # the release's crops
    import logging

    logging.Logger.warning_once.cache_clear()  # transformers says each warning once per process: say it here again
    for length in (100, 150, 200):
        windows = dna_windows(test, length)[:HELD_OUT_ROWS]
        with torch.no_grad(), caplog.at_level("WARNING"):
            served = [model(dna_one_hot=x).uncertainty for x in windows.split(500)]
        if length == 150:
            assert abs((torch.cat(served) > 0.95).double().mean().item() - 0.05) <= 0.015
        else:
            assert all(u is None for u in served)
            assert f"calibrated on inputs of 150-150 bases and this batch has {length}" in caplog.text


def test_no_release_folder_holds_a_link():
    """A Hub folder is plain files: a link breaks where the folder is copied or uploaded on its own."""
    root = Path(__file__).resolve().parents[1] / "model_cards"
    assert [str(p.relative_to(root)) for p in root.rglob("*") if p.is_symlink()] == []


BY_REPO_ID_WITH_THE_PACKAGE = """
import torch
from sentence_transformers import SentenceTransformer
from insub_hf import InSubModel

model = InSubModel.from_pretrained("insub-hf/insub-minilm-scd").eval()
st = SentenceTransformer("insub-hf/insub-minilm-scd", trust_remote_code=True)
inputs = st[0].tokenizer(["A sentence to embed.", "Another one."], padding=True, return_tensors="pt")
with torch.no_grad():
    torch.testing.assert_close(st[0].model(**inputs).representation, model(**inputs).representation, rtol=1e-5,
                               atol=1e-6)
assert model.config.frozen_base["repo_id"] == "sentence-transformers/all-MiniLM-L6-v2"
print("loaded by repo id")
"""


def test_the_released_text_folder_loads_by_repo_id_with_insub_hf(tmp_path):
    """The card's snippets load it by repo id without insub-hf; here the package's `InSubModel` and
    sentence-transformers load it by repo id from the local Hub (its base's repo there too)."""
    from insub_hf.encoders.pretrained import packaged_minilm_path

    folder, packaged = CARDS / "insub-minilm-scd", packaged_minilm_path()
    with LocalHub() as hub:
        hub.repos["insub-hf/insub-minilm-scd"] = ("3" * 40, {str(p.relative_to(folder)): p.read_bytes()
                                                             for p in folder.rglob("*") if p.is_file()})
        hub.repos["sentence-transformers/all-MiniLM-L6-v2"] = ("4" * 40, {
            str(p.relative_to(packaged)): p.read_bytes() for p in packaged.rglob("*") if p.is_file()})
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        env.update(HF_ENDPOINT=hub.endpoint, HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_TELEMETRY="1",
                   HF_HUB_DISABLE_XET="1")
        run = subprocess.run([sys.executable, "-c", BY_REPO_ID_WITH_THE_PACKAGE], env=env, capture_output=True,
                             text=True, timeout=300, cwd=tmp_path)
    assert "loaded by repo id" in run.stdout, run.stderr[-3000:]

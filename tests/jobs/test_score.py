"""`insub-hf score MODEL --dataset DATA`: a stock transformers image encoder and an InSub model, each by repo id from a
Hub on 127.0.0.1, scored on a local folder of real images; the numbers checked against an independent computation
on the features the model gives when loaded by path."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml
from sklearn.metrics import roc_auc_score

from ..conftest import cli_error
from ..hub_server import LocalHub

pytestmark = pytest.mark.slow


def push_folder(hub: LocalHub, repo_id: str, folder) -> None:
    hub.repos[repo_id] = ("2" * 40, {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*")
                                     if p.is_file()})


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from insub_hf.data import load_fashion_mnist

    folder = tmp_path_factory.mktemp("data") / "fmnist"
    load_fashion_mnist("bundled", train_per_class=6, test_per_class=3).save_to_disk(str(folder))
    return folder


def models(tmp_path):
    from transformers import ViTConfig, ViTImageProcessor, ViTModel

    from insub_hf import InSubConfig, InSubImageProcessor, InSubModel, named_encoder

    torch.manual_seed(0)
    insub = InSubModel(InSubConfig(encoder_config=named_encoder("resnet18_cifar", 28, 1, 0.0625), num_heads=2,
                                   head_hidden_sizes=[8], head_output_size=4, uncertainty={"direction": 1}))
    insub.save_pretrained(tmp_path / "insub", remote_code=True)
    InSubImageProcessor.for_images(28, 1, (0.5,), (0.25,)).save_pretrained(tmp_path / "insub")
    vit = ViTModel(ViTConfig(image_size=28, patch_size=7, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                             intermediate_size=32))
    vit.save_pretrained(tmp_path / "vit")
    ViTImageProcessor(size={"height": 28, "width": 28}).save_pretrained(tmp_path / "vit")
    return {"someone/tiny-insub": tmp_path / "insub", "someone/tiny-vit": tmp_path / "vit"}


def test_any_model_by_repo_id_is_scored_on_a_local_folder(tmp_path, data):
    from insub_hf.jobs.score import Encoder, ScoreArguments, _split, load_data

    folders = models(tmp_path)
    with LocalHub() as hub:
        for repo_id, folder in folders.items():
            push_folder(hub, repo_id, folder)
        env = {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0"}
        for repo_id in folders:
            out = tmp_path / repo_id.split("/")[1]
            result = subprocess.run([sys.executable, "-m", "insub_hf_cli", "score", "--model", repo_id, "--dataset",
                                     str(data), "--knn_k", "5", "--max_train", "60", "--output_dir", str(out)],
                                    env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
            assert result.returncode == 0, result.stderr[-3000:]
    for repo_id, folder in folders.items():
        out = tmp_path / repo_id.split("/")[1]
        results = json.loads((out / "results.json").read_text())
        assert results["images"] == {"train": 60, "test": 30, "ood": 30}
        # an InSub model whose spread has a direction but no calibrated fit serves no `uncertainty` to score
        assert set(results["ood"]) == {"msp", "knn"}
        assert 0 <= results["test"]["accuracy"] <= 1 and results["test"]["temperature"] > 0
        # the k-NN AUROC again, from the model loaded by path: sklearn on cosine distances to the 5th neighbour
        args = ScoreArguments(model=str(folder), dataset=str(data), knn_k=5, max_train=60)
        encoder = Encoder(args)
        loaded = load_data(str(data), args)
        train, _ = encoder(_split(loaded, "train", args, 60)[0])
        test_images = _split(loaded, "test", args, 30)[0]
        test, _ = encoder(test_images)
        rng = np.random.default_rng(0)  # the noise the command drew (its seed 0)
        noise = [__import__("PIL.Image").Image.fromarray(rng.integers(0, 256, (28, 28), dtype=np.uint8), mode="L")
                 for _ in range(30)]
        ood, _ = encoder(noise)
        unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
        kth = lambda q: 1 - np.sort(unit(q.numpy()) @ unit(train.numpy()).T, axis=1)[:, -5]  # noqa: E731
        labels = np.r_[np.zeros(30), np.ones(30)]  # OOD positive for a higher-is-OOD score
        assert results["ood"]["knn"] == pytest.approx(roc_auc_score(labels, np.r_[kth(test), kth(ood)]), abs=1e-6)
        index = yaml.safe_load((out / "model_index.yaml").read_text())
        metrics = {m["name"]: m["value"] for r in index["model-index"][0]["results"] for m in r["metrics"]}
        assert metrics["Accuracy"] == round(results["test"]["accuracy"], 4)


def test_a_calibrated_model_s_flag_rate_is_reported_beside_the_band_its_calibration_gives(tmp_path, data, capsys):
    """The share of test images above 0.95, counted again from the model loaded by path, and the band of
    `expected_flag_band` for as many inputs and the model's own calibration rows."""
    from insub_hf import InSubModel
    from insub_hf.evaluation.flagging import expected_flag_band
    from insub_hf.jobs.score import Encoder, ScoreArguments, _split, load_data, score

    folder = models(tmp_path)["someone/tiny-insub"]
    model = InSubModel.from_pretrained(folder)
    args = ScoreArguments(model=str(folder), dataset=str(data), knn_k=5, output_dir=str(tmp_path / "out"))
    encoder = Encoder(args)
    train_images = _split(load_data(str(data), args), "train", args, 60)[0]
    model.fit_uncertainty(dict(encoder.processor(images=train_images, return_tensors="pt")), k=5)
    model.save_pretrained(folder, remote_code=True)
    results = score(args)
    _, uncertainty = Encoder(args)(_split(load_data(str(data), args), "test", args, 30)[0])
    rate = results["flag_rate"]
    assert rate["inputs"] == 30 and rate["calibration_inputs"] == 30  # half of the 60 training images
    assert rate["share"] == pytest.approx(float(np.mean(uncertainty.numpy() > 0.95)), abs=1e-12)
    expected, low, high = expected_flag_band(30, 30)
    assert rate["expected"] == expected and rate["band_95"] == [low, high]
    assert json.loads((tmp_path / "out" / "results.json").read_text())["flag_rate"] == rate
    printed = capsys.readouterr().out
    assert (f"uncertainty > 0.95 flags {100 * rate['share']:.1f} % of the 30 test inputs; 30 inputs drawn as its 30 "
            f"calibration inputs were would flag {100 * low:.1f}-{100 * high:.1f} % (95 % band)") in printed


def test_the_flag_line_says_which_side_of_the_band_a_share_falls():
    from insub_hf.jobs.score import flag_line

    rate = {"threshold": 0.95, "inputs": 1000, "calibration_inputs": 1000, "band_95": [0.032, 0.07]}
    assert flag_line({**rate, "share": 0.05}, "test").endswith("(95 % band): within it")
    assert flag_line({**rate, "share": 0.073}, "test").endswith(
        "above it: the test split is less typical than the data the model was calibrated on")
    assert flag_line({**rate, "share": 0.01}, "val").endswith(
        "below it: the val split is more typical than the data the model was calibrated on")
    assert flag_line({**rate, "share": 0.073}, "test").startswith(
        "[score] uncertainty > 0.95 flags 7.3 % of the 1,000 test inputs; 1,000 inputs drawn as its 1,000 "
        "calibration inputs were would flag 3.2-7.0 % (95 % band)")


def test_a_missing_column_or_split_is_refused_naming_what_the_data_has(tmp_path, data, capsys):
    line = cli_error(["score", "--model", "someone/x", "--dataset", str(data), "--label_column", "target",
                      "--output_dir", str(tmp_path / "o")], capsys)
    assert "has no column 'target'; its columns are ['image', 'label']" in line
    line = cli_error(["score", "--model", "someone/x", "--dataset", str(data), "--test_split", "validation",
                      "--output_dir", str(tmp_path / "o")], capsys)
    assert "has no split 'validation'; it has ['test', 'train']" in line


def test_a_text_encoder_by_repo_id_is_scored_on_texts(tmp_path):
    from datasets import DatasetDict
    from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel

    from insub_hf import InSubModel
    from insub_hf.data import load_tweet_sentiment
    from insub_hf.encoders.pretrained import packaged_minilm_path

    from ..objectives.test_scd import tiny_bert_config

    tweets = load_tweet_sentiment("transfer").shuffle(seed=0)
    data = tmp_path / "tweets"
    DatasetDict(train=tweets.select(range(60)), test=tweets.select(range(60, 90))).save_to_disk(str(data))
    tokenizer = AutoTokenizer.from_pretrained(packaged_minilm_path())
    torch.manual_seed(0)
    folders = {"someone/tiny-bert": tmp_path / "bert", "someone/tiny-insub-text": tmp_path / "insub"}
    BertModel(BertConfig(**tiny_bert_config().encoder_config.to_dict())).save_pretrained(folders["someone/tiny-bert"])
    InSubModel(tiny_bert_config(num_heads=2, uncertainty={"direction": 1})).save_pretrained(
        folders["someone/tiny-insub-text"], remote_code=True)
    for folder in folders.values():
        tokenizer.save_pretrained(folder)
    with LocalHub() as hub:
        for repo_id, folder in folders.items():
            push_folder(hub, repo_id, folder)
        env = {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0"}
        for repo_id in folders:
            result = subprocess.run([sys.executable, "-m", "insub_hf_cli", "score", "--model", repo_id, "--dataset",
                                     str(data), "--knn_k", "5", "--output_dir", str(tmp_path / repo_id)],
                                    env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
            assert result.returncode == 0, result.stderr[-3000:]
    rng = np.random.default_rng(0)  # the default OOD set: the test tweets with their words shuffled (seed 0)
    train_texts, test_texts = list(tweets.select(range(60))["text"]), list(tweets.select(range(60, 90))["text"])
    shuffled = [" ".join(rng.permutation(text.split())) for text in test_texts]
    for repo_id, folder in folders.items():
        results = json.loads((tmp_path / repo_id / "results.json").read_text())
        assert results["modality"] == "text" and results["texts"] == {"train": 60, "test": 30, "ood": 30}
        assert results["ood_dataset"] == "shuffled words"
        # an InSub model whose spread has a direction but no calibrated fit serves no `uncertainty` to score
        assert set(results["ood"]) == {"msp", "knn"}

        # the k-NN AUROC again from the model loaded by path: mean pooling (InSub: its representation), cosine
        # distance to the 5th nearest training text, sklearn's AUROC with the shuffled texts positive
        model = AutoModel.from_pretrained(folder).eval()

        def embed(texts):
            batch = tokenizer(texts, padding=True, truncation=True, max_length=128, return_tensors="pt")
            with torch.no_grad():
                out = model(**batch)
            if "insub" in repo_id:
                return out.representation.numpy()
            mask = batch["attention_mask"][..., None].float()
            return ((out.last_hidden_state * mask).sum(1) / mask.sum(1)).numpy()

        unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
        train = unit(embed(train_texts))
        kth = lambda q: 1 - np.sort(unit(embed(q)) @ train.T, axis=1)[:, -5]  # noqa: E731
        labels = np.r_[np.zeros(30), np.ones(30)]
        expected = roc_auc_score(labels, np.r_[kth(test_texts), kth(shuffled)])
        assert results["ood"]["knn"] == pytest.approx(expected, abs=1e-6)
        index = yaml.safe_load((tmp_path / repo_id / "model_index.yaml").read_text())
        assert index["model-index"][0]["results"][0]["task"]["type"] == "text-classification"


def test_data_with_neither_an_image_nor_a_text_column_is_refused_naming_its_columns(tmp_path, data, capsys):
    line = cli_error(["score", "--model", "someone/x", "--dataset", str(data), "--image_column", "picture",
                      "--output_dir", str(tmp_path / "o")], capsys)
    assert ("split 'train' has neither the image column 'picture' nor the text column 'text'; its columns are "
            "['image', 'label']") in line


def test_each_bad_model_or_flag_is_refused_in_one_line_before_any_work(tmp_path, data, capsys, monkeypatch):
    from datasets import Dataset, DatasetDict

    from ..objectives.test_scd import save_tiny_bert

    folders = models(tmp_path)
    out = tmp_path / "out"
    flags = ["--dataset", str(data), "--output_dir", str(out)]
    # offline, a repo id not in the cache: named, with offline mode and the way out
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    line = cli_error(["score", "--model", "someone/not-cached", *flags], capsys)
    assert "ScoreArguments.model='someone/not-cached': HF_HUB_OFFLINE=1 is set and the repo is not in the" in line
    monkeypatch.undo()
    line = cli_error(["score", "--model", "./no_such_folder", *flags], capsys)
    assert "ScoreArguments.model='./no_such_folder': no such local folder" in line
    (tmp_path / "config_only").mkdir()
    (folders["someone/tiny-vit"] / "config.json").rename(tmp_path / "config_only" / "config.json")
    line = cli_error(["score", "--model", str(tmp_path / "config_only"), *flags], capsys)
    assert "holds a config.json but no weights" in line
    line = cli_error(["score", "--model", str(tmp_path), *flags], capsys)
    assert "the folder holds no config.json" in line
    # a text model given images, an image model given texts: the modality, not a library's missing file
    bert = save_tiny_bert(tmp_path / "bert")
    line = cli_error(["score", "--model", str(bert), *flags], capsys)
    assert f"ScoreArguments.model={str(bert)!r} has no image processor, so it does not read images" in line
    texts = tmp_path / "texts"
    rows = Dataset.from_dict({"text": ["a good day", "a bad day"] * 10, "label": [1, 0] * 10})
    DatasetDict(train=rows, test=rows).save_to_disk(str(texts))
    line = cli_error(["score", "--model", str(folders["someone/tiny-insub"]), "--dataset", str(texts),
                      "--output_dir", str(out), "--knn_k", "5"], capsys)
    assert "has no tokenizer, so it does not read texts" in line
    # k larger than the training rows read, and an output_dir that is a file: named by flag, before encoding
    line = cli_error(["score", "--model", str(folders["someone/tiny-insub"]), *flags, "--knn_k", "100"], capsys)
    assert "ScoreArguments.knn_k=100 is more than the 60 training rows of split 'train': give --knn_k 60" in line
    (tmp_path / "a_file").write_text("")
    line = cli_error(["score", "--model", str(folders["someone/tiny-insub"]), "--dataset", str(data),
                      "--output_dir", str(tmp_path / "a_file")], capsys)
    assert "ScoreArguments.output_dir=" in line and "is a file" in line
    assert not out.exists()  # none of them wrote anything
    # the model as the first argument, as the docstring writes `insub-hf score MODEL --dataset DATA`
    from insub_hf_cli import main

    assert main(["score", str(folders["someone/tiny-insub"]), *flags, "--knn_k", "5"]) == 0
    assert json.loads((out / "results.json").read_text())["model"] == str(folders["someone/tiny-insub"])


def test_a_folder_of_class_sub_folders_is_split_k_chosen_and_a_small_set_said(tmp_path, capsys):
    """As the help describes the data: class sub-folders and no test split (a seeded fifth is drawn, said), no
    --knn_k (chosen from the rows, said), and 5 + 5 inputs: each AUROC with its interval, and a line saying how
    little so few measure."""
    from PIL import Image

    from insub_hf_cli import main

    folders = models(tmp_path)
    rng = np.random.default_rng(0)
    for name in ("circle", "square", "cross"):
        (tmp_path / "shapes" / name).mkdir(parents=True)
        for i in range(8):
            Image.fromarray(rng.integers(0, 256, (28, 28), dtype=np.uint8), mode="L").save(
                tmp_path / "shapes" / name / f"{i}.png")
    out = tmp_path / "out"
    assert main(["score", str(folders["someone/tiny-insub"]), "--dataset", str(tmp_path / "shapes"), "--output_dir",
                 str(out)]) == 0
    printed = capsys.readouterr().out
    assert ("has one split ('train', 24 rows) and no 'test': 5 of its rows drawn at random (seed 0, stratified by "
            "label) are the test split, the other 19 the 'train' split") in printed
    assert "[score] k-NN distance to the 18-th nearest of 19 training rows (--knn_k sets it)" in printed
    results = json.loads((out / "results.json").read_text())
    assert results["images"] == {"train": 19, "test": 5, "ood": 5} and results["knn_k"] == 18
    for name, (low, high) in results["ood_interval"].items():
        assert low <= results["ood"][name] <= high
    assert "an AUROC of fewer than 50 a side measures little" in printed
    low, high = results["ood_interval"]["knn"]
    assert f"knn {100 * results['ood']['knn']:.1f} % ({100 * low:.1f}-{100 * high:.1f})" in printed


def test_an_image_past_pils_size_limit_is_refused_naming_the_file_before_any_work(tmp_path, capsys, monkeypatch):
    from PIL import Image

    from ..conftest import cli_error

    (tmp_path / "shapes" / "big").mkdir(parents=True)
    Image.new("L", (100, 100)).save(tmp_path / "shapes" / "big" / "huge.png")
    Image.new("L", (10, 10)).save(tmp_path / "shapes" / "big" / "small.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 2_000)  # 10,000 pixels: past twice the limit, as 400 MP is
    folders = models(tmp_path)
    line = cli_error(["score", str(folders["someone/tiny-insub"]), "--dataset", str(tmp_path / "shapes"),
                      "--output_dir", str(tmp_path / "out")], capsys)
    assert f"ScoreArguments.dataset: {tmp_path / 'shapes' / 'big' / 'huge.png'} is too large for PIL to open" in line
    assert "downscale it" in line and not (tmp_path / "out").exists()


def test_the_help_shows_the_forms_that_work(capsys):
    from insub_hf_cli import main

    with pytest.raises(SystemExit):
        main(["score", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Required, or the first argument (`insub-hf score MODEL --dataset DATA`)" in text
    assert "`insub-hf score MODEL --dataset DATA`: any image or text encoder" in text
    assert ("a folder with one folder of images per class (DATA/cat/1.png ...; or DATA/train/cat/... and "
            "DATA/test/cat/...)") in text
    assert "Data with one split only: a seeded fifth of it is the test split" in text


def test_fdr_lists_the_outlier_files_benjamini_hochberg_flags_and_is_refused_where_it_cannot_act(tmp_path, capsys):
    """An image folder whose test split holds 12 images like the training ones and 4 blank ones: `--fdr 0.2` lists
    the files that Benjamini-Hochberg flags on the p-values of the model loaded by path (computed here again), in
    outliers.json and the output; an unfitted model or an fdr outside (0, 1) is refused before any work."""
    from PIL import Image

    from insub_hf import InSubModel
    from insub_hf.jobs.score import Encoder, ScoreArguments, _split, load_data
    from insub_hf.uncertainty.pvalues import conformal_pvalues, outliers_among
    from insub_hf_cli import main

    folder = models(tmp_path)["someone/tiny-insub"]
    rng = np.random.default_rng(0)
    for split, count in (("train", 30), ("test", 6)):
        for name in ("a", "b"):
            (tmp_path / "images" / split / name).mkdir(parents=True)
            for i in range(count):
                Image.fromarray(rng.integers(0, 256, (28, 28), dtype=np.uint8), mode="L").save(
                    tmp_path / "images" / split / name / f"{i}.png")
    for i in range(4):
        Image.fromarray(np.zeros((28, 28), dtype=np.uint8), mode="L").save(tmp_path / "images/test/b" / f"blank{i}.png")
    images = str(tmp_path / "images")
    assert "serves no calibrated `uncertainty`" in cli_error(["score", str(folder), "--dataset", images, "--fdr", "0.1"],
                                                             capsys)
    assert "ScoreArguments.fdr" in cli_error(["score", str(folder), "--dataset", images, "--fdr", "1.5"], capsys)
    model = InSubModel.from_pretrained(folder)
    args = ScoreArguments(model=str(folder), dataset=images, knn_k=5, output_dir=str(tmp_path / "out"))
    train_images = _split(load_data(args.dataset, args), "train", args, 60)[0]
    model.fit_uncertainty(dict(Encoder(args).processor(images=train_images, return_tensors="pt")), k=5)
    model.save_pretrained(folder, remote_code=True)
    assert main(["score", str(folder), "--dataset", args.dataset, "--knn_k", "5", "--fdr", "0.2", "--output_dir",
                 args.output_dir]) == 0
    test_images = _split(load_data(args.dataset, args), "test", args, 100)[0]
    _, uncertainty = Encoder(args)(test_images)
    expected = np.flatnonzero(outliers_among(conformal_pvalues(uncertainty, InSubModel.from_pretrained(folder)), 0.2))
    listed = json.loads((tmp_path / "out" / "outliers.json").read_text())
    assert [entry["row"] for entry in listed["flagged"]] == expected.tolist() and listed["tested"] == 16
    assert [entry["input"] for entry in listed["flagged"]] == [test_images[i].filename for i in expected]
    assert any("blank" in entry["input"] for entry in listed["flagged"])
    printed = capsys.readouterr().out
    assert f"[score] --fdr 0.2: {len(expected)} of the 16 test inputs flagged as outliers" in printed
    assert all(entry["input"] in printed for entry in listed["flagged"])


@pytest.mark.parametrize("case", ["one class", "other classes", "ood is the data"])
def test_data_that_cannot_be_scored_as_given_is_refused_naming_why(tmp_path, capsys, case):
    from PIL import Image

    folder = models(tmp_path)["someone/tiny-insub"]
    rng = np.random.default_rng(0)
    classes = {"one class": {"train": ["cat"], "test": ["cat"]},
               "other classes": {"train": ["cat", "dog"], "test": ["cat", "owl"]},
               "ood is the data": {"train": ["cat", "dog"], "test": ["cat", "dog"]}}[case]
    for split, names in classes.items():
        for name in names:
            (tmp_path / "images" / split / name).mkdir(parents=True)
            for i in range(6):
                Image.fromarray(rng.integers(0, 256, (28, 28), dtype=np.uint8), mode="L").save(
                    tmp_path / "images" / split / name / f"{i}.png")
    data = str(tmp_path / "images")
    argv = ["score", str(folder), "--dataset", data, "--output_dir", str(tmp_path / "out")]
    if case == "ood is the data":
        argv += ["--ood_dataset", data + "/"]
    said = cli_error(argv, capsys)
    expected = {"one class": "split 'train' has no labels: an image folder gives them by its class sub-folders, and "
                             "this one has one class only",
                "other classes": "its 'test' split has classes its 'train' split lacks (['owl'])",
                "ood is the data": "ScoreArguments.ood_dataset="}[case]
    assert expected in said, said
    if case == "ood is the data":
        assert "is the in-distribution data itself (--dataset)" in said


@pytest.mark.parametrize("case", ["no images", "no such folder", "one image", "ood has no images"])
def test_data_that_cannot_load_is_refused_naming_the_flag_before_any_work(tmp_path, capsys, case):
    from PIL import Image

    folder = models(tmp_path)["someone/tiny-insub"]
    (tmp_path / "images" / "train" / "cat").mkdir(parents=True)
    (tmp_path / "images" / "train" / "cat" / "notes.txt").write_text("not an image")
    if case in ("one image", "ood has no images"):
        for i in range(1 if case == "one image" else 6):
            Image.new("L", (28, 28), color=i).save(tmp_path / "images" / "train" / "cat" / f"{i}.PNG")
    (tmp_path / "empty").mkdir()
    data = {"no such folder": str(tmp_path / "nope")}.get(case, str(tmp_path / "images"))
    argv = ["score", str(folder), "--dataset", data, "--output_dir", str(tmp_path / "out")]
    if case == "ood has no images":
        argv += ["--ood_dataset", str(tmp_path / "empty")]
    said = cli_error(argv, capsys)
    expected = {"no images": f"ScoreArguments.dataset={data!r}: the folder holds no images and no dataset_dict.json",
                "no such folder": f"ScoreArguments.dataset={data!r}: no such local folder",
                "one image": f"ScoreArguments.dataset={data!r}: its one split 'train' has 1 row(s)",
                "ood has no images": f"ScoreArguments.ood_dataset={str(tmp_path / 'empty')!r}: the folder holds no "
                                     "images"}[case]
    assert expected in said, said
    assert "give" in said and not (tmp_path / "out").exists()

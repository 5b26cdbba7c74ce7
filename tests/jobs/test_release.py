"""`insub-hf release RECIPE` end to end at a tiny budget: the recipe's job, the detector, a checked Hub folder whose
card carries this run's numbers, how it was made and how InSub compares with its baseline, copied to model_cards/."""

import contextlib
import io
import json
import re
import time
from types import SimpleNamespace

import pytest
import torch
import yaml
from huggingface_hub import ModelCard

from insub_hf import InSubModel, InSubOODDetector
from insub_hf.evaluation.metrics.ood import ood_auroc
from insub_hf.hub import check_hub_folder, machine_paths
from insub_hf.jobs.compare import ComparisonArguments
from insub_hf.jobs.comparison import load_protocol_data
from insub_hf.release.publish import fits_the_repository
from insub_hf.jobs.genomics import dna_parts, dna_windows
from insub_hf.release.build import reproducing
from insub_hf_cli import main

from ..conftest import cli_error

# The tiny builds of the text and DNA releases
TEXT_FLAGS = ["--max_sentences", "48", "--transfer_sentences", "30", "--folds", "2", "--per_device_train_batch_size",
              "16", "--head_size", "16", "--num_heads", "2", "--detector_bank", "48", "--k", "10"]
DNA_FLAGS = ["--num_train_epochs", "1", "--conv_filters", "8", "--lstm_hidden_size", "8", "--finetune_epochs", "1",
             "--per_device_train_batch_size", "16", "--crop_length", "60"]


def tiny_dna_files(folder):
    """(a FASTA of 48 random sequences of 200 nt, a CSV of 40 labelled 60-nt ones) written into `folder`, seeded."""
    rng = torch.Generator().manual_seed(0)
    bases = lambda n: "".join("ACGT"[i] for i in torch.randint(0, 4, (n,), generator=rng))  # noqa: E731
    fasta = folder / "upstream.fa"
    fasta.write_text("".join(f">seq{i}\n{bases(200)}\n" for i in range(48)))
    labelled = folder / "labelled.csv"
    labelled.write_text("sequence,label\n" + "".join(f"{bases(60)},{'ab'[i % 2]}\n" for i in range(40)))
    return fasta, labelled

pytestmark = pytest.mark.slow


def card_metrics(readme) -> dict[str, float]:
    meta = yaml.safe_load(readme.read_text().split("---")[1])
    (entry,) = meta["model-index"]
    return {m["name"]: m["value"] for result in entry["results"] for m in result["metrics"]}


def check_release(out, cards, name: str, command: str) -> str:
    """The common checks of a release folder; returns its card."""
    folder = out / "hub"
    files = check_hub_folder(folder)  # complete, pickle-free, nothing of this machine
    assert {"model.safetensors", "README.md"} <= set(files)  # one weights file: the bank is in it
    assert not [f for f in files if f.startswith("ood_detector")]
    card = (folder / "README.md").read_text()
    # the card that goes to git, with the files it describes when they fit the repository (the text model's base
    # does not: then its first lines say how to build the folder, and how long that took)
    in_git = sorted(str(p.relative_to(cards / name)) for p in (cards / name).rglob("*") if p.is_file())
    fits = fits_the_repository([folder / f for f in files])
    kept = (cards / name).joinpath("README.md").read_text()
    if not fits:
        notice = re.search(r"\n> \*\*This folder holds the model's card only\*\*.*?\n\n", kept, flags=re.S)
        assert notice and f"`{command.split(' --')[0]}" in notice.group(0), kept[:3000]
        assert kept.index(notice.group(0)) < kept.index("is an **InSub** model")  # its first lines
        kept = kept.replace(notice.group(0), "\n", 1)
    assert kept == card
    # a card kept alone carries the config.json and configuration module whose loading says how to build it
    assert in_git == (files if fits else ["README.md", "config.json", "configuration_insub.py"]), in_git
    assert f"Made by `{command}` at insub-hf " in card and "seed 0" in card and "min wall time" in card
    assert "InSub against its baseline" in card
    assert not any(path in card for path in machine_paths()) and "hf_secret" not in card
    return card


def test_the_image_release_publishes_the_compared_insub_model_with_its_detector(tmp_path):
    out, cards = tmp_path / "image", tmp_path / "cards"
    flags = ["--data_source", "bundled", "--train_per_class", "8", "--test_per_class", "4", "--ood_images", "20",
             "--num_train_epochs", "1", "--per_device_train_batch_size", "20", "--width", "0.0625",
             "--head_hidden_size", "16", "--num_heads", "2", "--probe_epochs", "2"]
    assert main(["release", "image", "--output_dir", str(out), "--model_cards", str(cards), "--hub_token",
                 "hf_secret", *flags]) == 0
    card = check_release(out, cards, "insub-resnet10-fashion-mnist", "insub-hf release image " + " ".join(flags))
    results = json.loads((out / "results.json").read_text())
    trained = sum(row["cost"]["pretraining_seconds"] for row in results["rows"]) / 60
    # the card's label-free rows are the shipped model's (its bank of half the 80 training images, the other half
    # calibrating), which the folder's files give
    metrics = card_metrics(out / "hub" / "README.md")
    assert "OOD AUROC vs mnist (k-NN to the shipped 40-image bank, label-free)" in metrics
    assert "OOD AUROC vs mnist (calibrated uncertainty, label-free, the model's own)" in metrics
    assert not any(name.endswith("(k-NN, label-free)") for name in metrics)
    assert f"the pretraining of the baseline and InSub took {trained:.1f} min of training steps" in card
    assert results["args"]["methods"] == ["baseline", "insub"]  # the release recipe's: InSub beside its baseline
    insub = next(r for r in results["rows"] if r["method"] == "insub")
    # the release computes what its card shows: no corruptions, no semi-supervised probes
    assert all(not row["corruptions"] and not row.get("semi_supervised") for row in results["rows"]), insub.keys()
    baseline = next(r for r in results["rows"] if r["method"] == "baseline")
    metrics = card_metrics(out / "hub" / "README.md")
    assert metrics["Accuracy"] == round(insub["test"]["accuracy"], 4)  # the InSub row's numbers, not the baseline's
    assert f"| accuracy | {100 * baseline['test']['accuracy']:.2f} % | {100 * insub['test']['accuracy']:.2f} % |" in card
    block = json.loads((out / "hub" / "config.json").read_text())["uncertainty"]
    # the calibrated reading, fitted by the release: half the training images its bank, k under the bank's rows
    assert block["reading"] == "calibrated" and (block["bank_size"], block["k"]) == (40, 39)
    assert block["calibration_size"][1] == 40 and block["components"][0] == "knn"
    assert "The weights hold a k-NN bank: the representations of 40 inputs, searched at the\n39-th" in card
    assert "is **calibrated, in [0, 1]**" in card and "`model.fit_uncertainty(your_inputs)` makes the bank" in card
    model = InSubModel.from_pretrained(out / "hub").eval()
    data = load_protocol_data(ComparisonArguments(**{k: v for k, v in results["args"].items()
                                                      if k in ComparisonArguments.__dataclass_fields__})).evaluation
    test = InSubOODDetector(model).score(data.inputs(data.test_images))
    mnist = InSubOODDetector(model).score(data.inputs(data.ood_images["mnist"]))
    for reading, label in (("knn", "k-NN to the shipped 40-image bank, label-free"),
                           ("uncertainty", "calibrated uncertainty, label-free, the model's own")):
        auroc = ood_auroc(test[reading], mnist[reading], higher_is_in=False)  # the folder gives it
        assert metrics[f"OOD AUROC vs mnist ({label})"] == pytest.approx(auroc, abs=1e-4)
    # the threshold section: the line, and the share of the 40 test images the folder's model flags
    rate = (test["uncertainty"] > 0.95).double().mean().item()
    assert "`flagged = out.uncertainty > 0.95`" in card
    assert f"Measured on 40 fashion_mnist test images: **{100 * rate:.1f} %** flagged." in card
    assert "datasets:\n- zalando-datasets/fashion_mnist" in card


@pytest.fixture(scope="module")
def pushed_text_release(tmp_path_factory):
    """One tiny `insub-hf release text --push_to_hub` to a Hub on 127.0.0.1, as a maintainer would push it, with
    what it printed, how long it took and what its card's snippets gave run as written in a fresh process without
    insub-hf. Two tests read it: what the folder holds, and that a second build of the same commit agrees."""
    from huggingface_hub import HfApi

    from ..card_snippets import run_card_snippets
    from ..hub_server import LocalHub
    from ..objectives.test_scd import save_tiny_bert

    tmp_path = tmp_path_factory.mktemp("text_release")
    base = save_tiny_bert(tmp_path / "tiny_bert")
    out, cards = tmp_path / "text", tmp_path / "cards"
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as monkeypatch, LocalHub() as hub:
        monkeypatch.setattr("insub_hf.jobs.heartbeat.HEARTBEAT_SECONDS", 2.0)  # 30 s in a real build
        monkeypatch.setattr("insub_hf.hub.upload.HfApi", lambda token=None: HfApi(endpoint=hub.endpoint, token=token))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        started = time.time()
        with contextlib.redirect_stdout(printed):
            assert main(["release", "text", "--encoder", str(base), "--output_dir", str(out), "--model_cards",
                         str(cards), *TEXT_FLAGS, "--push_to_hub", "--hub_token", "hf_test", "--hub_model_id",
                         "org/insub-minilm-scd"]) == 0
        seconds = time.time() - started
        assert list(hub.repos) == ["org/insub-minilm-scd"]
        outputs = run_card_snippets("org/insub-minilm-scd", hub.endpoint, tmp_path)
    return SimpleNamespace(tmp_path=tmp_path, base=base, out=out, cards=cards, printed=printed.getvalue(),
                           seconds=seconds, outputs=outputs)


def test_the_text_release_is_an_unfitted_sentence_transformers_folder_with_what_fitting_gives(pushed_text_release):
    """The pushed folder (`pushed_text_release`): the card names the pushed repo and each of its snippets runs as
    written in a fresh process without insub-hf, giving what the folder's model gives. The folder serves no
    `uncertainty` until fitted on a user's sentences, its card leading with that line and what it gave."""
    from transformers import AutoTokenizer

    release = pushed_text_release
    tmp_path, out, cards, outputs, seconds = (release.tmp_path, release.out, release.cards, release.outputs,
                                              release.seconds)
    flags = TEXT_FLAGS
    card = check_release(out, cards, "insub-minilm-scd", "insub-hf release text --encoder tiny_bert " + " ".join(flags))
    assert ModelCard.load(out / "hub" / "README.md").data.library_name == "sentence-transformers"
    assert (out / "hub" / "modules.json").is_file()
    config = json.loads((out / "hub" / "config.json").read_text())
    # the per-sentence uncertainty scored as a representation's (R-AUROC on the tweets), beside the 1-NN distance
    results = json.loads((out / "results.json").read_text())["results"]
    # heads over a frozen encoder (the recipe): the three models share one encoder, whose transfer ran once
    transfer = [{k: v for k, v in per_task["TWEETS"].items() if k in ("accuracy", "ece", "nll")}
                for per_task in results.values()]
    assert len(transfer) == 3 and transfer[0] == transfer[1] == transfer[2] and set(transfer[0]) == {"accuracy",
                                                                                                    "ece", "nll"}
    printed = release.printed
    assert printed.count("[text] transfer of ") == 3 and printed.count("measured above (the same weights)") == 2
    # a line every 2 s whatever stage ran, the last one at most 2 s before the build ended
    beats = [int(line.split(": ")[-1][:-2]) for line in printed.splitlines()
             if line.startswith("[release text] still running: ")]
    assert beats and beats == sorted(beats) and len(beats) >= int(seconds / 2) - 2, (beats, seconds)
    tweets = results["scd_insub_m2"]["TWEETS"]
    assert {"r_auroc_uncertainty", "r_auroc_nn_distance"} <= set(tweets)
    assert all(v is None or 0 <= v <= 1 for v in (tweets["r_auroc_uncertainty"], tweets["r_auroc_nn_distance"]))
    # the single readings with the fixed bank, the one chosen on validation data marked, measured on test data
    measured = json.loads((out / "text_uncertainty.json").read_text())
    assert measured["reading"] == "knn" and set(measured["test"]["readings"]) == {"spread", "spread_by_length", "knn",
                                                                                   "length"}
    knn = measured["test"]["readings"]["knn"]
    assert "### Each single reading with a fixed bank" in card and f"| {100 * knn['mean_ood_auroc']:.1f} % |" in card
    assert f"| {knn['length_spearman']:.2f} |" in card and "**k-NN distance** (chosen)" in card
    elsewhere = measured["second_domain"]  # a second domain of English, with the fixed bank and with its own
    assert set(elsewhere["own"]) == set(elsewhere["shipped"])
    row = "| your own (2000 sentences of the domain) | " + " | ".join(
        f"{100 * v:.1f} %" for v in elsewhere["own"].values()) + " |"
    assert "#### Your data, your bank" in card and row in card
    # the fixed bank: 48 sentences of the pinned pool, in equal parts, the pool's digest on the card
    from insub_hf.data.broad_text import pool_digest

    assert measured["bank_sources"] == {"messages": 10, "dictionary": 10, "quotations": 10, "documentation": 9,
                                        "licences": 9, "pool sha256": pool_digest()}
    assert f"`insub_hf/data/bundled/broad_english.csv.gz`, SHA-256 {pool_digest()}" in card
    # what fitting gave, on the pretraining tweets and on docstrings (48 rows at most each: --detector_bank)
    fitted = json.loads((out / "text_fitted.json").read_text())
    assert set(fitted) == {"tweets", "docstrings"}
    assert (fitted["tweets"]["bank"], fitted["tweets"]["calibration"], fitted["tweets"]["inside"]) == (48, 48, 48)
    assert "shuffled" in fitted["tweets"]["sets"] and "english_prose" not in fitted["docstrings"]["sets"]
    for title, numbers in (("### Fitted on the pretraining sentences", fitted["tweets"]),
                           ("### Fitted on another domain: the standard library's docstrings", fitted["docstrings"])):
        section = card.split(title)[1].split("###")[0]
        assert f"**{100 * numbers['flag_rate']:.1f} %** flagged" in section
        shuffled = numbers["sets"]["shuffled"]["uncertainty"]
        assert f"| shuffled | {100 * shuffled['auroc']:.1f} % | {100 * shuffled['fpr95']:.1f} % |" in section
    # shipped unfitted: no bank, no direction; the card leads with the one line that fits it
    assert config["uncertainty"]["reading"] == "spread" and config["uncertainty"]["direction"] is None
    assert config["uncertainty"]["bank_size"] == 0
    intro = " ".join(card.split("## Training data")[0].split())
    assert "The model's `uncertainty` output is **None**: no reading was fitted for this model" in intro
    assert "model[0].fit_uncertainty(" in card.split("With transformers alone")[0]
    modules = json.loads((out / "hub" / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[1] for m in modules] == ["InSubSentenceTransformer", "Normalize"]
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    tokenizer = AutoTokenizer.from_pretrained(out / "hub")
    sentences = ["A tweet about the weather today.", "zzkq vvv 0193 ACGT", "I love this!"]
    with torch.no_grad():
        auto = AutoModel.from_pretrained(out / "hub").eval()
        assert auto(**tokenizer(sentences, padding=True, return_tensors="pt")).uncertainty is None
    # the card's snippets: sentence-transformers fits on its 60 sentences and serves what the same fit here serves;
    # AutoModel's `uncertainty` is None (not a tensor)
    st = SentenceTransformer(str(out / "hub"), trust_remote_code=True)
    with pytest.raises(KeyError, match=r"not fitted yet.*model\[0\]\.fit_uncertainty\(your_sentences\)"):
        st.encode(sentences, output_value="uncertainty")  # said, not a bare KeyError
    st[0].fit_uncertainty([f"{'Your ' * (i % 12 + 1)}{i}" for i in range(200)])
    card_sentences = ["A sentence to embed.", "Another one."]
    torch.testing.assert_close(outputs["0:uncertainty"], torch.stack(st.encode(card_sentences,
                                                                               output_value="uncertainty")),
                               rtol=1e-5, atol=1e-6)
    assert "1:features" in outputs and "1:uncertainty" not in outputs
    # one number on every path once fitted: AutoModel of the saved fitted folder gives what sentence-transformers gives
    st.save(str(tmp_path / "fitted"))
    with torch.no_grad():
        through_auto = AutoModel.from_pretrained(tmp_path / "fitted").eval()(
            **tokenizer(sentences, padding=True, return_tensors="pt")).uncertainty
    torch.testing.assert_close(through_auto, torch.stack(st.encode(sentences, output_value="uncertainty")),
                               rtol=1e-5, atol=1e-6)


def test_the_dna_release_transfers_to_labelled_sequences(tmp_path):
    fasta, labelled = tiny_dna_files(tmp_path)
    out, cards = tmp_path / "dna", tmp_path / "cards"
    flags = DNA_FLAGS
    assert main(["release", "dna", "--pretrain_fasta", str(fasta), "--labelled", str(labelled), "--output_dir",
                 str(out), "--model_cards", str(cards), *flags]) == 0
    check_release(out, cards, "insub-genomenet-dm3",
                         "insub-hf release dna --pretrain_fasta upstream.fa --labelled labelled.csv " + " ".join(flags))
    results = json.loads((out / "results.json").read_text())
    assert card_metrics(out / "hub" / "README.md")["Accuracy (linear_probe)"] == round(
        results["results"]["insub_m5"]["linear_probe"]["accuracy"], 4)
    # the calibrated reading: its bank the windows of 28 sequences, its calibration those of 10 others, measured on
    # the 30 windows of 10 more, which the folder's model flags as the card says
    block = json.loads((out / "hub" / "config.json").read_text())["uncertainty"]
    assert block["reading"] == "calibrated" and (block["bank_size"], block["calibration_size"][1]) == (84, 30)
    card = (out / "hub" / "README.md").read_text()
    sequences = [line for line in fasta.read_text().splitlines() if not line.startswith(">")]
    bank, calibration, test = dna_parts(sequences, seed=0)
    assert (len(bank), len(calibration), len(test)) == (28, 10, 10) and not set(test) & set(bank + calibration)
    held_out = dna_windows(test, 60)
    uncertainty = InSubOODDetector(InSubModel.from_pretrained(out / "hub").eval()).score(
        {"dna_one_hot": held_out})["uncertainty"]
    rate = (uncertainty > 0.95).double().mean().item()
    assert (f"Measured on 30 windows of 20 % of the pretraining sequences, drawn at random (never fitted on): "
            f"**{100 * rate:.1f} %**") in card
    assert "| uniform random | " in card and "| shuffled bases | " in card


def test_a_release_built_twice_from_one_commit_gives_the_same_card_numbers(tmp_path):
    """Two tiny DNA builds: every model-index number and the threshold section agree; only the wall time differs."""
    fasta, labelled = tiny_dna_files(tmp_path)
    flags = DNA_FLAGS
    cards = []
    for build in ("first", "second"):
        assert main(["release", "dna", "--pretrain_fasta", str(fasta), "--labelled", str(labelled), "--output_dir",
                     str(tmp_path / build), "--model_cards", str(tmp_path / f"cards_{build}"), *flags]) == 0
        cards.append(tmp_path / build / "hub" / "README.md")
    assert card_metrics(cards[0]) == card_metrics(cards[1])
    sections = [c.read_text().split("## Flagging unusual inputs")[1].split("## Usage")[0] for c in cards]
    assert sections[0] == sections[1] and "flagged" in sections[0]


@pytest.mark.slow
def test_the_text_release_built_twice_from_one_commit_gives_the_same_card_numbers(pushed_text_release, tmp_path,
                                                                                 monkeypatch):
    """A second tiny text build (not pushed) beside the pushed one: the model-index, the fixed bank's readings and
    what fitting gave agree. This one is kept as the full-size build is, its card alone in model_cards/, with the
    files whose loading says how to build it."""
    from insub_hf.model.model_files import card_only_line

    monkeypatch.setattr("insub_hf.release.build.fits_the_repository", lambda files: False)
    assert main(["release", "text", "--encoder", str(pushed_text_release.base), "--output_dir", str(tmp_path / "again"),
                 "--model_cards", str(tmp_path / "cards"), *TEXT_FLAGS]) == 0
    builds = [pushed_text_release.out, tmp_path / "again"]
    assert card_metrics(builds[0] / "hub" / "README.md") == card_metrics(builds[1] / "hub" / "README.md")
    for name in ("text_uncertainty.json", "text_fitted.json"):
        assert json.loads((builds[0] / name).read_text()) == json.loads((builds[1] / name).read_text()), name
    kept = tmp_path / "cards" / "insub-minilm-scd"
    assert sorted(p.name for p in kept.iterdir()) == ["README.md", "config.json", "configuration_insub.py"]
    assert re.fullmatch(r"insub-minilm-scd holds the card of insub-minilm-scd only \(its files are over the "
                        r"repository's size limits\), no model: `insub-hf release text --[^`]*` builds it into "
                        r"runs/release/text/hub in about \d+ min on a 2-core CPU machine \(quiet\); load that "
                        r"folder, or the Hub repo it was pushed to\.", card_only_line(kept)), card_only_line(kept)
    assert "> **This folder holds the model's card only**" in (kept / "README.md").read_text()


def test_the_command_a_card_names_leaves_out_where_it_went_and_who_pushed():
    argv = ["--output_dir", "/home/me/runs", "--num_train_epochs", "6", "--hub_token=hf_x", "--push_to_hub",
            "--model_cards", "cards", "--seed", "1", "--labelled", "/home/me/splice.csv", "--replace_card", "true",
            "--hub_model_id", "insub-hf/x"]
    assert reproducing(argv) == ["--num_train_epochs", "6", "--seed", "1", "--labelled", "splice.csv"]


def test_an_unknown_text_uncertainty_is_refused_naming_the_readings(tmp_path, capsys):
    error = cli_error(["release", "text", "--uncertainty", "entropy", "--output_dir", str(tmp_path / "no")], capsys)
    assert "--uncertainty: invalid choice: 'entropy' (choose from 'spread', 'spread_by_length', 'knn')" in error
    assert not (tmp_path / "no").exists()


def test_an_unknown_recipe_is_refused_naming_the_recipes(capsys):
    error = cli_error(["release", "audio"], capsys)
    assert re.search(r"RECIPE must be one of \['dna', 'image', 'text'\].*got 'audio'", error)


def test_a_pushed_release_card_names_its_repo_and_every_snippet_runs_as_written(tmp_path, monkeypatch):
    """After `insub-hf release dna --push_to_hub` (no --hub_model_id) to a Hub on 127.0.0.1, the repo takes the
    release's name under the token's account, the card names that repo, and each of its snippets runs as written in
    a fresh process without insub-hf; the detector snippet gives the detector's own `knn` score."""
    from huggingface_hub import HfApi

    from ..card_snippets import run_card_snippets
    from ..hub_server import LocalHub

    rng = torch.Generator().manual_seed(0)
    bases = lambda n: "".join("ACGT"[i] for i in torch.randint(0, 4, (n,), generator=rng))  # noqa: E731
    fasta, labelled = tmp_path / "upstream.fa", tmp_path / "labelled.csv"
    fasta.write_text("".join(f">seq{i}\n{bases(200)}\n" for i in range(48)))
    labelled.write_text("sequence,label\n" + "".join(f"{bases(60)},{'ab'[i % 2]}\n" for i in range(40)))
    out = tmp_path / "dna"
    with LocalHub() as hub:
        monkeypatch.setattr("insub_hf.hub.upload.HfApi", lambda token=None: HfApi(endpoint=hub.endpoint, token=token))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        assert main(["release", "dna", "--pretrain_fasta", str(fasta), "--labelled", str(labelled), "--output_dir",
                     str(out), "--model_cards", str(tmp_path / "cards"), "--num_train_epochs", "1", "--conv_filters",
                     "8", "--lstm_hidden_size", "8", "--finetune_epochs", "1", "--per_device_train_batch_size", "16",
                     "--crop_length", "60", "--push_to_hub", "--hub_token", "hf_test"]) == 0
        assert list(hub.repos) == ["someone/insub-genomenet-dm3"]
        card = (out / "hub" / "README.md").read_text()
        assert card.count('"someone/insub-genomenet-dm3"') >= 2 and '"insub-genomenet-dm3"' not in card
        assert "pip install insub-hf" not in card
        assert card.count("```python") == 2
        outputs = run_card_snippets("someone/insub-genomenet-dm3", hub.endpoint, tmp_path)
    from insub_hf import InSubModel

    model = InSubModel.from_pretrained(out / "hub").eval()
    expected = InSubOODDetector(model).score({"dna_one_hot": outputs["1:dna_one_hot"]})["knn"]
    torch.testing.assert_close(outputs["1:knn"], expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(outputs["0:uncertainty"], model(dna_one_hot=outputs["0:dna_one_hot"]).uncertainty,
                               rtol=1e-5, atol=1e-6)


def test_what_model_cards_may_hold_is_decided_by_file_and_model_size(tmp_path):
    from insub_hf.release.publish import MAX_FILE_BYTES, MAX_MODEL_BYTES

    small, big = tmp_path / "small", tmp_path / "big"
    small.write_bytes(b"x" * MAX_FILE_BYTES)
    big.write_bytes(b"x" * (MAX_FILE_BYTES + 1))
    assert fits_the_repository([small]) and not fits_the_repository([big])
    assert MAX_MODEL_BYTES < 2 * MAX_FILE_BYTES and not fits_the_repository([small, small])  # 20.97 MB in all

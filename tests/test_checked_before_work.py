"""Nothing wrong is ever served (issue 57): flags checked before any work, pixels read by their range, resume means
the same run, a k-NN reading's k within its bank. Each refusal names the field and what is allowed."""

from __future__ import annotations

import json
import re

import pytest
import torch

from insub_hf import InSubForPreTraining, InSubTrainer, InSubTrainingArguments
from insub_hf.data.batch_views import BatchTwoViews
from insub_hf.evaluation.text_bench import TextBenchArguments
from insub_hf.uncertainty.knn import knn_distance

from .conftest import cli_error, tiny_config


# --- every flag checked before any work ----------------------------------------------------------------------------
@pytest.mark.parametrize("flag, value, message", [
    ("--seed", "-1", r"InSubTrainingArguments.seed must be an integer >= 0"),
    ("--dataloader_num_workers", "-1", r"InSubTrainingArguments.dataloader_num_workers must be an integer >= 0, got -1"),
    ("--gradient_accumulation_steps", "0", r"InSubTrainingArguments.gradient_accumulation_steps must be an integer >= 1"),
    ("--diversity_weight", "1e308", r"diversity_weight must be .*<= 10000.0, got 1e\+308"),
    ("--diversity_alpha", "50", r"diversity_alpha must be .*<= 10.0, got 50.0"),
])
def test_the_trainer_s_own_flags_are_refused_before_the_output_folder_is_written(flag, value, message, tmp_path,
                                                                                   capsys):
    out = tmp_path / "demo"
    line = cli_error(["demo", "--output_dir", str(out), flag, value], capsys)
    assert re.search(message, line), line
    assert not out.exists()


RELEASE = ["release", "image", "--data_source", "bundled", "--train_per_class", "2", "--num_train_epochs", "1"]


@pytest.mark.parametrize("extra, message", [
    (["--detector_bank", "0"], r"ReleaseArguments.detector_bank must be an integer >= 16, got 0"),
    (["--detector_bank", "3"], r"ReleaseArguments.detector_bank must be an integer >= 16, got 3"),
    (["--methods", "baseline", "ssl_ensemble"], r"methods=\['baseline', 'ssl_ensemble'\] lacks \['insub'\]"),
    (["--name", "../escaped"], r"ReleaseArguments.name must be one folder name \(no '/' or '..'\), got '../escaped'"),
])
def test_a_release_refuses_its_flags_before_it_trains(extra, message, tmp_path, capsys):
    out = tmp_path / "image"
    line = cli_error([*RELEASE, "--output_dir", str(out), "--model_cards", str(tmp_path / "cards"), *extra], capsys)
    assert re.search(message, line), line
    assert not (out / "results.json").exists() and not (tmp_path / "escaped").exists()


def test_a_release_keeps_a_published_card_and_refuses_a_file_as_the_cards_folder(tmp_path, capsys):
    cards = tmp_path / "cards"
    (cards / "insub-resnet10-fashion-mnist").mkdir(parents=True)
    published = cards / "insub-resnet10-fashion-mnist" / "README.md"
    published.write_text("the published card\n")
    line = cli_error([*RELEASE, "--output_dir", str(tmp_path / "out"), "--model_cards", str(cards)], capsys)
    assert "is a published card; a release replaces it only with --replace_card true" in line
    assert published.read_text() == "the published card\n"
    (tmp_path / "a_file").write_text("")
    line = cli_error([*RELEASE, "--output_dir", str(tmp_path / "out"), "--model_cards", str(tmp_path / "a_file")], capsys)
    assert "ReleaseArguments.model_cards=" in line and "is a file; it must be a folder" in line


# --- pixels read by their range ------------------------------------------------------------------------------------
def test_batch_views_refuse_float_images_in_0_255_and_normalisation_in_0_255_units():
    views = BatchTwoViews(8, (0.5,), (0.25,), num_channels=1)
    with pytest.raises(ValueError, match=r"BatchTwoViews: images must be float images in \[0, 1\].*0..255 pixels"):
        views(torch.rand(2, 1, 8, 8) * 255)
    first, second = views(torch.rand(2, 1, 8, 8))
    assert first.shape == second.shape == (2, 1, 8, 8)
    with pytest.raises(ValueError, match=r"BatchTwoViews.image_mean must be in \[0, 1\] .*got \[73.0\] \(0..255 units"):
        BatchTwoViews(8, (73.0,), (0.25,), num_channels=1)


# --- resume means the same run -------------------------------------------------------------------------------------
def two_view_rows(n: int = 8):
    generator = torch.Generator().manual_seed(0)
    return [{"pixel_values": torch.randn(3, 32, 32, generator=generator),
             "pixel_values_2": torch.randn(3, 32, 32, generator=generator)} for _ in range(n)]


@pytest.mark.parametrize("changed, field", [
    (dict(objective="vicreg", head_norm="none"), "objective"),
    (dict(diversity_alpha=0.5), "diversity_alpha"),
    (dict(diversity_weight=3.0), "diversity_weight"),
])
def test_the_trainer_refuses_to_resume_another_run_s_checkpoint(changed, field, tmp_path):
    args = InSubTrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=2, save_steps=2,
                                  use_cpu=True, report_to=[], seed=0)
    InSubTrainer(model=InSubForPreTraining(tiny_config(num_heads=2)), args=args, train_dataset=two_view_rows()).train()
    other = InSubTrainer(model=InSubForPreTraining(tiny_config(num_heads=2, **changed)),
                         args=InSubTrainingArguments(**{**args.to_dict(), "max_steps": 4}), train_dataset=two_view_rows())
    with pytest.raises(ValueError, match=rf"is another run's checkpoint \({field}: checkpoint .*, model .*\)"):
        other.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))


def test_channels_last_is_checked_again_when_training_starts(tmp_path, monkeypatch):
    import insub_hf.training.memory_format

    args = InSubTrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=1, use_cpu=True,
                                  report_to=[], channels_last=False)
    args.channels_last = True  # as if this CPU's kernels had been safe when the arguments were built
    monkeypatch.setattr(insub_hf.training.memory_format, "channels_last_hazard", lambda *a, **k: "ONEDNN_MAX_CPU_ISA=AVX2 caps "
                        "oneDNN below its AVX-512 kernels")
    from insub_hf import named_encoder
    from insub_hf import InSubConfig

    model = InSubForPreTraining(InSubConfig(encoder_config=named_encoder("resnet10_cifar", width=0.0625), num_heads=2,
                                            head_hidden_sizes=[8], head_output_size=4))
    trainer = InSubTrainer(model=model, args=args, train_dataset=two_view_rows())
    with pytest.raises(ValueError, match=r"InSubTrainingArguments.channels_last=True on the CPU: ONEDNN_MAX_CPU_ISA"):
        trainer.train()


# --- a k-NN reading's k within its bank ----------------------------------------------------------------------------
def test_k_beyond_the_bank_is_refused_where_both_are_known():
    bank = torch.nn.functional.normalize(torch.randn(3, 4), dim=1)
    with pytest.raises(ValueError, match=r"knn_distance: k=10 must be between 1 and the bank's 3 rows"):
        knn_distance(bank, bank, 10)
    assert knn_distance(bank, bank, 1).abs().max() < 1e-6  # each row's nearest is itself
    with pytest.raises(ValueError, match=r"TextBenchArguments.k=50 is more than bank_size=20"):
        TextBenchArguments(k=50, bank_size=20)
    from insub_hf import InSubConfig

    with pytest.raises(ValueError, match=r"TextBenchArguments.ood_size=600 is more than split_size=500: the shuffled"):
        TextBenchArguments(ood_size=600, split_size=500)
    with pytest.raises(ValueError, match=r"InSubConfig.uncertainty\['k'\] must be an integer >= 1 and <= 3, got 10"):
        InSubConfig(uncertainty={"reading": "knn", "k": 10, "bank_size": 3})


def test_an_ood_size_beyond_what_the_makers_draw_is_refused_naming_the_field():
    from insub_hf.evaluation.text_bench import make_bench

    # scikit-learn's three tables have 1,189 rows; both halves of 600 need 1,200
    with pytest.raises(ValueError, match=r"TextBenchArguments.ood_size=600: each OOD set needs 2 x ood_size = 1200 "
                                         r"strings .*table_rows: 1189 strings were found.* Give a smaller ood_size"):
        make_bench(TextBenchArguments(ood_size=600), ["a tweet"])


@pytest.mark.parametrize("hub_up, token, message", [
    (False, "hf_test", r"--push_to_hub \(repo 'someone/release'\): the Hub at http://127\.0\.0\.1:\d+ cannot be "
                       r"reached \(ConnectError: .*\)\. .*Nothing was trained, built or uploaded\."),
    (True, "hf_refused", r"--push_to_hub \(repo 'someone/release'\): the Hub at http://127\.0\.0\.1:\d+ refused the "
                         r"token \(HTTP 401: .*\); pass a token with write access"),
])
def test_a_push_asks_the_hub_before_any_training(hub_up, token, message, tmp_path, capsys, monkeypatch):
    from huggingface_hub import HfApi

    from .hub_server import LocalHub

    with LocalHub() as hub:
        endpoint = hub.endpoint
        if not hub_up:
            hub.__exit__()  # the port is closed: nothing answers there
        monkeypatch.setattr("insub_hf.hub.upload.HfApi", lambda token=None: HfApi(endpoint=endpoint, token=token))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        out = tmp_path / "image"
        line = cli_error([*RELEASE, "--output_dir", str(out), "--model_cards", str(tmp_path / "cards"), "--push_to_hub",
                          "--hub_model_id", "someone/release", "--hub_token", token], capsys)
        if hub_up:
            assert not hub.repos  # nothing created
    assert re.search(message, line), line
    assert not (out / "results.json").exists() and not (tmp_path / "cards").exists()


def test_a_re_run_of_a_release_may_replace_the_card_its_own_first_run_wrote(tmp_path):
    from insub_hf.release.build import ReleaseArguments

    cards = tmp_path / "cards"
    (cards / "insub-resnet10-fashion-mnist").mkdir(parents=True)
    command = "insub-hf release image --num_train_epochs 2"
    (cards / "insub-resnet10-fashion-mnist" / "README.md").write_text(
        f"...\nMade by `{command}` at insub-hf commit 0123 on cpu; seed 0.\n")
    release = ReleaseArguments(name="insub-resnet10-fashion-mnist", model_cards=str(cards))
    release.check_places(command)  # its own card: the re-run goes on
    with pytest.raises(ValueError, match="is a published card; a release replaces it only with --replace_card true"):
        release.check_places("insub-hf release image --num_train_epochs 3")  # another release's card is kept


def test_a_re_run_of_a_release_never_relabels_the_repo_its_card_names(tmp_path):
    from insub_hf.release.build import ReleaseArguments

    folder = tmp_path / "cards" / "insub-genomenet-dm3"
    (folder / "evaluation").mkdir(parents=True)
    command = "insub-hf release dna"
    (folder / "README.md").write_text(f"...\nMade by `{command}` at insub-hf commit 0123 on cpu; seed 0.\n")
    record = {"job": "genomics", "args": {"hub_model_id": "org/insub-genomenet-dm3"}, "results": {}, "fingerprints": {}}
    (folder / "evaluation" / "results.json").write_text(json.dumps(record))
    release = ReleaseArguments(name="insub-genomenet-dm3", model_cards=str(tmp_path / "cards"))
    release.check_places(command, "org/insub-genomenet-dm3")  # made again for the repo it names: goes on
    # the re-run without --hub_model_id would name the release's own name in the card's snippets and record
    expected = (f"ReleaseArguments.model_cards: {folder / 'README.md'} is a published card for the repo "
                "'org/insub-genomenet-dm3', and this run would name 'insub-genomenet-dm3': give --hub_model_id "
                "org/insub-genomenet-dm3 to make it again, --replace_card true to relabel it")
    with pytest.raises(ValueError, match=re.escape(expected)):
        release.check_places(command, "insub-genomenet-dm3")
    ReleaseArguments(name="insub-genomenet-dm3", model_cards=str(tmp_path / "cards"), replace_card=True).check_places(
        command, "insub-genomenet-dm3")  # said in words: relabelled
    (folder / "evaluation" / "results.json").write_text('{"args": {"hub_model_id": "org/insub-gen')  # a cut record
    release.check_places(command, "insub-genomenet-dm3")  # names no repo: the card's own command makes it again

"""Bad values and inputs, by class: each is refused (or warned about) with a message naming the field, input or file,
and nothing on disk changes where a model existed."""

import hashlib
import json
import os
import re
import subprocess
import sys
import warnings

import pytest
import torch
from datasets import Dataset
from transformers.testing_utils import CaptureLogger

from insub_hf import InSubConfig, InSubForPreTraining, InSubForSequenceClassification, InSubModel
from insub_hf.model import modeling_insub
from insub_hf.checkpointing import save_pretrained_atomic
from insub_hf.data import BatchTwoViews, load_fasta_dataset, load_image_dataset, load_labelled_sequences, one_hot_dna
from insub_hf.jobs.genomics import encode_labelled
from insub_hf.training.trainer import InSubTrainer, InSubTrainingArguments

from .conftest import TINY_VIT, tiny_config


# --- silently accepted config values ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(normalize_heads="no"), "InSubConfig.normalize_heads must be one of [True, False], got 'no'"),
        (dict(objective_config={"normalize_mean": None}), "SimCLRConfig.normalize_mean must be one of [True, False], got None"),
        (dict(head_hidden_sizes=64), "InSubConfig.head_hidden_sizes must be a list of hidden widths"),
        (dict(encoder_config=dict(TINY_VIT, hidden_size=30, num_attention_heads=4)),
         "hidden_size=30 must be a multiple of num_attention_heads=4"),
    ],
)
def test_a_bad_config_value_is_refused_naming_the_field(kwargs, message):
    with pytest.raises(ValueError) as error:
        InSubConfig(**kwargs)
    assert message in str(error.value)



TINY_BERT = dict(model_type="bert", vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                 intermediate_size=32)


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_labels=10**9), "InSubConfig.num_labels must be an integer >= 1 and <= 100000, got 1000000000"),
    (dict(num_labels=3, problem_type="ranking"), "InSubConfig.problem_type must be one of ['regression', "
                                                 "'single_label_classification', 'multi_label_classification']"),
])
def test_label_settings_the_classifiers_cannot_honour_are_refused_with_the_reason(kwargs, message):
    with pytest.raises(ValueError) as error:
        tiny_config(**kwargs)
    assert message in str(error.value)


def test_label_settings_given_to_from_pretrained_are_checked_too(tmp_path):
    from insub_hf import InSubForImageClassification

    InSubModel(tiny_config()).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"problem_type must be one of \['regression'"):
        InSubForSequenceClassification.from_pretrained(tmp_path, num_labels=4, problem_type="ranking")
    assert InSubForImageClassification.from_pretrained(tmp_path, num_labels=4).classifier is not None
    regression = InSubForImageClassification.from_pretrained(tmp_path, num_labels=1)  # transformers' convention
    assert regression.config.num_labels == 1


@pytest.mark.parametrize("objective", ["byol", "simclr", "dino", "vicreg", "barlow_twins", "genomenet"])
def test_an_objective_refuses_an_encoder_of_another_modality(objective):
    with pytest.raises(ValueError, match=rf"objective='{objective}' trains encoders that read \[.*\], but this encoder "
                                         r"reads input_ids: use one of \['scd'\] with it"):
        InSubConfig(encoder_config=dict(TINY_BERT), objective=objective)
    with pytest.raises(ValueError, match=r"objective='scd' trains encoders that read \['input_ids'\], but this encoder "
                                         r"reads pixel_values"):
        tiny_config(objective="scd")


def test_without_an_objective_the_encoders_modality_picks_it():
    from insub_hf.encoders import GenomicEncoderConfig

    assert tiny_config().objective == "simclr"
    assert InSubConfig(encoder_config=dict(TINY_BERT)).objective == "scd"
    assert InSubConfig(encoder_config=GenomicEncoderConfig(conv_filters=8)).objective == "genomenet"

def test_a_misspelt_config_keyword_is_refused_with_the_closest_field_and_a_saved_config_loads_quietly(tmp_path):
    with pytest.raises(ValueError, match="InSubConfig got num_head=3, which is not one of its fields; did you mean 'num_heads'"):
        InSubConfig(num_head=3)
    with pytest.raises(ValueError, match="got diversity_alhpa=0.1, .* did you mean 'diversity_alpha'"):
        InSubConfig(diversity_alhpa=0.1)
    with pytest.raises(ValueError, match="got hidden_size=96, a field of the encoder: set it in encoder_config"):
        InSubConfig(hidden_size=96)  # the default ViT's field, not head_hidden_sizes
    # a key close to no field (a later release's, another tool's) is kept with a warning: the config still loads
    with pytest.warns(UserWarning, match="InSubConfig got experiment_tag='x', which is not one of its fields"):
        assert InSubConfig(experiment_tag="x").experiment_tag == "x"
    InSubConfig(num_heads=2, num_labels=4).save_pretrained(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert InSubConfig.from_pretrained(tmp_path).num_labels == 4


def test_a_config_edited_after_saving_is_refused_naming_the_tensors_and_fields(tmp_path):
    InSubForPreTraining(tiny_config(num_heads=2)).save_pretrained(tmp_path / "model")
    path = tmp_path / "model" / "config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, "num_heads": 3}))
    with pytest.raises(RuntimeError, match=r"the weights do not have the shapes the config gives them: heads\..*checkpoint \(2, .*config \(3, .*\(num_heads, head_hidden_sizes, head_output_size.*ignore_mismatched_sizes=True"):
        InSubForPreTraining.from_pretrained(tmp_path / "model")
    path.write_text(json.dumps(config))  # a resume into another head count: the config passed in differs
    with pytest.raises(RuntimeError, match=r"checkpoint \(2, .*config \(4, .*or another config was passed"):
        InSubForPreTraining.from_pretrained(tmp_path / "model", config=InSubConfig(**{**config, "num_heads": 4}))


@pytest.mark.parametrize("field, value", [("num_heads", 4), ("head_output_size", 8), ("head_hidden_sizes", [8])])
def test_a_config_field_changed_after_the_model_was_built_is_refused_when_saved(tmp_path, field, value):
    # checked where a config.json that no longer describes the heads would be written, not on every forward (which
    # computes with the heads as built)
    model = InSubForPreTraining(tiny_config(num_heads=2))
    built = getattr(model.config, field)
    setattr(model.config, field, value)
    assert torch.isfinite(model(torch.rand(2, 3, 32, 32), torch.rand(2, 3, 32, 32)).loss)
    with pytest.raises(ValueError, match=re.escape(f"InSubConfig.{field}={value!r} (built with {built!r}) was changed after")):
        model.save_pretrained(tmp_path / "model")
    assert not (tmp_path / "model").exists()  # nothing written
    setattr(model.config, field, built)
    assert torch.isfinite(model(torch.rand(2, 3, 32, 32), torch.rand(2, 3, 32, 32)).loss)


def test_save_pretrained_onto_a_file_is_refused_and_leaves_it(tmp_path):
    target = tmp_path / "results.json"
    target.write_text("{}")
    with pytest.raises(NotADirectoryError, match=f"save_pretrained\\('{target}'\\): that path is a file"):
        InSubModel(tiny_config(num_heads=2)).save_pretrained(target)
    assert target.read_text() == "{}"


def test_a_head_count_too_large_to_allocate_is_refused_by_size():
    with pytest.raises(ValueError, match=r"InSubConfig.num_heads=10000000 heads of sizes \[32, 48, 16\] would hold"):
        InSubModel(tiny_config(num_heads=10**7, head_hidden_sizes=[48], head_output_size=16))


# --- inputs the model would misread ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return InSubForPreTraining(tiny_config(num_heads=2)).eval()


def test_images_of_another_size_are_refused_unless_asked_for(model):
    with pytest.raises(ValueError, match=r"pixel_values are \(28, 28\) images but the encoder's config has image_size=32"):
        model(torch.randn(2, 3, 28, 28), torch.randn(2, 3, 28, 28))
    encoder = model.insub.encoder
    assert encoder(pixel_values=torch.randn(2, 3, 16, 16), interpolate_pos_encoding=True).shape == (2, 32)


def test_integer_pixels_are_refused(model):
    pixels = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    with pytest.raises(ValueError, match="pixel_values has dtype torch.uint8; the encoder reads float images"):
        model(pixels, pixels)


def test_finite_but_huge_inputs_giving_a_nan_loss_are_named(model):
    huge = torch.full((4, 3, 32, 32), 3e38)
    huge[:, :, ::2] = -3e38
    with pytest.raises(FloatingPointError, match=r"The pretraining loss is nan for inputs pixel_values max \|x\| = 3e\+38, pixel_values_2"):
        model(huge, huge)


def test_unnormalised_inputs_are_refused_even_when_the_loss_stays_finite(model):
    pixels = torch.rand(4, 3, 32, 32)
    assert torch.isfinite(model(pixels * 1e3, pixels * 1e3).loss)  # within the limit: trains
    with pytest.raises(FloatingPointError, match=r"for inputs pixel_values max \|x\| = 2e\+04.*must be normalised \(\|x\| <= 10000\)"):
        model(pixels.clamp(min=0.5) * 2e4, pixels)


def test_a_batch_of_one_warns_once_that_the_contrastive_loss_has_no_negatives(model):
    modeling_insub.logger.warning_once.cache_clear()
    with CaptureLogger(modeling_insub.logger) as captured:
        out = model(torch.randn(1, 3, 32, 32), torch.randn(1, 3, 32, 32))
        model(torch.randn(1, 3, 32, 32), torch.randn(1, 3, 32, 32))
    assert out.ssl_loss.item() == 0.0
    assert captured.out.count("got a batch of one sample") == 1


@pytest.mark.parametrize(
    "labels, message",
    [
        # float labels are per-label targets (transformers' rule): class indices given as floats are named
        (torch.tensor([0.0, 1.0, 2.0]), r"multi_label_classification' must have shape \(batch, num_labels\) = \(3, 3\), "
                                        r"got \(3,\) \(class indices: give them as integers\)"),
        (torch.tensor([0.0, 1.0, 2.0]).bool(), "labels must be integer class indices, got dtype torch.bool"),
        (torch.tensor([0, 1]), r"labels must have shape \(batch,\) = \(3,\), got \(2,\)"),
        (torch.tensor([0, 1, 7]), r"labels must lie in \[0, num_labels=3\) or be -100 \(ignored\), got 7"),
        (torch.tensor([-100, -100, -100]), "labels are all -100"),
    ],
)
def test_bad_labels_are_named(labels, message):
    classifier = InSubForSequenceClassification(tiny_config(num_labels=3))
    with pytest.raises(ValueError, match=message):
        classifier(torch.randn(3, 3, 32, 32), labels=labels)


# --- data the trainer or a loader would choke on -----------------------------------------------------------------------
def trainer_for(dataset, tmp_path, **kwargs):
    args = InSubTrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=2, use_cpu=True, report_to=[])
    return InSubTrainer(model=InSubForPreTraining(tiny_config(num_heads=2)), args=args, train_dataset=dataset, **kwargs)


def test_an_empty_training_set_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"InSubTrainer: train_dataset is empty \(0 rows\)"):
        trainer_for(Dataset.from_dict({"pixel_values": []}), tmp_path)


def test_a_training_set_shorter_than_one_dropped_batch_is_refused(tmp_path):
    rows = Dataset.from_dict({"pixel_values": torch.rand(3, 3, 32, 32).numpy()}).with_format("torch")
    args = InSubTrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, use_cpu=True, report_to=[],
                                  dataloader_drop_last=True)
    with pytest.raises(ValueError, match=r"train_dataset has 3 rows, fewer than one batch \(per_device_train_batch_size=4"):
        InSubTrainer(model=InSubForPreTraining(tiny_config(num_heads=2)), args=args, train_dataset=rows,
                     batch_views=BatchTwoViews(32, (0.5,) * 3, (0.2,) * 3))
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("name", ["per_device_train_batch_size", "per_device_eval_batch_size"])
def test_a_batch_size_below_one_is_refused_naming_it(tmp_path, name):
    with pytest.raises(ValueError, match=f"InSubTrainingArguments.{name} must be an integer >= 1, got 0"):
        InSubTrainingArguments(output_dir=str(tmp_path), report_to=[], **{name: 0})


def test_a_training_set_without_its_view_transform_is_refused_with_its_columns(tmp_path):
    rows = Dataset.from_dict({"image": [[0.0]] * 4, "label": [0, 1, 0, 1]})
    with pytest.raises(ValueError, match=r"the training rows hold \['image', 'label'\] but the model reads `pixel_values`"):
        trainer_for(rows, tmp_path)


@pytest.mark.parametrize("record, message", [(None, "a DNA record must be a string of bases, got None"),
                                             ("", "the DNA record is empty")])
def test_a_missing_dna_record_is_named(record, message):
    with pytest.raises(ValueError, match=f"chr2L:5: {message}"):
        one_hot_dna(record, name="chr2L:5")


def test_fasta_faults_name_the_file_and_record(tmp_path):
    empty = tmp_path / "empty.fa"
    empty.write_text("")
    with pytest.raises(ValueError, match=f"{empty}: no FASTA records"):
        load_fasta_dataset(empty)
    unlabelled = tmp_path / "unlabelled.fa"
    unlabelled.write_text(">a|ei\nACGT\n>b\nACGT\n")
    with pytest.raises(ValueError, match=f"{unlabelled}: header 'b' has no '\\|label' suffix"):
        load_labelled_sequences(unlabelled)
    labelled = tmp_path / "labelled.fa"
    labelled.write_text("".join(f">seq{i}|{'ab'[i % 2]}\nACGT\n" for i in range(9)) + ">bad7|a\nACXT\n")
    data = load_labelled_sequences(labelled).train_test_split(test_size=0.5, seed=0)
    with pytest.raises(ValueError, match=r"bad7\|a: character 'X' at position 2"):
        for part in data.values():
            encode_labelled(part)


def test_a_single_data_file_loads_through_its_format(tmp_path):
    table = tmp_path / "x.csv"
    table.write_text("path,label\na.png,0\n")
    with pytest.raises(ValueError, match=r"has no column 'image' \(image_column\); its columns are \['path', 'label'\]"):
        load_image_dataset(str(table), split="train")
    other = tmp_path / "x.txt"
    other.write_text("hello")
    with pytest.raises(ValueError, match="a single file must be one of"):
        load_image_dataset(str(other), split="train")


def test_a_checkpoint_loaded_with_another_objective_is_refused_and_left_alone(tmp_path):
    InSubForPreTraining(tiny_config(num_heads=2)).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "objective": "dino"}))
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.iterdir()}
    with pytest.raises(ValueError, match=r"\['base_temperature', 'normalize_mean', 'temperature'\] are not settings "
                                         r"of objective='dino' \(DINOConfig\)"):
        InSubForPreTraining.from_pretrained(tmp_path)  # the objective's settings are SimCLR's
    (tmp_path / "config.json").write_text(json.dumps({**config, "objective": "dino", "objective_config": {}}))
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.iterdir()}
    with pytest.raises(ValueError, match="lacks .* weights of its config's objective 'dino'"):
        InSubForPreTraining.from_pretrained(tmp_path)
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.iterdir()} == before


def test_fp16_on_a_machine_without_a_gpu_is_refused_not_ignored(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same answer on a GPU machine
    with pytest.raises(ValueError, match=r"InSubTrainingArguments.fp16=True needs a GPU .* Use bf16=True"):
        InSubTrainingArguments(output_dir=str(tmp_path), fp16=True, report_to=[])
    assert InSubTrainingArguments(output_dir=str(tmp_path), bf16=True, use_cpu=True, report_to=[]).bf16


# --- accepted when they should be refused (C): each at the boundary, naming the field, the value and what is allowed
@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_labels=5, id2label={0: "a", 1: "b", 2: "c"}),
         "InSubConfig.id2label has 3 names but num_labels=5: give one name per class"),
        (dict(uncertainty={"direction": True}),
         r"InSubConfig.uncertainty\['direction'\] must be one of \[1, -1, None\], got True \(a bool"),
        (dict(uncertainty={"k": 2.5}), r"InSubConfig.uncertainty\['k'\] must be an integer >= 1, got 2.5"),
        (dict(objective="vicreg", objective_config={"invariance_weight": 0, "variance_weight": 0,
                                                    "covariance_weight": 0}),
         "VICReg's invariance_weight, variance_weight and covariance_weight are all 0, so its loss is 0"),
    ],
)
def test_a_value_that_would_be_dropped_or_bent_is_refused_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**kwargs)


def test_names_and_count_that_agree_are_kept():
    assert tiny_config(num_labels=3, id2label={0: "a", 1: "b", 2: "c"}).id2label == {0: "a", 1: "b", 2: "c"}


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: setattr(c, "num_heads", 0), "InSubConfig.num_heads must be an integer >= 1, got 0"),
        (lambda c: setattr(c, "diversity_alpha", -0.1), "InSubConfig.diversity_alpha must be"),
        (lambda c: setattr(c, "pooling", "max"), "InSubConfig.pooling must be one of"),
        (lambda c: c.uncertainty.__setitem__("k", 2.5), r"InSubConfig.uncertainty\['k'\] must be an integer >= 1"),
        (lambda c: c.uncertainty.__setitem__("reading", "knn"), r"uncertainty\['reading'\]='knn' needs a bank"),
        (lambda c: c.uncertainty.update(direction=2), r"InSubConfig.uncertainty\['direction'\] must be one of"),
    ],
)
def test_a_value_assigned_after_construction_is_checked_where_it_is_written(change, message):
    config = tiny_config()
    before = config.to_dict()
    with pytest.raises(ValueError, match=message):
        change(config)
    assert config.to_dict() == before  # nothing half-set
    config.num_heads, config.uncertainty["k"] = 4, 7  # good values are taken
    assert (config.num_heads, config.uncertainty["k"]) == (4, 7)
    assert InSubConfig.from_dict(config.to_dict()).uncertainty["k"] == 7  # and saved as a plain block


def test_a_bank_of_all_zero_rows_is_refused_naming_them():
    model = InSubModel(tiny_config()).eval()
    rows = torch.randn(10, model.encoder.output_dim)
    rows[[2, 5]] = 0
    with pytest.raises(ValueError, match="set_bank: 2 of the 10 representations are all-zero rows"):
        model.set_bank(rows, k=2)
    assert model.config.uncertainty["bank_size"] == 0


# --- files that something else cut, emptied or edited (B) ----------------------------------------------------------
@pytest.mark.parametrize(
    "text, message",
    [
        ('{"job": "compare", "args": {"seeds": [0], "dataset": "fashion', r"is not a whole results.json \(Unterminated "
         r"string starting at at line 1, column 54: cut or edited after its run wrote it\); restore it"),
        ("{}", "names no job"),
        ('{"job": "compare", "args": {}}', r"results.json of an insub-hf compare run without its \['rows'\]"),
        ('{"job": "text", "results": {}}', r"without its \['fingerprints'\]"),
        ('{"job": "compare", "rows": [{"name": "insub", "method": "insub", "num_heads": 5, "test": {}}]}',
         r"compare run without its \['rows\[0\].seed'\]"),
    ],
)
def test_a_cut_or_emptied_results_json_is_refused_naming_the_file_and_the_way_out(tmp_path, text, message):
    from insub_hf.jobs.cards import RunRecord

    path = tmp_path / "results.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        RunRecord.read(path)


METRICS = {"accuracy": 0.8, "nll": 0.5, "ece": 0.02, "tace": 0.01, "brier": 0.3}


@pytest.mark.parametrize(
    "runs, message",
    [
        ({"runs": [{"name": "insub_m5", "test": METRICS, "head_spread_calibration": [{"validation_auroc": 0.4}]}]},
         r"the run 'insub_m5' does not read back \(head_spread_calibration\[0\] lacks \['direction'\]"),
        ({"runs": [{"name": "insub_m5", "test": {**METRICS, "acuracy": 0.8}}]},
         r"the run 'insub_m5' does not read back \(test has unknown keys \['acuracy'\]"),
        ({"runs": [{"name": "insub_m5", "test": [0.8]}]}, r"test must be a mapping of Metrics's fields, got list"),
        ({"rows": [{"name": "insub", "method": "insub", "num_heads": 5, "seed": 0, "members": 5,
                   "test": {"accuracy": 0.8}}]},
         r"the row 'insub' does not read back \(test lacks \['nll', 'ece', 'tace', 'brier'\]"),
    ],
)
def test_a_record_whose_nested_entry_lost_a_key_is_refused_naming_it_not_a_key_error(tmp_path, runs, message):
    from insub_hf.jobs.cards import card_from_results

    path = tmp_path / "results.json"
    path.write_text(json.dumps({"job": "demo" if "runs" in runs else "compare", "args": {}, **runs}))
    row = "insub_m5" if "runs" in runs else "insub"
    with pytest.raises(ValueError, match=message) as refused:
        card_from_results(path, row, None)
    assert str(path) in str(refused.value) and "restore it from its copy or run the job again" in str(refused.value)


def test_a_release_reused_from_a_folder_whose_record_was_cut_stops_in_one_line(tmp_path, capsys):
    from .conftest import cli_error

    folder = tmp_path / "released"
    (folder / "evaluation").mkdir(parents=True)
    (folder / "evaluation" / "results.json").write_text('{"job": "compare", "args": {"seeds": [0')
    (folder / "evaluation" / "results.md").write_text("")
    line = cli_error(["release", "image", "--reuse", str(folder), "--output_dir", str(tmp_path / "out"),
                      "--model_cards", str(tmp_path / "cards")], capsys)
    assert "results.json is not a whole results.json" in line and "run the job again" in line


@pytest.mark.parametrize("argv", [["demo"], ["release", "dna"]])
def test_a_push_with_offline_mode_set_stops_in_one_line_before_any_work(tmp_path, capsys, monkeypatch, argv):
    from .conftest import cli_error

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    out = tmp_path / "out"
    cards = ["--model_cards", str(tmp_path / "cards")] if argv[0] == "release" else []  # not the repository's cards
    line = cli_error([*argv, "--push_to_hub", "--hub_token", "hf_x", "--output_dir", str(out), *cards], capsys)
    assert "--push_to_hub (repo " in line and "HF_HUB_OFFLINE=1 is set, so nothing can be uploaded. Unset it" in line
    assert not out.exists()


def test_weights_whose_checksums_were_stripped_and_a_value_changed_load_with_a_word(tmp_path):
    from safetensors.torch import load_file, save_file

    model = InSubModel(tiny_config())
    model.save_pretrained(tmp_path / "m")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as saved: checked, no word
        InSubModel.from_pretrained(tmp_path / "m")
    tensors = load_file(tmp_path / "m" / "model.safetensors")
    name = sorted(tensors)[0]
    tensors[name] = tensors[name] + 1  # a value changed, and the metadata with its checksums gone
    save_file(tensors, str(tmp_path / "m" / "model.safetensors"))
    with pytest.warns(UserWarning, match=r"the weights in .* carry no checksums, so their values cannot be verified "
                                         r"\(saved by another tool, or their metadata stripped\)"):
        InSubModel.from_pretrained(tmp_path / "m")


@pytest.mark.parametrize("change", ["renamed", "removed"])
def test_a_tensor_renamed_or_removed_in_the_file_and_its_checksums_is_refused_naming_it(tmp_path, change):
    from safetensors.torch import save_file

    from insub_hf.checksums import METADATA_KEY, read_safetensors

    InSubModel(tiny_config()).save_pretrained(tmp_path / "m")
    path = tmp_path / "m" / "model.safetensors"
    tensors, metadata = read_safetensors(path)
    checksums = json.loads(metadata[METADATA_KEY])
    name = sorted(tensors)[0]
    value, checksum = tensors.pop(name), checksums.pop(name)
    if change == "renamed":
        tensors[name + "_v2"], checksums[name + "_v2"] = value, checksum
    save_file(tensors, str(path), metadata={**metadata, METADATA_KEY: json.dumps(checksums)})
    said = (rf"lacks 1 tensor\(s\) of InSubModel \(e.g. \['{re.escape(name)}'\]\)"
            + (rf"; holds 1 it does not have \(e.g. \['{re.escape(name)}_v2'\]\)" if change == "renamed" else ""))
    with pytest.raises(ValueError, match=rf"the checkpoint was saved by InSubModel, yet its weights {said}: tensors "
                                         r"were renamed or removed after saving. Restore the folder"):
        InSubModel.from_pretrained(tmp_path / "m")


def test_a_folder_a_killed_save_left_moved_aside_is_explained_at_load(tmp_path):
    InSubModel(tiny_config()).save_pretrained(tmp_path / "m")
    (tmp_path / "m").rename(tmp_path / ".m.old-1a2b3c4d")  # killed between the two renames of atomic_folder
    with pytest.raises(FileNotFoundError, match=r"a save into it was killed between moving the old folder aside "
                                                r"and moving the new one in; the old model is .*\.m\.old-1a2b3c4d: "
                                                r"rename it back"):
        InSubModel.from_pretrained(tmp_path / "m")
    save_pretrained_atomic(InSubModel(tiny_config()), tmp_path / "m")  # the next save puts it back first, then replaces
    assert InSubModel.from_pretrained(tmp_path / "m") is not None and not list(tmp_path.glob(".m.*"))


def test_an_image_folder_saved_before_its_pipelines_warns_at_load_with_the_way_out(tmp_path):
    from insub_hf import InSubImageProcessor

    save_pretrained_atomic(InSubModel(tiny_config()), tmp_path / "m",
                           InSubImageProcessor.for_images(32, 3, (0.5,) * 3, (0.25,) * 3), remote_code=True)
    assert (tmp_path / "m" / "pipeline_insub.py").is_file()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        InSubModel.from_pretrained(tmp_path / "m")
    (tmp_path / "m" / "pipeline_insub.py").unlink()  # as folders saved before the pipelines existed
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    del config["custom_pipelines"]
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    with pytest.warns(UserWarning, match=r"remote code predates its own pipelines, so pipeline\(task, model=folder, "
                                         r"trust_remote_code=True\) runs transformers' stock pipeline there, which "
                                         r"clips 16-bit images at 255; save the model there again"):
        InSubModel.from_pretrained(tmp_path / "m")
    # loaded for transformers' stock image pipeline: refused, in this process and in a fresh one where only the
    # folder's remote code (not `import insub_hf`) reaches the package's file checks
    refusal = ("this image folder has no pipeline_insub.py (its remote code predates its own pipelines), so "
               "transformers' stock image pipeline would run, which clips 16-bit images at 255; save the model there "
               "again")
    from transformers import pipeline

    from insub_hf import InSubImageFeatureExtractionPipeline

    with pytest.raises(ImportError, match=re.escape(refusal)):
        pipeline("image-feature-extraction", model=str(tmp_path / "m"), trust_remote_code=True)
    with pytest.warns(UserWarning, match="predates its own pipelines"):  # the class that reads every image: served
        extractor = pipeline("image-feature-extraction", model=str(tmp_path / "m"), trust_remote_code=True,
                             pipeline_class=InSubImageFeatureExtractionPipeline)
    assert isinstance(extractor, InSubImageFeatureExtractionPipeline)
    fresh = ("import sys\nfrom transformers import pipeline\ntry:\n    pipeline('image-classification', model='m', "
             "trust_remote_code=True)\nexcept ImportError as error:\n    print(error)\n"
             "print('remote class' if any(n.startswith('transformers_modules.') and n.endswith('.modeling_insub') "
             "for n in sys.modules) else '')")
    run = subprocess.run([sys.executable, "-c", fresh], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules")))
    assert refusal in run.stdout and "remote class" in run.stdout, run.stdout + run.stderr[-2000:]


def test_a_pipeline_task_of_another_modality_is_refused_naming_what_the_model_reads(tmp_path):
    """Texts to an image model's folder, images to a text or DNA model's: one line from the folder's own pipeline
    file (`pipeline_insub.InSubOtherModalityPipeline`), not transformers' missing tokenizer or image processor."""
    from transformers import pipeline

    from .objectives.test_scd import tiny_bert_config
    from .test_hub import GENOMIC

    models = {"image": InSubModel(tiny_config()), "text": InSubModel(tiny_bert_config(num_heads=2)),
              "dna": InSubModel(InSubConfig(encoder_config=GENOMIC, num_heads=2, head_hidden_sizes=[8],
                                            head_output_size=4, objective="genomenet"))}
    for name, model in models.items():
        model.save_pretrained(tmp_path / name, remote_code=True)
    cases = [("image", "feature-extraction", "texts", 'images: use pipeline("image-feature-extraction", model=..., '
                                                      'trust_remote_code=True)'),
             ("text", "image-feature-extraction", "images", "texts: use SentenceTransformer(folder, "
                                                            "trust_remote_code=True).encode(texts)"),
             ("text", "image-classification", "images", "texts: use SentenceTransformer("),
             ("dna", "feature-extraction", "texts", "one-hot DNA (dna_one_hot (B, L, 4)): use AutoModel"),
             ("dna", "image-classification", "images", "one-hot DNA (dna_one_hot (B, L, 4)): use AutoModel")]
    for name, task, given, reads in cases:
        with pytest.raises(ValueError, match=re.escape(f"pipeline({task!r}) hands this model {given}, and it reads "
                                                       f"{reads}")):
            pipeline(task, model=str(tmp_path / name), trust_remote_code=True)


def test_weights_an_update_made_nan_are_refused_before_the_model_is_saved(tmp_path):
    from transformers import TrainerCallback

    from insub_hf.jobs.pretraining import pretrain

    from .test_step_cost import _rows, image_config, training_args

    class Overflow(TrainerCallback):  # an update that overflows after the last step's (finite) loss was checked
        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step == state.max_steps:
                with torch.no_grad():
                    model.insub.heads.weights[0][0, 0, 0] = float("nan")

    run = tmp_path / "run"
    with pytest.raises(FloatingPointError, match=r"ended with NaN or inf in 1 of \d+ weight tensors "
                                                 r"\(insub\.heads\.weights\.0\) though every step's loss was finite "
                                                 r"\(no gradient norm was logged\).*is not saved.*optim='adamw_torch'"):
        pretrain(image_config(num_heads=2), _rows("simclr"), training_args(run, 4, 2, use_cpu=True),
                 callbacks=[Overflow()])
    assert not (run / "model").exists()
    pretrain(image_config(num_heads=2), _rows("simclr"), training_args(tmp_path / "fine", 4, 2, use_cpu=True))
    assert (tmp_path / "fine" / "model" / "model.safetensors").is_file()  # the check passes finite weights

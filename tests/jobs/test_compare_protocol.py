from dataclasses import replace

import pytest
import torch

from insub_hf.data.batch_augment import crop_boxes

from insub_hf.data import IMAGE_DATASET_PRESETS
from insub_hf.jobs.compare import ComparisonArguments
from insub_hf.evaluation.results import ComparisonRow, MethodResults, Metrics, TrainingRecord
from insub_hf.jobs.comparison import convergence_warnings
from insub_hf.jobs.methods import method_config
from insub_hf import InSubConfig
from insub_hf.jobs.experiment import settings_key, training_record


def test_training_record_measures_the_late_ssl_loss_drop_and_hinge_activity():
    # 10 logged steps: the last fifth (2 entries) against the fifth before it
    logs = [{"step": s, "ssl_loss": 10.0 - s, "mean_sigma": 0.1, "hinge_active": s / 10} for s in range(1, 11)]
    logs.append({"step": 10, "train_runtime": 5.0})  # the Trainer's final summary has no ssl_loss
    record = training_record(logs, {"parameters": 1})
    before, late = (3.0 + 2.0) / 2, (1.0 + 0.0) / 2  # steps 7-8 and 9-10
    assert record["ssl_loss_late_drop"] == pytest.approx((before - late) / before)
    assert record["ssl_loss_final"] == 0.0
    assert record["hinge_active_over_training"][-1] == (10, 1.0) and len(record["sigma_over_training"]) == 10


def test_convergence_warnings_name_the_run_and_the_fix():
    def row(name, method, accuracy, drop):
        results = MethodResults(members=1, test=Metrics(accuracy, 0.5, 0.02, 0.02, 0.3),
                                training=TrainingRecord(ssl_loss_final=1.0, ssl_loss_late_drop=drop, hinge_active_mean=None))
        return ComparisonRow(name, method, None, 1, results)

    rows = [row("Baseline", "baseline", 0.80, 0.01), row("InSub (M=5)", "insub", 0.70, 0.08)]
    warnings = convergence_warnings(rows, 60000, "fashion_mnist")
    assert len(warnings) == 2
    assert warnings[0].startswith("Baseline (seed 1): linear probe 80.0% < 85%")
    assert "InSub (M=5) (seed 1): the ssl loss still fell 8.0%" in warnings[1] and "--num_train_epochs" in warnings[1]
    assert convergence_warnings(rows[:1], 5000, "fashion_mnist") == []  # the 85% plateau is for the full set


def test_methods_share_the_named_encoder_and_differ_only_where_the_method_does():
    args = ComparisonArguments(encoder="resnet18_cifar", width=0.0625, dropout=0.2)
    baseline, insub = method_config(args, "baseline", None), method_config(args, "insub", 5)
    dropout, batch = method_config(args, "mc_dropout", None), method_config(args, "batch_ensemble", 5)
    assert baseline.encoder_config.to_dict() == insub.encoder_config.to_dict() == batch.encoder_config.to_dict()
    assert baseline.encoder_config.model_type == "insub_cifar_resnet" and baseline.encoder_config.width_multiplier == 0.0625
    assert dropout.encoder_config.hidden_dropout_prob == 0.2 and baseline.encoder_config.hidden_dropout_prob == 0.0
    assert (baseline.num_heads, insub.num_heads, batch.batch_ensemble_size) == (1, 5, 5)
    assert baseline.diversity_weight == 0.0 and insub.diversity_weight == args.diversity_weight
    # InSub trains the authors' objective; the control is the old cosine-of-the-mean default, whatever alpha is given
    assert insub.objective_config == {"temperature": args.temperature, "base_temperature": 0.07, "normalize_mean": False}
    assert insub.diversity_reduction == "mean"
    control = method_config(replace(args, diversity_alpha=0.3), "insub_cosine", 5)
    assert control.objective_config == {"temperature": args.temperature, "base_temperature": None, "normalize_mean": True}
    assert control.diversity_reduction == "sum"
    assert (control.diversity_alpha, control.diversity_weight, control.num_heads) == (0.12, 1.5, 5)
    assert control.encoder_config.to_dict() == insub.encoder_config.to_dict()
    with pytest.raises(ValueError, match="ComparisonArguments.encoder must be one of"):
        ComparisonArguments(encoder="resnet101")


def test_recipe_settings_reach_the_config_and_the_views_and_are_checked():
    args = ComparisonArguments(temperature=0.3, min_crop_scale=0.6)
    assert (args.encoder, args.width) == ("resnet10_cifar", 0.25)  # the CPU protocol chosen on validation
    assert method_config(args, "insub", 5).objective_options.temperature == 0.3
    assert method_config(args, "baseline", None).objective_options.temperature == 0.3
    views = args.make_batch_views(IMAGE_DATASET_PRESETS["fashion_mnist"])
    assert views.crop_scale == (0.6, 1.0)
    boxes = crop_boxes(torch.rand(500, 1, 28, 28), views.crop_scale)  # (B, 4): top, left, height, width
    area = boxes[:, 2] * boxes[:, 3]
    assert area.min() >= 0.6 * 28 * 28 * 0.95 and area.min() < 0.7 * 28 * 28  # scale (0.6, 1); pixel rounding
    with pytest.raises(ValueError, match="ComparisonArguments.temperature"):
        ComparisonArguments(temperature=0.0)
    with pytest.raises(ValueError, match="ComparisonArguments.min_crop_scale"):
        ComparisonArguments(min_crop_scale=1.5)


def test_run_cache_keys_name_each_run_and_its_cache_version(monkeypatch):
    from insub_hf.jobs import experiment

    dino = InSubConfig(objective="dino", objective_config={"out_dim": 64}, num_heads=2)
    key = settings_key(dino, seed=1)
    assert len(key) == 12 and settings_key(InSubConfig(objective="dino", objective_config={"out_dim": 64},
                                                       num_heads=2), seed=1) == key  # the same run
    measured = InSubConfig(objective="dino", objective_config={"out_dim": 64}, num_heads=2, uncertainty={"direction": -1})
    assert settings_key(measured, seed=1) == key  # the spread's direction is measured after training
    banked = InSubConfig(objective="dino", objective_config={"out_dim": 64}, num_heads=2, uncertainty={"reading": "knn",
                         "k": 3, "bank_size": 8, "bank_weights": "0" * 64})
    assert settings_key(banked, seed=1) == key  # so is a k-NN bank (set_bank)
    other = InSubConfig(objective="dino", objective_config={"out_dim": 65}, num_heads=2)
    assert settings_key(other, seed=1) != key and settings_key(dino, seed=2) != key
    frozen = InSubConfig(objective="dino", objective_config={"out_dim": 64}, num_heads=2, freeze_encoder=True)
    assert settings_key(frozen, seed=1) != key  # a frozen encoder trains other weights
    args = ComparisonArguments()
    keys = {m: settings_key(method_config(args, m, None if m == "baseline" else 5), seed=0) for m in
            ("baseline", "insub", "insub_cosine", "batch_ensemble")}
    assert len(set(keys.values())) == 4
    monkeypatch.setattr(experiment, "CACHE_VERSION", experiment.CACHE_VERSION + 1)
    assert settings_key(dino, seed=1) != key  # a new cache format names every run anew


def test_the_protocol_trains_any_image_objective_and_keeps_the_cosine_control_to_simclr():
    args = ComparisonArguments(objective="vicreg", methods=["baseline", "insub"])
    baseline, insub = method_config(args, "baseline", None), method_config(args, "insub", 5)
    assert baseline.objective == insub.objective == "vicreg"
    assert "temperature" not in insub.objective_config  # VICReg's own settings: its config's defaults
    assert (insub.num_heads, insub.diversity_alpha, insub.diversity_weight) == (5, args.diversity_alpha, args.diversity_weight)
    with pytest.raises(ValueError, match=r"includes \['insub_cosine'\], SimCLR's cosine control; with objective='byol'"):
        ComparisonArguments(objective="byol")  # the default methods include the control
    with pytest.raises(ValueError, match="objective must be 'simclr' for it, got 'byol'"):
        method_config(ComparisonArguments(objective="byol", methods=["insub"]), "insub_cosine", 5)
    with pytest.raises(ValueError, match="ComparisonArguments.objective must be one of"):
        ComparisonArguments(objective="scd", methods=["insub"])  # text: `insub-hf text`


def test_every_method_is_declared_once_with_its_table_name():
    from insub_hf.jobs.methods import METHODS, method_members

    assert [METHODS[m].row_name(5, 3) for m in ("baseline", "ssl_ensemble", "mc_dropout", "insub")] == [
        "Baseline", "SSL-Ensemble (M=5)", "MC Dropout (T=3)", "InSub (M=5)"]
    args = ComparisonArguments()
    members = method_members(args, "ssl_ensemble", 3, seed=2)
    assert [seed for _, seed in members] == [2, 1002, 2002]  # member 0 is the baseline of the same seed
    assert all(c.to_dict() == method_config(args, "baseline", None).to_dict() for c, _ in members)
    assert [seed for _, seed in method_members(args, "insub", 3, seed=2)] == [2]


def run_keys(**training) -> list[str]:
    """Run-cache keys of InSubConfig() at seed 0 under the image recipe's training, changed by `training` (a list of
    values per field gives one key per value)."""
    from types import SimpleNamespace

    from insub_hf.jobs.compare import TRAINING_DEFAULTS
    from insub_hf.jobs.arguments import training_arguments
    from insub_hf.jobs.comparison import ProtocolData, RunCache

    data = ProtocolData(train=None, views=None, evaluation=None, description="x")
    [(name, values)] = training.items()
    return [
        RunCache(SimpleNamespace(training_args=training_arguments(TRAINING_DEFAULTS, **{name: value}),
                                 training_defaults=TRAINING_DEFAULTS), ComparisonArguments(), data).key(InSubConfig(), 0)
        for value in values
    ]


def test_an_integral_epoch_count_names_one_run_whether_given_as_int_or_float():
    keys = run_keys(num_train_epochs=[3, 3.0, 2.5])
    assert keys[0] == keys[1] != keys[2]


def test_a_trainer_flag_that_changes_the_weights_names_another_run_and_one_that_does_not_keeps_it():
    default = run_keys(seed=[0])[0]  # the Trainer's seed is not the cell's: that is the key's `seed`
    # the recipe's own values name the run the recipe always named
    assert run_keys(lr_scheduler_type=["cosine"]) == run_keys(weight_decay=[1e-4]) == [default]
    for changed in (dict(lr_scheduler_type=["linear"]), dict(warmup_steps=[0.1]), dict(gradient_accumulation_steps=[2]),
                    dict(max_grad_norm=[0.5]), dict(weight_decay=[0.0])):
        assert run_keys(**changed) != [default], changed
    for free in (dict(logging_steps=[50]), dict(report_to=[["tensorboard"]]), dict(dataloader_num_workers=[1]),
                 dict(save_total_limit=[3])):
        assert run_keys(**free) == [default], free

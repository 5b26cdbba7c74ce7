import json
import re
import time

import pytest
import torch

from insub_hf import InSubConfig, InSubForPreTraining
from insub_hf_cli import main
from insub_hf.evaluation import HarnessArguments, ImageEvaluationData, MethodEvaluator, ProbeArguments, metrics
from insub_hf.jobs.compare import ComparisonArguments
from insub_hf.evaluation.ood_detector import CALIBRATION_IMAGES, CALIBRATION_SEED
from insub_hf.processing.image_range import normalize_images
from insub_hf.evaluation.ood_sets import load_mnist_images, noise_ood_sets
from insub_hf.evaluation.results import OOD_SCORES, MethodResults

from ..conftest import cli_error, compare_argv

VIT_28 = dict(model_type="vit", image_size=28, patch_size=7, num_channels=1, hidden_size=16, num_hidden_layers=1,
              num_attention_heads=2, intermediate_size=32)
MEAN, STD = (0.5,), (0.25,)


def tiny_model(**overrides):
    kwargs = dict(encoder_config=dict(VIT_28), num_heads=2, head_hidden_sizes=[16], head_output_size=8)
    kwargs.update(overrides)
    return InSubForPreTraining(InSubConfig(**kwargs)).eval()


@pytest.fixture(scope="module")
def data():
    digits = load_mnist_images(90, seed=0)
    labels = torch.arange(3).repeat(30)
    return ImageEvaluationData(
        digits[:60], labels[:60], digits[60:], labels[60:], {"uniform": torch.rand(20, 1, 28, 28)}, MEAN, STD, 3
    )


def fast(**kwargs):
    return HarnessArguments(**{"mc_dropout_passes": 2, "corruption_images": 10, "corruptions": ["fog", "pixelate"],
                               **kwargs})


def test_results_follow_the_members_and_match_a_direct_computation(data):
    torch.manual_seed(0)
    model = tiny_model()
    evaluator = MethodEvaluator([model], data, ProbeArguments(probe_epochs=3), fast(knn_classifier_k=5))
    results, arrays = evaluator.run()
    with torch.no_grad():
        rep = model.insub.get_representation(pixel_values=normalize_images(data.test_images, MEAN, STD))
        train_rep = model.insub.get_representation(pixel_values=normalize_images(data.train_images, MEAN, STD))
        probs = torch.softmax(evaluator.probes[0][0](rep).double(), dim=-1)
    assert results.members == 1
    assert results.test.accuracy == pytest.approx(metrics.accuracy(probs, data.test_labels))
    assert results.test.ece == pytest.approx(metrics.expected_calibration_error(probs, data.test_labels), abs=1e-6)
    assert results.test.nll == pytest.approx(metrics.nll(probs, data.test_labels), abs=1e-6)
    # every OOD score is higher = more likely OOD: the probe's is the negative max probability
    torch.testing.assert_close(arrays["scores"]["in"]["msp"], -probs.max(1).values, atol=1e-6, rtol=0)
    msp_auroc = metrics.ood_auroc(probs.max(1).values, -arrays["scores"]["uniform"]["msp"])
    assert results.ood["uniform"]["msp"] == pytest.approx(msp_auroc, abs=1e-6)
    assert set(results.ood["uniform"]) == {"msp", "entropy", "head_spread", "knn", "knn_heads", "knn_heads_spread"}
    assert set(results.ood["uniform"]) <= set(OOD_SCORES)
    # the k-NN classifier's accuracy, against sklearn's cosine majority vote on the same representations
    from sklearn.neighbors import KNeighborsClassifier

    knn = KNeighborsClassifier(5, metric="cosine").fit(train_rep.numpy(), data.train_labels.numpy())
    expected = (knn.predict(rep.numpy()) == data.test_labels.numpy()).mean()
    assert results.knn_accuracy == pytest.approx(expected)
    (calibration,) = results.head_spread_calibration  # the direction, fixed on noise drawn for it
    assert calibration.direction in (1, -1)
    assert (calibration.validation_auroc >= 0.5) == (calibration.direction == 1)
    assert 0 <= results.corruption_mean["3"].auroc_head_spread <= 1
    assert set(results.semi_supervised) == {"1%", "10%"}
    assert set(results.corruptions) == {"fog", "pixelate"} and set(results.corruptions["fog"]) == set("12345")
    mean_s3 = (results.corruptions["fog"]["3"].ece + results.corruptions["pixelate"]["3"].ece) / 2
    assert results.corruption_mean["3"].ece == pytest.approx(mean_s3)
    assert 0 <= results.corruption_mean["3"].auroc_knn <= 1  # label-free: corrupted vs clean by k-NN
    # the JSON form reads back to the same results
    assert MethodResults.from_dict(json.loads(json.dumps(results.to_dict()))) == results


def test_the_harness_runs_as_separate_steps_in_order(data):
    torch.manual_seed(0)
    evaluator = MethodEvaluator([tiny_model()], data, ProbeArguments(probe_epochs=2), fast(corruptions=[]))
    with pytest.raises(RuntimeError, match=r"call extract_training_features\(\) first"):
        evaluator.fit_probes()
    features = evaluator.extract_training_features()
    assert features[0].representations.shape[:2] == (60, 1)
    with pytest.raises(RuntimeError, match=r"call fit_probes\(\) first"):
        evaluator.evaluate()
    evaluator.fit_probes()
    with pytest.raises(RuntimeError, match=r"call fit_detectors\(\) first"):
        evaluator.evaluate()
    evaluator.fit_detectors()
    stepwise, _ = evaluator.evaluate()
    torch.manual_seed(0)
    whole, _ = MethodEvaluator([tiny_model()], data, ProbeArguments(probe_epochs=2), fast(corruptions=[])).run()
    assert stepwise == whole


@pytest.mark.parametrize(
    "make, kwargs, members",
    [
        (lambda: [tiny_model(num_heads=1), tiny_model(num_heads=1)], {}, 2),  # deep ensemble of 2 models
        (lambda: [tiny_model(num_heads=3)], {"num_probes": 3}, 3),  # Finetune-InSub
        (lambda: [tiny_model(num_heads=1, encoder_config=dict(VIT_28, hidden_dropout_prob=0.2))],
         {"mc_dropout": True}, 2),  # MC dropout, T = 2
        (lambda: [tiny_model(num_heads=1, batch_ensemble_size=3)], {}, 3),  # BatchEnsemble
    ],
)
def test_every_method_averages_its_members(data, make, kwargs, members):
    results, _ = MethodEvaluator(make(), data, ProbeArguments(probe_epochs=2), fast(), **kwargs).run()
    assert results.members == members
    assert 0 <= results.test.disagreement_over_error < 10
    assert "mutual_information" in results.ood["uniform"]


def test_bad_evaluation_data_is_refused():
    images, labels = torch.rand(4, 1, 28, 28), torch.tensor([0, 1, 2, 1])
    with pytest.raises(ValueError, match="same class set"):
        ImageEvaluationData(images, labels, images, torch.tensor([0, 1, 5, 1]), {}, MEAN, STD, 3)
    with pytest.raises(ValueError, match="no labels"):
        ImageEvaluationData(images, None, images, labels, {}, MEAN, STD, 3)
    with pytest.raises(ValueError, match="OOD set 'cifar'"):
        ImageEvaluationData(images, labels, images, labels, {"cifar": torch.rand(2, 3, 32, 32)}, MEAN, STD, 3)
    with pytest.raises(ValueError, match="corruptions must be one of"):
        HarnessArguments(corruptions=["hail"])
    with pytest.raises(ValueError, match="methods must be one of"):
        ComparisonArguments(methods=["deep_ensemble"])


@pytest.mark.slow
def test_compare_command_writes_table_json_plots_and_reuses_cached_runs_and_evaluations(tmp_path, capsys, monkeypatch):
    out = tmp_path / "compare"
    argv = compare_argv(
        out, train_per_class=12, test_per_class=6, ood_images=30, logging_steps=1, probe_epochs=3,
        mc_dropout_passes=2, corruption_images=8, corruptions=["gaussian_noise", "contrast"],
    )
    evaluate = MethodEvaluator.run

    def slow_evaluation(self):  # the harness is silent while it runs: minutes at full size, here 0.3 s
        time.sleep(0.3)
        return evaluate(self)

    monkeypatch.setattr(MethodEvaluator, "run", slow_evaluation)
    monkeypatch.setattr("insub_hf.jobs.heartbeat.HEARTBEAT_SECONDS", 0.1)  # 30 s in a real run
    assert main(argv) == 0
    printed = capsys.readouterr().out
    for method in ("baseline", "insub"):  # a line while each evaluation runs
        assert re.search(rf"^\[evaluation of {method} \(seed 0\)\] still running: \d+ s$", printed, re.M), method
    results = json.loads((out / "results.json").read_text())
    names = [row["name"] for row in results["rows"]]
    assert names == ["Baseline", "SSL-Ensemble (M=2)", "MC Dropout (T=2)", "BatchEnsemble (M=2)", "InSub (M=2)",
                     "InSub cosine control (M=2)", "Finetune-InSub (M=2)"]
    assert [row["members"] for row in results["rows"]] == [1, 2, 2, 2, 1, 1, 2]
    assert set(results["data"]["ood"]) == {"uniform", "gaussian", "mnist", "digits8x8"}
    ensemble, insub = results["rows"][1], results["rows"][4]
    assert ensemble["cost"]["pretrained_models"] == 2
    assert ensemble["cost"]["parameters"] == 2 * results["rows"][0]["cost"]["parameters"]
    assert insub["cost"]["parameters"] > results["rows"][0]["cost"]["parameters"]
    table = (out / "results.md").read_text()
    assert "| Method | Members | Acc | k-NN Acc | ECE | TACE | NLL | Brier |" in table and "| InSub (M=2) | 1 |" in table
    # calibration raw and after temperature scaling, selective prediction, retrieval, the crop test, FPR95
    assert ("| Method | T | ECE | ECE (T) | NLL | NLL (T) | AURC | AUGRC | R-AUROC MSP | R-AUROC k-NN | "
            "R-AUROC head spread | R-AUROC calibrated | crop rho MSP | crop rho k-NN | crop rho head spread | "
            "crop rho calibrated |") in table
    assert "FPR at 95 % TPR" in table
    assert "| Method | uniform: MSP | uniform: k-NN | uniform: head spread | uniform: calibrated |" in table
    # each single model's calibrated uncertainty, and how many test images it flags at 0.95; an ensemble's mean of
    # ranks is no calibrated reading, so it reports none
    assert "Test images whose calibrated `uncertainty` is above 0.95" in table
    by_name = {row["name"]: row for row in results["rows"]}
    assert 0 <= by_name["InSub (M=2)"]["flag_rate"] <= 1 and by_name["SSL-Ensemble (M=2)"]["flag_rate"] is None
    assert "uncertainty" in by_name["InSub (M=2)"]["ood"]["mnist"]
    for row in results["rows"]:
        test = row["test"]
        assert test["temperature"] > 0 and 0 <= test["ece_scaled"] <= 1 and test["nll_scaled"] > 0
        assert 0 <= row["selective"]["augrc"] <= row["selective"]["aurc"] <= 1
        assert set(row["ood_fpr95"]) == set(row["ood"]) and all(0 <= v <= 1 for v in row["ood_fpr95"]["mnist"].values())
        assert -1 <= row["crop"]["knn"]["spearman"] <= 1 and "knn" in row["retrieval"]
    assert "head_spread" in insub["crop"] and "head_spread" not in results["rows"][0]["crop"]
    for plot in ("reliability", "metrics_vs_m", "sigma_over_training", "ood_scores", "corruptions"):
        assert (out / f"{plot}.png").read_bytes()[:4] == b"\x89PNG"
    # baseline, one more ensemble member, MC dropout, BatchEnsemble, InSub, its control (Finetune-InSub reuses InSub)
    runs = sorted((out / "cache").iterdir())
    assert len(runs) == 6
    stamps = {run: (run / "model" / "model.safetensors").stat().st_mtime_ns for run in runs}
    capsys.readouterr()
    assert "holds a finished run" in cli_error(argv, capsys)  # the results are kept ...
    assert len(list((out / "evaluation_cache").iterdir())) == 7  # one finished evaluation per method
    for plot in ("reliability", "ood_scores"):
        (out / f"{plot}.png").unlink()

    def evaluated_again(self):
        raise AssertionError("a cached evaluation was computed again")

    monkeypatch.setattr(MethodEvaluator, "run", evaluated_again)
    assert main([*argv, "--overwrite_output_dir"]) == 0  # ... unless asked; finished runs are still reused
    assert "{'loss'" not in capsys.readouterr().out  # nothing was pretrained again
    assert {run: (run / "model" / "model.safetensors").stat().st_mtime_ns for run in runs} == stamps
    again = json.loads((out / "results.json").read_text())
    assert again["rows"] == results["rows"]  # every number, evaluation time included, from the evaluation cache
    for plot in ("reliability", "ood_scores"):  # the plots' per-sample arrays come back from it too
        assert (out / f"{plot}.png").read_bytes()[:4] == b"\x89PNG"
    # another evaluation setting is another entry: evaluated, not taken from the cache
    with pytest.raises(AssertionError, match="a cached evaluation was computed again"):
        main([*argv, "--overwrite_output_dir", "--probe_epochs", "4"])


def test_label_free_scores_are_the_detectors_fitted_on_the_unlabelled_training_images(data):
    from insub_hf import InSubOODDetector

    torch.manual_seed(0)
    model = tiny_model()
    results, arrays = MethodEvaluator([model], data, ProbeArguments(probe_epochs=2), fast(knn_k=7)).run()
    noise = noise_ood_sets(min(CALIBRATION_IMAGES, len(data.train_images)), tuple(data.train_images.shape[1:]),
                           seed=CALIBRATION_SEED)
    # the model's own detector with every training image as its bank: what the harness measures
    detector = InSubOODDetector.fit(model, data.inputs(data.train_images), k=7,
                                    calibration_inputs=data.inputs(torch.cat(list(noise.values()))))
    calibration = results.head_spread_calibration[0]
    assert detector.calibration == calibration
    model.config.set_uncertainty(direction=calibration.direction)  # the harness reads the spread in that direction
    test, ood = detector.score(data.inputs(data.test_images)), detector.score(data.inputs(data.ood_images["uniform"]))
    for key in ("knn", "head_spread"):  # the detector's scores as they are: higher = more likely OOD
        torch.testing.assert_close(arrays["scores"]["in"][key], test[key].double(), atol=1e-6, rtol=0)
        auroc = metrics.ood_auroc(test[key], ood[key], higher_is_in=False)
        assert results.ood["uniform"][key] == pytest.approx(auroc, abs=1e-9), key


def test_sklearn_digits_are_an_ood_set_of_the_target_geometry():
    from sklearn.datasets import load_digits

    from insub_hf.evaluation.ood_sets import load_sklearn_digits

    images = load_sklearn_digits(50, (3, 28, 28), seed=0)
    assert images.shape == (50, 3, 28, 28) and images.min() >= 0 and images.max() <= 1
    assert torch.equal(images[:, 0], images[:, 2])  # grey repeated over the channels
    small = torch.nn.functional.avg_pool2d(images[:, :1], 7, divisor_override=None)  # back to 4x4 blocks
    assert small.std() > 0.1  # real strokes, not a blank image
    again = load_sklearn_digits(50, (3, 28, 28), seed=0)
    assert torch.equal(images, again) and len(load_digits().images) == 1797
    with pytest.raises(ValueError, match="count must be an integer >= 1 and <= 1797"):
        load_sklearn_digits(2000, (1, 28, 28))


def test_results_refuse_nan_and_fractions_out_of_range():
    good = {"members": 1, "test": {"accuracy": 0.8, "nll": 0.5, "ece": 0.02, "tace": 0.01, "brier": 0.3},
            "ood": {"mnist": {"msp": 0.7, "knn": 0.9}}}
    assert MethodResults.from_dict(good).ood == {"mnist": {"msp": 0.7, "knn": 0.9}}
    with pytest.raises(ValueError, match=r"Metrics.accuracy must be a number >= 0.0 and <= 1.0, got nan"):
        MethodResults.from_dict({**good, "test": {**good["test"], "accuracy": float("nan")}})
    with pytest.raises(ValueError, match=r"MethodResults.ood\['mnist'\]\['knn'\] \(an AUROC\) must be .* got 1.7"):
        MethodResults.from_dict({**good, "ood": {"mnist": {"msp": 0.7, "knn": 1.7}}})
    with pytest.raises(ValueError, match=r"Metrics.brier must be a number >= 0.0 and <= 2.0, got 2.5"):
        MethodResults.from_dict({**good, "test": {**good["test"], "brier": 2.5}})
    with pytest.raises(ValueError, match=r"MethodResults.knn_accuracy must be .* got inf"):
        MethodResults.from_dict({**good, "knn_accuracy": float("inf")})

"""The uncertainty harness: from frozen models to every number of the paper's tables for one method.

A method is a list of pretrained models (one, or M for a deep ensemble) plus how its members arise
(BatchEnsemble members, MC-dropout passes, M probes for Finetune-InSub). Member probabilities are averaged
before any metric, and the results say how many members went into each prediction (`MethodResults`).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from ..uncertainty.knn import encoder_and_heads_fingerprint
from ..validation import CheckedArguments, checked
from . import metrics
from .corruptions import CORRUPTIONS, SEVERITIES, centre_crop, corrupt
from .features import FeatureSet, extract_features, models_reading
from .flagging import flag_rate
from .image_data import ImageEvaluationData
from .knn import knn_accuracy
from ..uncertainty.readings import is_calibrated
from ..uncertainty.settings import DEFAULT_K
from .ood_detector import FeatureBank, calibration_noise
from .probes import ProbeArguments, balanced_label_subset, fit_probes, member_probabilities, train_val_split
from .results import CorruptionMetrics, HeadSpreadCalibration, MethodResults, Metrics

# The crop test's centre crops (share of each side kept; 1.0: the whole image)
CROP_FRACTIONS = (1.0, 0.75, 0.5, 0.25)
# The scores the crop test and R-AUROC read (each higher = less certain), where the method has them
UNCERTAINTY_SCORES = ("msp", "entropy", "mutual_information", "knn", "head_spread", "uncertainty")


@dataclass
class HarnessArguments(CheckedArguments):
    """What the harness evaluates beyond the clean test set."""

    _argument_group_name = 'evaluation'

    mc_dropout_passes: int = checked(5, "T stochastic passes of the MC Dropout method.", low=1, integer=True)
    corruption_images: int = checked(100, "Test images per corruption and severity.", low=1, integer=True)
    corruptions: list[str] = checked(
        default_factory=lambda: sorted(CORRUPTIONS), help="Corruption types to evaluate.", choices=sorted(CORRUPTIONS)
    )
    label_fractions: list[float] = checked(
        default_factory=lambda: [0.01, 0.1], help="Semi-supervised label fractions.", low=0, high=1,
        low_inclusive=False,
    )
    eval_batch_size: int = checked(500, "Inputs per forward pass at evaluation.", low=1, integer=True)
    knn_k: int = checked(
        DEFAULT_K, "k of the label-free nearest-neighbour OOD scores (Sun et al. 2022: 50).", low=1, integer=True
    )
    knn_classifier_k: int = checked(
        20, "k of the k-NN classifier whose test accuracy is reported beside the probe's (cosine, majority vote).",
        low=1, integer=True,
    )


def summarize(member_probs: torch.Tensor, labels: torch.Tensor, temperature: float | None = None) -> Metrics:
    """Accuracy, NLL, ECE, TACE, Brier of the averaged members `(N, K, C)`, their diversity when K > 1 and, given a
    `temperature`, the ECE and NLL of the averaged prediction scaled by it."""
    probs = member_probs.mean(dim=1)
    scaled = metrics.temperature_scale(probs, temperature) if temperature is not None else None
    return Metrics(
        accuracy=metrics.accuracy(probs, labels), nll=metrics.nll(probs, labels),
        ece=metrics.expected_calibration_error(probs, labels),
        tace=metrics.thresholded_adaptive_calibration_error(probs, labels), brier=metrics.brier_score(probs, labels),
        disagreement_over_error=metrics.normalized_disagreement(member_probs, labels)
        if member_probs.shape[1] > 1 else None,
        temperature=temperature,
        ece_scaled=metrics.expected_calibration_error(scaled, labels) if scaled is not None else None,
        nll_scaled=metrics.nll(scaled, labels) if scaled is not None else None,
    )


def ood_scores(
    member_probs: torch.Tensor, head_sigma: torch.Tensor | None, label_free: dict[str, torch.Tensor] | None = None
) -> dict[str, torch.Tensor]:
    """Per-input scores `(N,)` under the names of `OOD_SCORES`, each higher = more likely OOD: the negative max
    probability, the entropy, the mutual information (K > 1); given `label_free` (`FeatureBank` scores, no
    probe): the k-th neighbour distance of the representation for every model and, for models with heads
    (`head_sigma` not None), the per-head ones, their spread and the oriented head spread."""
    probs = member_probs.mean(dim=1)
    scores = {"msp": -metrics.max_probability(probs), "entropy": metrics.predictive_entropy(probs)}
    if member_probs.shape[1] > 1:
        scores["mutual_information"] = metrics.mutual_information(member_probs)
    for key, value in (label_free or {}).items():
        if key in ("knn", "uncertainty") or head_sigma is not None:
            scores[key] = value.double()
    return scores


@torch.no_grad()
def ood_auroc(in_scores: torch.Tensor, out_scores: torch.Tensor) -> float:
    """AUROC of telling in-distribution from OOD inputs by a score where higher = more likely OOD."""
    return metrics.ood_auroc(in_scores, out_scores, higher_is_in=False)


class MethodEvaluator:
    """Evaluates one method on `ImageEvaluationData`, in explicit steps that can be called one by one:

    1. `extract_training_features()`: each frozen model's features of the training images;
    2. `fit_probes()`: linear probes on them (P per model for Finetune-InSub);
    3. `fit_detectors()`: the label-free k-NN detectors on the same features, and each model's head-spread direction
       fixed on noise drawn for this only;
    4. `evaluate()` -> `(MethodResults, arrays)`: test metrics, OOD, semi-supervised probes, corruptions.

    `run()` runs the four.

    Args:
        models: the pretrained models whose members are averaged (M models for a deep ensemble).
        data: the images.
        probe_args, harness_args: probe training and what to evaluate.
        num_probes: P > 1 trains P probes per model on its representation (Finetune-InSub).
        mc_dropout: sample `harness_args.mc_dropout_passes` dropout masks at test.
    """

    def __init__(
        self, models: list, data: ImageEvaluationData, probe_args: ProbeArguments, harness_args: HarnessArguments,
        num_probes: int = 1, mc_dropout: bool = False,
    ):
        self.models, self.data, self.probe_args, self.harness_args = models, data, probe_args, harness_args
        self.num_probes = num_probes
        self.passes = harness_args.mc_dropout_passes if mc_dropout else 0
        self.has_heads = any(getattr(m, "config", None) is not None and m.config.num_heads > 1 for m in models)
        self.training_features: list[FeatureSet] | None = None
        self.probes: list | None = None
        self.detectors: list[FeatureBank] | None = None
        # k-NN searches run where the (first) model runs; features come back to the CPU for the metrics and the
        # probes, whose thousands of tiny steps a CPU runs faster than a GPU launches them (H200, 2026-11-28: 19-22 s
        # per model on the GPU; docs/benchmarks.md)
        self.device = next(models[0].parameters()).device
        self.seconds: dict[str, float] = {}  # wall seconds of each part (`benchmarks/eval_cost.py`)

    @contextmanager
    def _timed(self, part: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[part] = self.seconds.get(part, 0.0) + time.perf_counter() - start

    def _require(self, step: str, value):
        if value is None:
            raise RuntimeError(f"MethodEvaluator: call {step}() first (or run()).")
        return value

    def extract_training_features(self) -> list[FeatureSet]:
        """Step 1: per model, the training images' representations `(N, S, d)`, head embeddings and spread."""
        data = self.data
        with self._timed("features"):
            self.training_features = [
                self._features(m, data.inputs(data.train_images, data.train_labels), 0, keep_heads=True)
                for m in self.models
            ]
        return self.training_features

    def fit_probes(self) -> list:
        """Step 2: per model, `num_probes` linear probes on its training representations."""
        features = self._require("extract_training_features", self.training_features)
        with self._timed("probe"):
            self.probes = [
                fit_probes(f.representations, f.labels, self.data.num_classes, self.num_probes, self.probe_args)
                for f in features
            ]
        return self.probes

    def fit_detectors(self) -> list[FeatureBank]:
        """Step 3: per model, a label-free nearest-neighbour detector on its unlabelled training features (it keeps
        the head embeddings), with the head spread's direction fixed on the training images against noise drawn
        for this only."""
        features = self._require("extract_training_features", self.training_features)
        knn_k = self.harness_args.knn_k
        with self._timed("detectors"):
            self.detectors = [
                FeatureBank(f.representations.mean(dim=1), f.head_embeddings, min(knn_k, len(f.labels)),
                            bank_sigma=f.head_sigma, device=self.device)
                for f in features
            ]
            for f in features:
                f.head_embeddings = None  # the detectors keep them
            calibration = self.data.inputs(calibration_noise(self.data.train_images))
            for model, detector in zip(self.models, self.detectors):
                detector.calibrate(self._features(model, calibration, 0).head_sigma)
        return self.detectors

    @property
    def head_spread_calibration(self) -> list[HeadSpreadCalibration]:
        """Per model: the direction the head spread is read in (+1: high = OOD) and its validation AUROC."""
        return [d.calibration for d in self._require("fit_detectors", self.detectors)]

    def _features(self, model, inputs, passes: int, keep_heads: bool = False) -> FeatureSet:
        return extract_features(model, inputs, self.harness_args.eval_batch_size, passes, keep_heads=keep_heads)

    def predict(
        self, images: torch.Tensor, probes: list | None = None, label_free: bool = False, head_scores: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, torch.Tensor] | None]:
        """Member probabilities `(N, K, C)`, mean head spread `(N,)` (None without multi-head models) and, with
        `label_free`, the `FeatureBank` scores averaged over the models (else None); `head_scores=False` skips
        the per-head k-NN searches."""
        features = self.features_of(images, keep_heads=label_free and head_scores)
        return self.predict_features(features, probes, label_free)

    def features_of(self, images: torch.Tensor, keep_heads: bool = False) -> list[FeatureSet]:
        """Per model, the features of `images` `(N, C, H, W)` in [0, 1] (with the method's dropout passes)."""
        return [self._features(model, self.data.inputs(images), self.passes, keep_heads=keep_heads)
                for model in self.models]

    def predict_features(
        self, features: list[FeatureSet], probes: list | None = None, label_free: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, torch.Tensor] | None]:
        """`predict` of features already extracted (`features_of`): the same features serve several probes."""
        probes = probes or self._require("fit_probes", self.probes)
        detectors = self._require("fit_detectors", self.detectors) if label_free else None
        probs, sigmas, free = [], [], []
        for i, f in enumerate(features):
            probs.append(member_probabilities(probes[i], f.representations))
            sigmas.append(f.head_sigma)
            if label_free:
                free.append(detectors[i].score_features(
                    f.representations.mean(dim=1), f.head_embeddings, f.head_sigma
                ))
                own = models_reading(self.models[i], f)
                if own is not None:
                    free[-1]["uncertainty"] = own
        sigma = torch.stack(sigmas).mean(dim=0) if self.has_heads else None
        scores = {k: torch.stack([f[k] for f in free]).mean(dim=0) for k in free[0]} if free else None
        return torch.cat(probs, dim=1), sigma, scores

    def run(self) -> tuple[MethodResults, dict]:
        """The four steps; returns what `evaluate` returns."""
        self.extract_training_features()
        self.fit_probes()
        self.fit_detectors()
        return self.evaluate()

    def evaluate(self) -> tuple[MethodResults, dict]:
        """Step 4: returns (the results, arrays for the plots: `reliability` bins and `scores[split][name]`)."""
        data = self.data
        with self._timed("test"):  # the test images' features, once: the probes, k-NN and retrieval all read them
            test_features = self.features_of(data.test_images, keep_heads=True)
            test_probs, test_sigma, test_free = self.predict_features(test_features, label_free=True)
        confidence, predicted = test_probs.mean(dim=1).max(dim=1)
        correct = predicted == data.test_labels
        with self._timed("ts"):
            temperature = self.temperature()
        representations = self._representations(test_features[0])
        with self._timed("knn_accuracy"):
            knn = self._knn_accuracy(representations)
        results = MethodResults(
            members=test_probs.shape[1], test=summarize(test_probs, data.test_labels, temperature),
            selective={"aurc": metrics.aurc(confidence, correct), "augrc": metrics.augrc(confidence, correct)},
            knn_accuracy=knn,
            head_spread_calibration=self.head_spread_calibration if self.has_heads else [],
            fingerprints=[encoder_and_heads_fingerprint(m) for m in self.models],
            modality=self.models[0].config.modality,
        )
        if test_free is not None and "uncertainty" in test_free and len(self.models) == 1 and (
                is_calibrated(getattr(self.models[0], "insub", self.models[0]).config.uncertainty)):
            results.flag_rate = flag_rate(test_free["uncertainty"])
        bins = metrics.reliability_bins(test_probs.mean(dim=1), data.test_labels)
        arrays = {"reliability": bins, "scores": {"in": ood_scores(test_probs, test_sigma, test_free)}}
        with self._timed("ood"):
            for name, images in data.ood_images.items():
                scores = ood_scores(*self.predict(images, label_free=True))
                arrays["scores"][name] = scores
                results.ood[name] = {key: ood_auroc(arrays["scores"]["in"][key], value)
                                     for key, value in scores.items()}
                results.ood_fpr95[name] = {
                    key: metrics.fpr_at_tpr(arrays["scores"]["in"][key], value, higher_is_in=False)
                    for key, value in scores.items()
                }
        with self._timed("retrieval"):
            results.retrieval = self._retrieval(arrays["scores"]["in"], representations)
        with self._timed("crops"):
            results.crop = self._crop_test()
        with self._timed("semi_supervised"):
            results.semi_supervised = self._semi_supervised(test_features)
        with self._timed("corruptions"):
            results.corruptions = self._corruptions(arrays["scores"]["in"])
        if results.corruptions:
            results.corruption_mean = {
                severity: _mean_metrics([per_type[severity] for per_type in results.corruptions.values()])
                for severity in map(str, SEVERITIES)
            }
        return results, arrays

    def temperature(self) -> float | None:
        """The temperature of the method's averaged prediction, fitted by NLL on the probes' validation split of the
        training images (held apart from probe training, where it chose the epoch; never the test split; for P
        Finetune-InSub probes, the first probe's split). None without a validation split."""
        _, val = train_val_split(len(self.data.train_labels), self.probe_args.probe_val_fraction,
                                 self.probe_args.probe_seed)
        if len(val) == 0:
            return None
        if self.passes == 0 and self.training_features is not None:  # deterministic: the training features' rows
            features = [FeatureSet(f.representations[val], f.head_sigma[val]) for f in self.training_features]
        else:
            features = self.features_of(self.data.train_images[val])
        probs, _, _ = self.predict_features(features)
        return metrics.fit_temperature(probs.mean(dim=1), self.data.train_labels[val])

    def _representations(self, test: FeatureSet) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The first model's training and test representations (mean over its members) and the training labels, on
        the model's device (the k-NN classifier and retrieval search there). `test`: the first model's test
        features."""
        train = self._require("extract_training_features", self.training_features)[0]
        return (train.representations.mean(dim=1).to(self.device), test.representations.mean(dim=1).to(self.device),
                train.labels.to(self.device))

    def _knn_accuracy(self, representations: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> float:
        """The k-NN classifier's test accuracy on the first model's representation (`_representations`)."""
        train, test, labels = representations
        return knn_accuracy(train, labels, test, self.data.test_labels.to(self.device),
                            self.harness_args.knn_classifier_k)

    def _retrieval(self, test_scores: dict[str, torch.Tensor],
                   representations: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> dict[str, float | None]:
        """R-AUROC of each uncertainty score: does it predict that the test input's nearest training representation
        (cosine; the first model's, `_representations`) has another class? None where no retrieval was wrong (or all
        were)."""
        train, test, labels = representations
        errors = metrics.nearest_neighbour_errors(test, self.data.test_labels.to(self.device), train, labels).cpu()
        out = {key: metrics.r_auroc(test_scores[key], errors) for key in UNCERTAINTY_SCORES if key in test_scores}
        return {key: None if value != value else value for key, value in out.items()}

    def _crop_test(self) -> dict[str, dict[str, float | None]]:
        """The crop test of each uncertainty score on the first `corruption_images` test images: their centre crops
        at `CROP_FRACTIONS`, resized back, scored as the test images are."""
        images = self.data.test_images[: min(self.harness_args.corruption_images, len(self.data.test_images))]
        per_fraction = [ood_scores(*self.predict(centre_crop(images, f), label_free=True, head_scores=False))
                        for f in CROP_FRACTIONS]
        out = {}
        for key in UNCERTAINTY_SCORES:
            if key in per_fraction[0]:
                test = metrics.crop_test(torch.stack([scores[key] for scores in per_fraction], dim=1), CROP_FRACTIONS)
                spearman = None if test.spearman != test.spearman else test.spearman  # constant scores: no ranking
                out[key] = {"spearman": spearman, "smaller_crop_higher": test.smaller_crop_higher}
        return out

    def _semi_supervised(self, test_features: list[FeatureSet]) -> dict[str, Metrics]:
        """Probes on class-balanced label subsets of the training features, read on the test features."""
        out = {}
        features = self._require("extract_training_features", self.training_features)
        for fraction in self.harness_args.label_fractions:
            subset = balanced_label_subset(self.data.train_labels, fraction, self.probe_args.probe_seed)
            probes = [
                fit_probes(f.representations[subset], f.labels[subset], self.data.num_classes, self.num_probes,
                           self.probe_args)
                for f in features
            ]
            test_probs, _, _ = self.predict_features(test_features, probes)
            out[f"{100 * fraction:g}%"] = summarize(test_probs, self.data.test_labels)
        return out

    def _corruptions(self, clean: dict[str, torch.Tensor]) -> dict[str, dict[str, CorruptionMetrics]]:
        """Per corruption and severity: accuracy, ECE, TACE, and the AUROC of telling the corrupted test images from
        their clean versions (`clean`: the clean images' scores) by the probe's max probability, by the label-free
        k-NN distance and, for M > 1, by the oriented head spread."""
        n = min(self.harness_args.corruption_images, len(self.data.test_images))
        images, labels = self.data.test_images[:n], self.data.test_labels[:n]
        out = {}
        for name in self.harness_args.corruptions:
            out[name] = {}
            for severity in SEVERITIES:
                probs, sigma, free = self.predict(
                    corrupt(images, name, severity, seed=severity), label_free=True, head_scores=False
                )  # only the representation's k-NN and the spread are read here
                scores = ood_scores(probs, sigma, free)
                mean = probs.mean(dim=1)
                out[name][str(severity)] = CorruptionMetrics(
                    accuracy=metrics.accuracy(mean, labels),
                    ece=metrics.expected_calibration_error(mean, labels),
                    tace=metrics.thresholded_adaptive_calibration_error(mean, labels),
                    auroc_msp=ood_auroc(clean["msp"][:n], scores["msp"]),
                    auroc_knn=ood_auroc(clean["knn"][:n], scores["knn"]),
                    auroc_head_spread=ood_auroc(clean["head_spread"][:n], scores["head_spread"])
                    if self.has_heads else None,
                )
        return out


def _mean_metrics(items: list[CorruptionMetrics]) -> CorruptionMetrics:
    """The field-wise mean of corruption metrics (None stays None)."""
    def mean(name):
        values = [getattr(m, name) for m in items]
        return None if None in values else sum(values) / len(values)

    return CorruptionMetrics(**{name: mean(name) for name in CorruptionMetrics.__dataclass_fields__})

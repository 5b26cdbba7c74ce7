"""The uncertainty harness: from frozen models to every number of the paper's tables for one method.

A method is a list of pretrained models (one, or M for a deep ensemble) plus how its members arise
(BatchEnsemble members, MC-dropout passes, M probes for Finetune-InSub). Member probabilities are averaged
before any metric, and the outputs say how many members went into each prediction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..validation import CheckedArguments, check_choice, check_range, checked
from . import metrics
from .corruptions import CORRUPTIONS, SEVERITIES, corrupt
from .features import extract_features
from .ood_detector import CALIBRATION_IMAGES, CALIBRATION_SEED, DEFAULT_K, InSubOODDetector
from .ood_sets import check_same_geometry, noise_ood_sets, normalize_images
from .probes import ProbeArguments, balanced_label_subset, check_probe_labels, fit_probes, member_probabilities


@dataclass
class ImageEvaluationData:
    """In-distribution and OOD images in [0, 1], with the normalisation the encoder was trained with.

    Attributes:
        train_images: `(N, C, H, W)`; train_labels: `(N,)` (probe training).
        test_images: `(T, C, H, W)`; test_labels: `(T,)`.
        ood_images: name -> `(K, C, H, W)` images of the same geometry.
        mean, std: per-channel normalisation.
        num_classes: C.
    """

    train_images: torch.Tensor
    train_labels: torch.Tensor | None
    test_images: torch.Tensor
    test_labels: torch.Tensor | None
    ood_images: dict[str, torch.Tensor]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    num_classes: int

    def __post_init__(self) -> None:
        check_probe_labels(self.train_labels, self.num_classes, "training")
        check_probe_labels(self.test_labels, self.num_classes, "test")
        for name, images in self.ood_images.items():
            check_same_geometry(name, images, self.test_images)

    def inputs(self, images: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        batch = {"pixel_values": normalize_images(images, self.mean, self.std)}
        return batch if labels is None else {**batch, "labels": labels}


@dataclass
class HarnessArguments(CheckedArguments):
    """What the harness evaluates beyond the clean test set."""

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


def summarize(member_probs: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """Accuracy, NLL, ECE, TACE, Brier of the averaged members `(N, K, C)`, and their diversity when K > 1."""
    probs = member_probs.mean(dim=1)
    out = {
        "accuracy": metrics.accuracy(probs, labels),
        "nll": metrics.nll(probs, labels),
        "ece": metrics.expected_calibration_error(probs, labels),
        "tace": metrics.thresholded_adaptive_calibration_error(probs, labels),
        "brier": metrics.brier_score(probs, labels),
    }
    if member_probs.shape[1] > 1:
        out["disagreement_over_error"] = metrics.normalized_disagreement(member_probs, labels)
    return out


# Label-free scores of `InSubOODDetector` (higher = OOD) under the harness's names (higher = in-distribution)
LABEL_FREE = {"knn": "neg_knn", "knn_heads": "neg_knn_heads", "knn_heads_spread": "neg_knn_heads_spread",
              "head_spread": "neg_head_spread"}


def ood_scores(
    member_probs: torch.Tensor, head_sigma: torch.Tensor | None, label_free: dict[str, torch.Tensor] | None = None
) -> dict[str, torch.Tensor]:
    """Per-input scores, each oriented so that higher means in-distribution: max probability, negative
    entropy, negative mutual information (K > 1); label-free, with no probe, given `label_free` (`InSubOODDetector`
    scores): the negative k-th neighbour distances (representation for every model; per head, and their spread over
    heads, for M > 1) and, for M > 1 (`head_sigma` not None), the head spread in the direction each model's detector
    fixed on validation noise (`neg_head_spread`)."""
    probs = member_probs.mean(dim=1)
    scores = {"msp": metrics.max_probability(probs), "neg_entropy": -metrics.predictive_entropy(probs)}
    if member_probs.shape[1] > 1:
        scores["neg_mutual_information"] = -metrics.mutual_information(member_probs)
    for key, value in (label_free or {}).items():
        if key == "knn" or head_sigma is not None:
            scores[LABEL_FREE[key]] = -value.double()
    return scores


class MethodEvaluator:
    """Evaluates one method on `ImageEvaluationData`.

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
        self._train = [
            self._features(m, data.inputs(data.train_images, data.train_labels), 0, keep_heads=True) for m in models
        ]
        self._probes = [
            fit_probes(f.representations, f.labels, data.num_classes, num_probes, probe_args) for f in self._train
        ]
        # label-free: one nearest-neighbour detector per model on its unlabelled training features
        self._detectors = [
            InSubOODDetector(f.representations.mean(dim=1), f.head_embeddings, min(harness_args.knn_k, len(f.labels)),
                             bank_sigma=f.head_sigma)
            for f in self._train
        ]
        for f in self._train:
            f.head_embeddings = None  # the detectors keep them
        # the head spread's direction, per model, from the training images against noise drawn for this only
        noise = noise_ood_sets(
            min(CALIBRATION_IMAGES, len(data.train_images)), tuple(data.train_images.shape[1:]), seed=CALIBRATION_SEED
        )
        calibration = data.inputs(torch.cat(list(noise.values())))
        for model, detector in zip(models, self._detectors):
            detector.calibrate_head_spread(self._features(model, calibration, 0).head_sigma)

    @property
    def head_spread_calibration(self) -> list[dict[str, float | int | None]]:
        """Per model: the direction the head spread was read in (+1: high = OOD) and its validation AUROC."""
        return [{"direction": d.spread_direction, "validation_auroc": d.spread_validation_auroc}
                for d in self._detectors]

    def _features(self, model, inputs, passes: int, keep_heads: bool = False):
        return extract_features(model, inputs, self.harness_args.eval_batch_size, passes, keep_heads=keep_heads)

    def predict(
        self, images: torch.Tensor, probes: list | None = None, label_free: bool = False, head_scores: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, torch.Tensor] | None]:
        """Member probabilities `(N, K, C)`, mean head spread `(N,)` (None without multi-head models) and, with
        `label_free`, the `InSubOODDetector` scores averaged over the models (else None); `head_scores=False` skips
        the per-head k-NN searches."""
        probs, sigmas, free = [], [], []
        for i, model in enumerate(self.models):
            features = self._features(
                model, self.data.inputs(images), self.passes, keep_heads=label_free and head_scores
            )
            probs.append(member_probabilities((probes or self._probes)[i], features.representations))
            sigmas.append(features.head_sigma)
            if label_free:
                free.append(self._detectors[i].score_features(
                    features.representations.mean(dim=1), features.head_embeddings, features.head_sigma
                ))
        sigma = torch.stack(sigmas).mean(dim=0) if self.has_heads else None
        scores = {k: torch.stack([f[k] for f in free]).mean(dim=0) for k in free[0]} if free else None
        return torch.cat(probs, dim=1), sigma, scores

    def run(self) -> tuple[dict, dict]:
        """Returns (numbers for the JSON/table, arrays for the plots)."""
        data = self.data
        test_probs, test_sigma, test_free = self.predict(data.test_images, label_free=True)
        results = {"members": test_probs.shape[1], "test": summarize(test_probs, data.test_labels)}
        if self.has_heads:
            results["head_spread_calibration"] = self.head_spread_calibration
        bins = metrics.reliability_bins(test_probs.mean(dim=1), data.test_labels)
        arrays = {"reliability": bins, "scores": {"in": ood_scores(test_probs, test_sigma, test_free)}}
        results["ood"] = {}
        for name, images in data.ood_images.items():
            scores = ood_scores(*self.predict(images, label_free=True))
            arrays["scores"][name] = scores
            results["ood"][name] = {
                key: metrics.ood_auroc(arrays["scores"]["in"][key], value) for key, value in scores.items()
            }
        results["semi_supervised"] = self._semi_supervised()
        results["corruptions"] = self._corruptions(arrays["scores"]["in"])
        keys = ("accuracy", "ece", "tace", "auroc", "auroc_knn", *(("auroc_head_spread",) if self.has_heads else ()))
        results["corruption_mean"] = {
            severity: {
                key: sum(per_type[severity][key] for per_type in results["corruptions"].values())
                / len(results["corruptions"])
                for key in keys
            }
            for severity in map(str, SEVERITIES)
        } if results["corruptions"] else {}
        return results, arrays

    def _semi_supervised(self) -> dict[str, dict[str, float]]:
        out = {}
        for fraction in self.harness_args.label_fractions:
            subset = balanced_label_subset(self.data.train_labels, fraction, self.probe_args.probe_seed)
            probes = [
                fit_probes(f.representations[subset], f.labels[subset], self.data.num_classes, self.num_probes,
                           self.probe_args)
                for f in self._train
            ]
            test_probs, _, _ = self.predict(self.data.test_images, probes)
            out[f"{100 * fraction:g}%"] = summarize(test_probs, self.data.test_labels)
        return out

    def _corruptions(self, clean: dict[str, torch.Tensor]) -> dict[str, dict[str, dict[str, float]]]:
        """Accuracy, ECE, TACE per corruption and severity, and the AUROC of telling the clean test images
        (positive; `clean`: their scores) from their corrupted versions by max probability (`auroc`), by the
        label-free negative k-NN distance (`auroc_knn`) and, for M > 1, by the oriented head spread
        (`auroc_head_spread`)."""
        n = min(self.harness_args.corruption_images, len(self.data.test_images))
        images, labels = self.data.test_images[:n], self.data.test_labels[:n]
        out = {}
        for name in self.harness_args.corruptions:
            out[name] = {}
            for severity in SEVERITIES:
                probs, _, free = self.predict(
                    corrupt(images, name, severity, seed=severity), label_free=True, head_scores=False
                )  # only the representation's k-NN is read here
                mean = probs.mean(dim=1)
                out[name][str(severity)] = {
                    "accuracy": metrics.accuracy(mean, labels),
                    "ece": metrics.expected_calibration_error(mean, labels),
                    "tace": metrics.thresholded_adaptive_calibration_error(mean, labels),
                    "auroc": metrics.ood_auroc(clean["msp"][:n], metrics.max_probability(mean)),
                    "auroc_knn": metrics.ood_auroc(clean["neg_knn"][:n], -free["knn"].double()),
                }
                if self.has_heads:
                    out[name][str(severity)]["auroc_head_spread"] = metrics.ood_auroc(
                        clean["neg_head_spread"][:n], -free["head_spread"].double()
                    )
        return out

"""Out-of-distribution detection: uncertainty scores and AUROC with in-distribution as the positive class."""

from __future__ import annotations

import numpy as np
import torch

from ...uncertainty.separation import bootstrap_auroc_interval
from .inputs import check_member_probabilities, check_probabilities

LOG_FLOOR = 1e-12


def max_probability(probabilities) -> torch.Tensor:
    """Maximum softmax probability `(N,)` of probabilities `(N, C)` (Hendrycks & Gimpel 2017): high = in-dist."""
    return check_probabilities(probabilities).max(dim=1).values


def predictive_entropy(probabilities) -> torch.Tensor:
    """Entropy `-sum_c p_c log p_c` `(N,)` of probabilities `(N, C)` (0 log 0 = 0): high = uncertain."""
    probs = check_probabilities(probabilities)
    return -(probs * probs.clamp_min(LOG_FLOOR).log()).sum(dim=1)


def mutual_information(member_probabilities) -> torch.Tensor:
    """Mutual information between prediction and member, `(N,)`, for `(N, S, C)` member probabilities:
    entropy of the mean minus the mean entropy of the members (epistemic part; 0 when members agree).

    References:
        Depeweg et al., "Decomposition of Uncertainty in Bayesian Deep Learning", ICML 2018.
    """
    probs = check_member_probabilities(member_probabilities)
    if probs.shape[1] < 2:
        raise ValueError(
            f"mutual_information needs at least 2 members, got member_probabilities of shape {tuple(probs.shape)} "
            "(N, members, C): with one member it is 0 whatever the input; use predictive_entropy for one model."
        )
    mean = probs.mean(dim=1)
    entropy_of_mean = -(mean * mean.clamp_min(LOG_FLOOR).log()).sum(dim=1)
    mean_entropy = -(probs * probs.clamp_min(LOG_FLOOR).log()).sum(dim=2).mean(dim=1)
    return (entropy_of_mean - mean_entropy).clamp_min(0)


def _ranked(in_scores, out_scores, higher_is_in: bool, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(targets: 1 = in-distribution, scores: higher = in-distribution) of two score sets, checked."""
    in_scores = np.asarray(torch.as_tensor(in_scores, dtype=torch.float64)).ravel()
    out_scores = np.asarray(torch.as_tensor(out_scores, dtype=torch.float64)).ravel()
    if len(in_scores) == 0 or len(out_scores) == 0:
        raise ValueError(f"{metric} needs both sets non-empty, got {len(in_scores)} in and {len(out_scores)} out.")
    scores = np.concatenate([in_scores, out_scores])
    if not np.isfinite(scores).all():
        raise ValueError(f"{metric}: scores contain NaN or inf.")
    targets = np.concatenate([np.ones(len(in_scores)), np.zeros(len(out_scores))])
    return targets, scores if higher_is_in else -scores


def ood_auroc(in_scores, out_scores, higher_is_in: bool = True) -> float:
    """Area under the ROC curve of telling in-distribution (positive) from OOD samples by a score.

    Args:
        in_scores: `(N_in,)` scores of in-distribution samples; out_scores: `(N_out,)` of OOD samples.
        higher_is_in: True for confidence scores (max probability); False for uncertainty scores (entropy,
            mutual information, head spread), which are negated.

    Returns:
        AUROC in [0, 1] (`sklearn.metrics.roc_auc_score`); 0.5 is chance, ties count half.
    """
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(*_ranked(in_scores, out_scores, higher_is_in, "ood_auroc")))


def auroc_interval(in_scores, out_scores, higher_is_in: bool = True, resamples: int = 200, level: float = 0.9,
                   seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval `(low, high)` of `ood_auroc` at `level`: each resample draws both sets again
    with replacement (`resamples` times, a fixed `seed`: the same interval every call). An interval that does not
    hold 0.5 says which way the score separates the two sets beyond resampling noise."""
    sign = 1 if higher_is_in else -1
    return bootstrap_auroc_interval(sign * torch.as_tensor(out_scores).float(), sign * torch.as_tensor(in_scores).float(),
                                    resamples, level, seed)


def fpr_at_tpr(in_scores, out_scores, higher_is_in: bool = True, tpr: float = 0.95) -> float:
    """FPR at 95 % TPR (OpenOOD's FPR95): the share of OOD samples still taken as in-distribution at the strictest
    threshold that keeps `tpr` of the in-distribution samples (in-distribution positive; arguments as `ood_auroc`).
    Lower is better; 0.95 is what a score that cannot tell them apart gives."""
    targets, scores = _ranked(in_scores, out_scores, higher_is_in, "fpr_at_tpr")
    threshold = np.sort(scores[targets == 1])[::-1][int(np.ceil(tpr * (targets == 1).sum())) - 1]
    return float((scores[targets == 0] >= threshold).mean())


def aupr(in_scores, out_scores, higher_is_in: bool = True, positive: str = "in") -> float:
    """Area under the precision-recall curve (`sklearn.metrics.average_precision_score`) with the in-distribution
    samples as positives (`positive="in"`, AUPR-In) or the OOD ones (`"out"`, AUPR-Out, the score negated); arguments
    as `ood_auroc`. Chance is the positives' share."""
    from sklearn.metrics import average_precision_score

    if positive not in ("in", "out"):
        raise ValueError(f"aupr: positive must be one of ['in', 'out'], got {positive!r}.")
    targets, scores = _ranked(in_scores, out_scores, higher_is_in, "aupr")
    return float(average_precision_score(targets, scores) if positive == "in" else
                 average_precision_score(1 - targets, -scores))

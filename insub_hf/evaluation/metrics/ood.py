"""Out-of-distribution detection: uncertainty scores and AUROC with in-distribution as the positive class."""

from __future__ import annotations

import numpy as np
import torch

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
    mean = probs.mean(dim=1)
    entropy_of_mean = -(mean * mean.clamp_min(LOG_FLOOR).log()).sum(dim=1)
    mean_entropy = -(probs * probs.clamp_min(LOG_FLOOR).log()).sum(dim=2).mean(dim=1)
    return (entropy_of_mean - mean_entropy).clamp_min(0)


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

    in_scores = np.asarray(torch.as_tensor(in_scores, dtype=torch.float64)).ravel()
    out_scores = np.asarray(torch.as_tensor(out_scores, dtype=torch.float64)).ravel()
    if len(in_scores) == 0 or len(out_scores) == 0:
        raise ValueError(f"ood_auroc needs both sets non-empty, got {len(in_scores)} in and {len(out_scores)} out.")
    scores = np.concatenate([in_scores, out_scores])
    if not np.isfinite(scores).all():
        raise ValueError("ood_auroc: scores contain NaN or inf.")
    targets = np.concatenate([np.ones(len(in_scores)), np.zeros(len(out_scores))])
    return float(roc_auc_score(targets, scores if higher_is_in else -scores))

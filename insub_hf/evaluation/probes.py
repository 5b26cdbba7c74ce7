"""Probes on frozen representations: the linear probe, Finetune-InSub (M probes, probabilities averaged) and the
seeded, class-balanced label subsets of the semi-supervised protocol."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
from torch import nn

from ..validation import CheckedArguments, check_range, checked

OPTIMIZERS = ("sgd", "adamw")


@dataclass
class ProbeArguments(CheckedArguments):
    """How a probe is trained (on precomputed features, without augmentation)."""

    _argument_group_name = 'evaluation: linear probes'

    probe_optimizer: str = checked("sgd", "sgd (momentum) or adamw.", choices=OPTIMIZERS)
    probe_learning_rate: float = checked(0.1, "Peak learning rate (cosine to 0).", low=0, low_inclusive=False)
    probe_momentum: float = checked(0.9, "SGD momentum.", low=0, high=1)
    probe_weight_decay: float = checked(1e-4, "Weight decay.", low=0)
    probe_epochs: int = checked(100, "Passes over the probe's training split.", low=1, integer=True)
    probe_batch_size: int = checked(256, "Probe mini-batch size.", low=1, integer=True)
    probe_val_fraction: float = checked(
        0.1, "Seeded validation split; the epoch with the lowest validation NLL is kept.", low=0, high=1,
        high_inclusive=False,
    )
    probe_seed: int = checked(0, "Seed of the split, initialisation and batch order.", low=0, integer=True)


class LinearProbe(nn.Module):
    """Standardisation with the training features' statistics, then one Linear layer.

    Shapes: features `(N, d)` -> logits `(N, C)`.
    """

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, num_classes: int):
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)
        self.linear = nn.Linear(mean.shape[0], num_classes)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.linear((features - self.mean) / self.std)


def train_val_split(num_samples: int, val_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded random split of `range(num_samples)` into (train, val) indices; val may be empty."""
    order = torch.randperm(num_samples, generator=torch.Generator().manual_seed(seed))
    num_val = int(round(val_fraction * num_samples))
    return order[num_val:], order[:num_val]


def balanced_label_subset(labels: torch.Tensor, fraction: float, seed: int) -> torch.Tensor:
    """Seeded class-balanced subset: `round(fraction * n_c)` (at least 1) indices of every class c, sorted."""
    check_range("fraction", fraction, low=0, high=1, low_inclusive=False)
    generator = torch.Generator().manual_seed(seed)
    picks = []
    for c in torch.unique(labels):
        members = torch.nonzero(labels == c).flatten()
        count = max(1, int(round(fraction * len(members))))
        picks.append(members[torch.randperm(len(members), generator=generator)[:count]])
    return torch.sort(torch.cat(picks)).values


def check_probe_labels(labels: torch.Tensor | None, num_classes: int, split: str) -> torch.Tensor:
    """Raises unless `labels` exist and lie in [0, num_classes)."""
    if labels is None:
        raise ValueError(
            f"The {split} features carry no labels; a probe needs a labelled data set (a `labels` column)."
        )
    if labels.numel() and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(
            f"The {split} labels lie in [{int(labels.min())}, {int(labels.max())}] but the probe has {num_classes} "
            "classes: train and test must use the same class set."
        )
    return labels.long()


def _mean_nll(probe: LinearProbe, features: torch.Tensor, labels: torch.Tensor) -> float:
    with torch.no_grad():
        return float(nn.functional.cross_entropy(probe(features), labels))


def fit_linear_probe(
    features: torch.Tensor, labels: torch.Tensor | None, num_classes: int, args: ProbeArguments | None = None
) -> LinearProbe:
    """Trains a `LinearProbe` with cross-entropy on frozen features.

    Args:
        features: `(N, d)` representations; labels: `(N,)` in [0, num_classes).
        num_classes: C.
        args: optimiser, epochs, validation split (the epoch with the lowest validation NLL is returned).
    """
    args = args or ProbeArguments()
    labels = check_probe_labels(labels, num_classes, "training")
    if features.dim() != 2 or features.shape[0] != labels.shape[0]:
        raise ValueError(f"features must be (N, d) with N = {labels.shape[0]} labels, got {tuple(features.shape)}.")
    features = features.float()
    train_idx, val_idx = train_val_split(len(labels), args.probe_val_fraction, args.probe_seed)
    if len(val_idx) == 0:
        train_idx = val_idx = torch.arange(len(labels))
    x, y = features[train_idx], labels[train_idx]
    torch.manual_seed(args.probe_seed)
    std = x.std(dim=0).clamp_min(1e-6) if len(x) > 1 else torch.ones(x.shape[1])
    probe = LinearProbe(x.mean(dim=0), std, num_classes)
    lr, decay = args.probe_learning_rate, args.probe_weight_decay
    if args.probe_optimizer == "sgd":
        optimizer = torch.optim.SGD(probe.parameters(), lr, momentum=args.probe_momentum, weight_decay=decay)
    else:
        optimizer = torch.optim.AdamW(probe.parameters(), lr, weight_decay=decay)
    steps_per_epoch = math.ceil(len(y) / args.probe_batch_size)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, args.probe_epochs * steps_per_epoch)
    generator = torch.Generator().manual_seed(args.probe_seed)
    best, best_nll = copy.deepcopy(probe.state_dict()), math.inf
    for _ in range(args.probe_epochs):
        for rows in torch.randperm(len(y), generator=generator).split(args.probe_batch_size):
            loss = nn.functional.cross_entropy(probe(x[rows]), y[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
        val_nll = _mean_nll(probe, features[val_idx], labels[val_idx])
        if val_nll < best_nll:
            best, best_nll = copy.deepcopy(probe.state_dict()), val_nll
    probe.load_state_dict(best)
    return probe.eval()


def fit_probes(
    features: torch.Tensor, labels: torch.Tensor | None, num_classes: int, num_probes: int = 1,
    args: ProbeArguments | None = None,
) -> list[LinearProbe]:
    """Probes for member features `(N, S, d)`.

    With S > 1 (BatchEnsemble members), probe s is trained on member s. With S = 1 and `num_probes` = P > 1
    (Finetune-InSub), P probes with seeds `seed + i` (their own initialisation, split and batch order) are
    trained on the same representation; their probabilities are averaged at test.
    """
    args = args or ProbeArguments()
    if features.dim() != 3:
        raise ValueError(f"features must be (N, S, d), got {tuple(features.shape)}.")
    if features.shape[1] > 1:
        return [fit_linear_probe(features[:, s], labels, num_classes, args) for s in range(features.shape[1])]
    return [
        fit_linear_probe(features[:, 0], labels, num_classes, _with_seed(args, args.probe_seed + i))
        for i in range(num_probes)
    ]


def _with_seed(args: ProbeArguments, seed: int) -> ProbeArguments:
    return ProbeArguments(**{**args.__dict__, "probe_seed": seed})


@torch.no_grad()
def member_probabilities(probes: list[LinearProbe], features: torch.Tensor) -> torch.Tensor:
    """Softmax outputs of every (probe, feature sample) member: features `(N, S, d)` -> `(N, K, C)`.

    S probes on S member features pair up (K = S); one probe over S stochastic passes gives K = S; P probes on
    one representation give K = P.
    """
    s = features.shape[1]
    if len(probes) == s:
        logits = [probe(features[:, i].float()) for i, probe in enumerate(probes)]
    elif len(probes) == 1:
        logits = [probes[0](features[:, i].float()) for i in range(s)]
    elif s == 1:
        logits = [probe(features[:, 0].float()) for probe in probes]
    else:
        raise ValueError(f"{len(probes)} probes cannot be matched with {s} feature samples per input.")
    return torch.softmax(torch.stack(logits, dim=1).double(), dim=-1)

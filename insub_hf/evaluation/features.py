"""Frozen-encoder features for probes and OOD scores: representations of deterministic, MC-dropout or
BatchEnsemble members, and the label-free spread of the pretrained heads."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader

from ..losses import head_spread
from ..uncertainty.readings import served_reading


@dataclass
class FeatureSet:
    """Features of N inputs.

    Attributes:
        representations: `(N, S, d)`: S = 1 (deterministic), T MC-dropout passes or M BatchEnsemble members.
        head_sigma: `(N,)` the heads' per-dimension spread sigma averaged over dimensions (0 when M = 1);
            a label-free uncertainty score that needs no probe.
        labels: `(N,)` or None when the inputs carry no labels.
        head_embeddings: `(N, M, q)` the heads' (normalised as the config says) embeddings, when asked for.
    """

    representations: torch.Tensor
    head_sigma: torch.Tensor
    labels: torch.Tensor | None = None
    head_embeddings: torch.Tensor | None = None


def input_batches(inputs, batch_size: int, input_names: tuple[str, ...]) -> Iterator[tuple[dict, torch.Tensor | None]]:
    if isinstance(inputs, Mapping):  # tensors already in memory
        n = next(iter(inputs.values())).shape[0]
        for start in range(0, n, batch_size):
            batch = {k: v[start : start + batch_size] for k, v in inputs.items()}
            yield {k: v for k, v in batch.items() if k in input_names}, batch.get("labels")
    else:  # a datasets.Dataset (or any map-style data set) yielding dict rows with a transform applied
        for batch in DataLoader(inputs, batch_size=batch_size):
            labels = batch.get("labels")
            labels = None if labels is None else torch.as_tensor(labels)
            yield {k: v for k, v in batch.items() if k in input_names}, labels


@torch.no_grad()
def extract_features(
    model, inputs, batch_size: int = 256, mc_dropout_passes: int = 0, seed: int = 0, keep_heads: bool = False
) -> FeatureSet:
    """Runs the frozen encoder (and the heads, for their spread) over a data set.

    Args:
        model: an `InSubModel` or `InSubForPreTraining`.
        inputs: a mapping of tensors `{"pixel_values": (N, C, H, W), "labels": (N,), ...}` or a data set whose
            rows hold the encoder's inputs (and optionally `labels`).
        mc_dropout_passes: T > 0 samples T dropout masks per input (MC Dropout); 0 runs deterministically.
        seed: seed of the dropout masks (the global RNG state is restored afterwards).
        keep_heads: also return the head embeddings (`FeatureSet.head_embeddings`).

    Returns:
        A `FeatureSet` on the CPU; S = T with MC dropout, M with a BatchEnsemble encoder, else 1.
    """
    base = getattr(model, "insub", model)
    was_training = base.training
    base.eval()
    device = next(base.parameters()).device
    reps, sigmas, labels, heads = [], [], [], []
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        for batch, batch_labels in input_batches(inputs, batch_size, base.encoder.input_names):
            samples = base.member_representations(mc_dropout_passes, **{k: v.to(device) for k, v in batch.items()})
            z = base.embed_heads(samples.mean(dim=1))  # (b, M_heads, q)
            sigmas.append(head_spread(z, base.config.diversity_eps).mean(dim=1).cpu())
            if keep_heads:
                heads.append(z.cpu())
            reps.append(samples.cpu())
            if batch_labels is not None:
                labels.append(torch.as_tensor(batch_labels))
    base.train(was_training)
    return FeatureSet(
        torch.cat(reps), torch.cat(sigmas), torch.cat(labels) if labels else None,
        torch.cat(heads) if keep_heads else None,
    )


def extract_representations(model, dataset, batch_size: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """Encoder representations `(N, d)` (heads removed; BatchEnsemble: the member mean) and labels `(N,)` of a
    labelled data set (e.g. with `ImageWithLabel` as its transform)."""
    features = extract_features(model, dataset, batch_size)
    if features.labels is None:
        raise ValueError("extract_representations needs rows with `labels` next to the encoder's inputs.")
    return features.representations.mean(dim=1), features.labels


def models_reading(model, features: FeatureSet) -> torch.Tensor | None:
    """`(N,)` the model's own `uncertainty` of inputs whose features it gave (`FeatureSet`: their mean
    representation and spread), as its forward reads it; None where it is not fitted (a text model's token counts
    are not in the features: it is read where the calibrated reading needs none)."""
    inner = getattr(model, "insub", model)
    if inner.heads is None or served_reading(inner.config.uncertainty) is None:
        return None
    device = next(inner.parameters()).device
    spread = inner.oriented_spread(features.head_sigma.to(device))
    read, _ = inner.read_uncertainty(features.representations.mean(dim=1).to(device), spread, None, None)
    return None if read is None else read.double().cpu()

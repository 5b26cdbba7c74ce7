"""The readings of a text model's uncertainty (`configuration_insub.MODEL_READINGS`), with torch alone: what a model
serves (its k-NN bank, `knn_bank.py`; the length-standardised spread, `InSubModel.read_uncertainty`) and what
`insub-hf text-candidates` and `insub-hf release text` measure."""

from __future__ import annotations

import torch


def knn_distance(embeddings: torch.Tensor, bank: torch.Tensor, k: int) -> torch.Tensor:
    """`(N,)` cosine distance of each row of `embeddings (N, d)` to its k-th nearest row of `bank (n, d)` (both
    L2-normalised; a query that is itself in the bank has distance 0 to its first neighbour)."""
    if not 1 <= k <= bank.shape[0]:  # topk of fewer rows would give another neighbour, silently
        raise ValueError(f"knn_distance: k={k} must be between 1 and the bank's {bank.shape[0]} rows.")
    similarity = embeddings.float() @ bank.float().T  # (N, n)
    return 1 - similarity.topk(k, dim=1).values[:, -1]


def length_buckets(lengths: torch.Tensor, buckets: int) -> torch.Tensor:
    """`(buckets - 1,)` inner edges: quantiles of the token counts `lengths (N,)` (repeated edges dropped)."""
    quantiles = torch.linspace(0, 1, buckets + 1)[1:-1]
    return torch.unique(torch.quantile(lengths.double(), quantiles.double())).float()


def fit_length_standardisation(spread: torch.Tensor, lengths: torch.Tensor, buckets: int = 5) -> dict:
    """On in-distribution sentences: per length bucket, the mean and standard deviation of `spread (N,)`, so that
    `length_standardised` reads what the spread says beyond the sentence's length. Returns the module's settings
    `length_edges`, `length_mean`, `length_std` (lists)."""
    edges = length_buckets(lengths, buckets)
    index = torch.bucketize(lengths.float(), edges, right=True)
    means, stds = [], []
    for b in range(len(edges) + 1):
        part = spread[index == b].double()
        means.append(float(part.mean()) if len(part) else float(spread.mean()))
        stds.append(float(part.std()) if len(part) > 1 and float(part.std()) > 0 else float(spread.std()))
    return {"length_edges": edges.tolist(), "length_mean": means, "length_std": stds}


def length_standardised(spread: torch.Tensor, lengths: torch.Tensor, length_edges, length_mean,
                        length_std) -> torch.Tensor:
    """`(N,)`: `spread (N,)` minus its bucket's mean, over its bucket's standard deviation (buckets of `lengths (N,)`,
    the token counts, as `fit_length_standardisation` fitted them)."""
    lengths = lengths.to(spread.device).float()
    index = torch.bucketize(lengths, torch.as_tensor(length_edges, dtype=torch.float32, device=spread.device),
                            right=True)
    mean = torch.as_tensor(length_mean, dtype=spread.dtype, device=spread.device)[index]
    std = torch.as_tensor(length_std, dtype=spread.dtype, device=spread.device)[index]
    return (spread - mean) / std

"""A text model's spread standardised within sentence-length buckets (the "spread_by_length" reading): fitted
on in-distribution sentences, served by `reading.UncertaintyReading`, measured by `insub-hf text-candidates` and
`insub-hf release text`. Torch alone."""

from __future__ import annotations

import torch

from ..validation import check_choice

# The settings of the spread read per token-count bucket (`fit_length_buckets`, plus the standardised
# spread's direction)
LENGTH_SETTINGS = ("length_edges", "length_mean", "length_std", "direction")


def length_buckets(lengths: torch.Tensor, buckets: int) -> torch.Tensor:
    """`(buckets - 1,)` inner edges: quantiles of the token counts `lengths (N,)` (repeated edges dropped)."""
    quantiles = torch.linspace(0, 1, buckets + 1)[1:-1]
    return torch.unique(torch.quantile(lengths.double(), quantiles.double())).float()


def fit_length_buckets(spread: torch.Tensor, lengths: torch.Tensor, buckets: int = 5) -> dict:
    """On in-distribution sentences: per length bucket, the mean and standard deviation of `spread (N,)`, so that
    `standardise_by_length` reads what the spread says beyond the sentence's length. Returns the module's settings
    `length_edges`, `length_mean`, `length_std` (lists)."""
    edges = length_buckets(lengths, buckets)
    index = torch.bucketize(lengths.float(), edges, right=True)
    means, stds = [], []
    for b in range(len(edges) + 1):
        part = spread[index == b].double()
        means.append(float(part.mean()) if len(part) else float(spread.mean()))
        stds.append(float(part.std()) if len(part) > 1 and float(part.std()) > 0 else float(spread.std()))
    return {"length_edges": edges.tolist(), "length_mean": means, "length_std": stds}


def standardise_by_length(spread: torch.Tensor, lengths: torch.Tensor, length_edges, length_mean,
                        length_std) -> torch.Tensor:
    """`(N,)`: `spread (N,)` minus its bucket's mean, over its bucket's standard deviation (buckets of `lengths (N,)`,
    the token counts, as `fit_length_buckets` fitted them)."""
    lengths = lengths.to(spread.device).float()
    index = torch.bucketize(lengths, torch.as_tensor(length_edges, dtype=torch.float32, device=spread.device),
                            right=True)
    mean = torch.as_tensor(length_mean, dtype=spread.dtype, device=spread.device)[index]
    std = torch.as_tensor(length_std, dtype=spread.dtype, device=spread.device)[index]
    return (spread - mean) / std


def check_length_buckets(settings: dict | None, modality: str) -> None:
    """The "spread_by_length" reading's settings for a model reading `modality`: a text model's, its keys, one more
    bucket than edges, positive deviations."""
    if modality != "text":
        raise ValueError("InSubConfig.uncertainty['reading']='spread_by_length' reads sentence lengths: it is a text "
                         f"model's; this model reads {modality} (allowed here: 'spread', 'knn').")
    name = "InSubConfig.uncertainty['length_buckets']"
    if not isinstance(settings, dict) or set(settings) != set(LENGTH_SETTINGS):
        raise ValueError(f"{name} must be a dict with keys {list(LENGTH_SETTINGS)} for the reading "
                         f"'spread_by_length' (uncertainty.length.fit_length_buckets), got {settings!r}.")
    check_choice(f"{name}['direction']", settings["direction"], (1, -1))
    edges, means, stds = (settings[k] for k in LENGTH_SETTINGS[:3])
    if not (len(means) == len(stds) == len(edges) + 1) or not all(s > 0 for s in stds):
        raise ValueError(f"{name}: length_mean and length_std need one value per bucket ({len(edges) + 1} for "
                         f"{len(edges)} edges) and positive deviations; got {len(means)} means and stds {stds}.")

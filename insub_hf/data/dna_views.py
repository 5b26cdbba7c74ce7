"""DNA views: reverse complement and random crops of one-hot DNA (the Self-GenomeNet augmentations)."""

from __future__ import annotations

import torch

from ..validation import check_choice
from .columns import batch_column
from ..encoders.dna_encoding import UNKNOWN_POLICIES, one_hot_dna, reverse_complement

__all__ = ["DNAViews", "one_hot_dna", "random_crop", "reverse_complement"]

def random_crop(one_hot: torch.Tensor, length: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """A random window of `length` positions of `(L, 4)` -> `(length, 4)`."""
    if one_hot.shape[0] < length:
        raise ValueError(f"a sequence of length {one_hot.shape[0]} is shorter than the crop length {length}.")
    start = int(torch.randint(0, one_hot.shape[0] - length + 1, (1,), generator=generator))
    return one_hot[start : start + length]


class DNAViews:
    """A `Dataset.set_transform` function: view 1 is a random crop, view 2 the reverse complement of another.

    Output columns: `dna_one_hot`, `dna_one_hot_2`, each a list of `(crop_length, 4)` tensors; with
    `two_views=False` only `dna_one_hot` (Self-GenomeNet builds the reverse complement of the same crop itself).
    Errors name the record (its row in the batch): characters outside the alphabet, sequences shorter than the crop.
    """

    def __init__(self, crop_length: int, sequence_column: str = "sequence", unknown: str = "zero",
                 two_views: bool = True):
        check_choice("unknown", unknown, UNKNOWN_POLICIES)
        if not isinstance(crop_length, int) or crop_length < 1:
            raise ValueError(f"crop_length must be an integer >= 1, got {crop_length!r}.")
        self.crop_length = crop_length
        self.sequence_column = sequence_column
        self.unknown = unknown
        self.two_views = two_views

    def __call__(self, batch: dict[str, list]) -> dict[str, list[torch.Tensor]]:
        sequences = batch_column(batch, self.sequence_column, "sequence_column")
        if "name" in batch:
            names = [f"record {n!r}" for n in batch["name"]]
        else:
            names = [f"{self.sequence_column}[{i}]" for i in range(len(sequences))]
        encoded = [one_hot_dna(s, self.unknown, name=n) for s, n in zip(sequences, names)]
        for x, name in zip(encoded, names):
            if x.shape[0] < self.crop_length:
                raise ValueError(f"{name}: length {x.shape[0]} is shorter than crop_length={self.crop_length}.")
        out = {"dna_one_hot": [random_crop(x, self.crop_length) for x in encoded]}
        if self.two_views:
            out["dna_one_hot_2"] = [reverse_complement(random_crop(x, self.crop_length)) for x in encoded]
        return out

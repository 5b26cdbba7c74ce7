"""The one interface every encoder follows, so heads and losses never care which encoder it is."""

from __future__ import annotations

import torch
from torch import nn


class Encoder(nn.Module):
    """Maps one modality's inputs to a representation `(B, d)`.

    Attributes:
        output_dim: d.
        main_input_name: the input key the encoder reads (`pixel_values`, `input_ids`, `dna_one_hot`).
        input_names: every input key it accepts (a view of a batch holds a subset of them).
    """

    output_dim: int
    main_input_name: str
    input_names: tuple[str, ...]

    def forward(self, **inputs: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError


def check_finite(name: str, tensor: torch.Tensor) -> None:
    """Raises ValueError when a float input holds NaN or inf (they would silently poison every loss)."""
    if tensor.is_floating_point() and not torch.isfinite(tensor).all():
        raise ValueError(f"{name} contains NaN or inf values; inputs must be finite numbers.")


def check_rank(name: str, tensor: torch.Tensor, rank: int, layout: str) -> None:
    if tensor.dim() != rank:
        raise ValueError(f"{name} must have shape {layout}, got {tuple(tensor.shape)}.")

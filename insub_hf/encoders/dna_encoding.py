"""One-hot DNA: the encoding and the reverse complement (what the model itself needs from the DNA data code)."""

from __future__ import annotations

import torch

from ..validation import check_choice

DNA_ALPHABET = "ACGT"  # channel order; the complement of channel c is channel 3 - c
IUPAC_AMBIGUOUS = set("NRYSWKMBDHV")
UNKNOWN_POLICIES = ("zero", "error")
_INDEX = {base: i for i, base in enumerate(DNA_ALPHABET)}


def one_hot_dna(sequence: str, unknown: str = "zero", name: str = "sequence") -> torch.Tensor:
    """One-hot encodes a DNA string, case-insensitively.

    Args:
        sequence: bases `ACGT` (any case); IUPAC ambiguity codes (N, R, Y, ...) are `unknown`.
        unknown: `"zero"` encodes ambiguity codes as a zero vector, `"error"` refuses them.
        name: how to call the record in error messages.

    Returns:
        `(L, 4)` float tensor, channels A, C, G, T.
    """
    check_choice("unknown", unknown, UNKNOWN_POLICIES)
    if not isinstance(sequence, str):
        raise ValueError(f"{name}: a DNA record must be a string of bases, got {sequence!r} ({type(sequence).__name__}).")
    if not sequence:
        raise ValueError(f"{name}: the DNA record is empty.")
    out = torch.zeros(len(sequence), 4)
    for position, base in enumerate(sequence.upper()):
        if base in _INDEX:
            out[position, _INDEX[base]] = 1.0
        elif base not in IUPAC_AMBIGUOUS or unknown == "error":
            allowed = "A, C, G, T" + (" and IUPAC codes " + "".join(sorted(IUPAC_AMBIGUOUS)) if unknown == "zero" else "")
            raise ValueError(f"{name}: character {base!r} at position {position} is not allowed; allowed: {allowed}.")
    return out


def reverse_complement(one_hot: torch.Tensor) -> torch.Tensor:
    """Reverse complement of one-hot DNA `(..., L, 4)`: positions reversed, A<->T and C<->G swapped."""
    return one_hot.flip(-2, -1)

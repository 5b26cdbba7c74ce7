"""The crop test: a label-free check that an uncertainty follows information. Shrinking an image's centre crop
(and resizing it back) removes information, so its uncertainty should rise (Kirchhof et al., NeurIPS 2023)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class CropTest:
    """Attributes:
        spearman: rank correlation of crop fraction and uncertainty over every (image, fraction) pair; negative when
            smaller crops get higher uncertainty, as they should.
        smaller_crop_higher: the share of images whose smallest crop has a higher uncertainty than the whole image.
    """

    spearman: float
    smaller_crop_higher: float


def crop_test(uncertainty, fractions) -> CropTest:
    """Args:
        uncertainty: `(N, F)` each image's uncertainty (higher = less certain) at each crop fraction.
        fractions: `(F,)` the crop fractions (share of the side kept), F >= 2, all different.
    """
    from scipy.stats import spearmanr

    uncertainty = torch.as_tensor(uncertainty, dtype=torch.float64)
    fractions = torch.as_tensor(fractions, dtype=torch.float64)
    if uncertainty.dim() != 2 or uncertainty.shape[1] != len(fractions) or len(fractions) < 2 or not len(uncertainty):
        raise ValueError(f"crop_test needs uncertainty (N, F) for F >= 2 fractions, got {tuple(uncertainty.shape)} "
                         f"and {len(fractions)} fractions.")
    if len(set(fractions.tolist())) != len(fractions) or not torch.isfinite(uncertainty).all():
        raise ValueError("crop_test: the fractions must differ and the uncertainties be finite.")
    pairs = fractions.expand_as(uncertainty)
    rho = spearmanr(pairs.ravel().numpy(), uncertainty.ravel().numpy()).statistic
    smallest, whole = int(fractions.argmin()), int(fractions.argmax())
    higher = (uncertainty[:, smallest] > uncertainty[:, whole]).double().mean()
    return CropTest(spearman=float(rho), smaller_crop_higher=float(higher))

"""Self-supervised objectives and the diversity loss, as pure functions with thin modules."""

from .barlow_twins import barlow_twins_loss
from .byol import byol_loss
from .dino import DINOLoss, dino_loss
from .diversity import DiversityLoss, diversity_hinge, head_spread
from .genomenet import DistanceProjections, self_genomenet_loss
from .ntxent import NTXentLoss, nt_xent_loss
from .scd import decorrelation, head_cross_correlation, scd_loss, self_contrast
from .vicreg import vicreg_loss

__all__ = [
    "DINOLoss",
    "DistanceProjections",
    "DiversityLoss",
    "barlow_twins_loss",
    "byol_loss",
    "NTXentLoss",
    "diversity_hinge",
    "dino_loss",
    "head_spread",
    "decorrelation",
    "head_cross_correlation",
    "nt_xent_loss",
    "scd_loss",
    "self_genomenet_loss",
    "self_contrast",
    "vicreg_loss",
]

"""Self-supervised objectives and the diversity loss, as pure functions with thin modules."""

from .diversity import DiversityLoss, diversity_hinge, head_spread
from .ntxent import NTXentLoss, nt_xent_loss

__all__ = ["DiversityLoss", "NTXentLoss", "diversity_hinge", "head_spread", "nt_xent_loss"]

"""Self-supervised objectives behind one interface (`Objective`), looked up by `InSubConfig.objective`."""

from __future__ import annotations

from .base import Objective, ObjectiveOutput
from .dino import DINOObjective, cosine_momentum, ema_update_, teacher_temperature
from .genomenet import SelfGenomeNetObjective
from .scd import SCDObjective
from .simclr import SimCLRObjective

# A new objective: one module with an `Objective` subclass, listed here.
OBJECTIVES: dict[str, type[Objective]] = {
    cls.name: cls for cls in (SimCLRObjective, DINOObjective, SCDObjective, SelfGenomeNetObjective)
}

__all__ = [
    "DINOObjective",
    "OBJECTIVES",
    "Objective",
    "ObjectiveOutput",
    "SCDObjective",
    "SelfGenomeNetObjective",
    "SimCLRObjective",
    "cosine_momentum",
    "ema_update_",
    "teacher_temperature",
]

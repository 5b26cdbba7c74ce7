"""Self-supervised objectives behind one interface (`Objective`) with their own settings (`ObjectiveConfig`), looked
up by `InSubConfig.objective`."""

from __future__ import annotations

from .base import Objective, ObjectiveConfig, ObjectiveOutput
from .dino import DINOConfig, DINOObjective, teacher_temperature
from .ema import cosine_momentum, ema_update_
from .genomenet import SelfGenomeNetConfig, SelfGenomeNetObjective
from .scd import SCDConfig, SCDObjective
from .simclr import SimCLRConfig, SimCLRObjective

# A new objective: one module with an `Objective` subclass and its `ObjectiveConfig`, listed here.
OBJECTIVES: dict[str, type[Objective]] = {
    cls.name: cls for cls in (SimCLRObjective, DINOObjective, SCDObjective, SelfGenomeNetObjective)
}

__all__ = [
    "DINOConfig",
    "DINOObjective",
    "OBJECTIVES",
    "Objective",
    "ObjectiveConfig",
    "ObjectiveOutput",
    "SCDConfig",
    "SCDObjective",
    "SelfGenomeNetConfig",
    "SelfGenomeNetObjective",
    "SimCLRConfig",
    "SimCLRObjective",
    "cosine_momentum",
    "ema_update_",
    "teacher_temperature",
]

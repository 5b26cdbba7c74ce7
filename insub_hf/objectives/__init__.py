"""Self-supervised objectives behind one interface (`Objective`) with their own settings (`ObjectiveConfig`), looked
up by `InSubConfig.objective`."""

from __future__ import annotations

from .barlow_twins import BarlowTwinsConfig, BarlowTwinsObjective
from .base import Objective, ObjectiveConfig, ObjectiveOutput
from .byol import BYOLConfig, BYOLObjective
from .dino import DINOConfig, DINOObjective, teacher_temperature
from .ema import cosine_momentum, ema_update_
from .genomenet import SelfGenomeNetConfig, SelfGenomeNetObjective
from .scd import SCDConfig, SCDObjective
from .simclr import SimCLRConfig, SimCLRObjective
from .vicreg import VICRegConfig, VICRegObjective

# A new objective: one module with an `Objective` subclass and its `ObjectiveConfig`, listed here.
OBJECTIVES: dict[str, type[Objective]] = {
    cls.name: cls for cls in (
        SimCLRObjective, DINOObjective, SCDObjective, SelfGenomeNetObjective, BYOLObjective, VICRegObjective,
        BarlowTwinsObjective,
    )
}
# What a model's config reads of each objective (its settings, modality and inputs), without the objective itself
OBJECTIVE_CONFIGS: dict[str, type[ObjectiveConfig]] = {name: cls.config_class for name, cls in OBJECTIVES.items()}

__all__ = [
    "BYOLConfig",
    "BYOLObjective",
    "BarlowTwinsConfig",
    "BarlowTwinsObjective",
    "DINOConfig",
    "DINOObjective",
    "OBJECTIVES",
    "OBJECTIVE_CONFIGS",
    "Objective",
    "ObjectiveConfig",
    "ObjectiveOutput",
    "SCDConfig",
    "SCDObjective",
    "SelfGenomeNetConfig",
    "SelfGenomeNetObjective",
    "SimCLRConfig",
    "SimCLRObjective",
    "VICRegConfig",
    "VICRegObjective",
    "cosine_momentum",
    "ema_update_",
    "teacher_temperature",
]

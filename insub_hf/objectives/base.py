"""The interface every self-supervised objective follows: the student's views in, the ssl loss out."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, Protocol

import torch
from torch import nn

from ..validation import check_fields


@dataclass
class ObjectiveConfig:
    """An objective's own settings: a dataclass of `checked` fields (each checked when built, the message naming
    `ClassName.field` and the allowed values), saved in the model's config.json as `InSubConfig.objective_config`.

    It states what a model's config reads of its objective, so that the config never builds the objective.

    Class attributes:
        name: the `InSubConfig.objective` value that selects it.
        title: a human name (model cards).
        modality: what it trains on: `"image"` (two views, or DINO's crops), `"text"` or `"dna"` (the demo and the
            jobs pick the data and the encoder by it).
        encoder_inputs: the encoder inputs (`main_input_name`) it can train; `InSubConfig` refuses another encoder.
            Two-view objectives take images or DNA (`DNAViews`: a crop and another crop's reverse complement).
    """

    name: ClassVar[str]
    title: ClassVar[str]
    modality: ClassVar[str] = "image"
    encoder_inputs: ClassVar[tuple[str, ...]] = ("pixel_values", "dna_one_hot")

    def __post_init__(self) -> None:
        check_fields(self)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None, objective: str) -> "ObjectiveConfig":
        """`values` (a subset of the fields; the rest default) -> the checked config; an unknown key is refused,
        naming the allowed ones."""
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(values or {}) - set(names))
        if unknown:
            raise ValueError(
                f"InSubConfig.objective_config: {unknown} are not settings of objective={objective!r} "
                f"({cls.__name__}); allowed: {names}."
            )
        return cls(**(values or {}))


class Student(Protocol):
    """What an objective uses of the student it trains (an `InSubModel`, passed in at every call)."""

    config: Any  # the InSubConfig
    encoder: nn.Module  # inputs -> representations (2B, d); `forward_features`, `pool` for token-level objectives
    heads: nn.Module  # the M heads; `num_heads`

    def head_outputs(self, representation: torch.Tensor) -> torch.Tensor:
        """`(N, d)` -> `(N, M, q)` before normalisation."""

    def normalize_embeddings(self, z: torch.Tensor) -> torch.Tensor:
        """`(..., M, q)` normalised as the config says (what the hinge reads)."""

    def embed_heads(self, representation: torch.Tensor) -> torch.Tensor:
        """`(N, d)` -> `(N, M, q)`, `normalize_embeddings(head_outputs(...))`."""

    def follower_copy(self) -> nn.Module:
        """A copy of the student without its k-NN bank, for a teacher or target network to follow."""

    def weights_state(self) -> dict:
        """The student's state dict without its k-NN bank: what a follower loads."""

    def encoder_inputs(self, **inputs: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """One view's encoder inputs, the None ones dropped, its main input checked (`InSubModel.encoder_inputs`)."""

    def state_dict(self) -> dict[str, torch.Tensor]: ...


@dataclass
class ObjectiveOutput:
    """What an objective computes for B samples, two views each (view-major: rows `0..B-1` are view 1).

    Attributes:
        ssl_loss: scalar, the self-supervised loss on the mean head embedding (batch mean).
        head_embeddings: `(2B, M, q)` the student's head embeddings the diversity hinge reads.
        representation: `(2B, d)` the student encoder's representations.
    """

    ssl_loss: torch.Tensor
    head_embeddings: torch.Tensor
    representation: torch.Tensor


class Objective(nn.Module):
    """A self-supervised objective on top of the student (encoder + M heads, an `InSubModel`).

    An objective owns its own state (DINO's teacher and centre, Self-GenomeNet's distance projections) as submodules
    and buffers, so they are saved with the model under `objective.*`. The student is passed in at every call, never
    held, so its weights stay in one place. A new objective is one new module: a subclass with `config_class` and
    `forward`, listed in `objectives/__init__.py`.

    Class attributes:
        config_class: its `ObjectiveConfig` (`InSubConfig.objective_config` is one, as a dict), which states its
            `name`, `title`, `modality` and `encoder_inputs`; the objective class carries them too.
        extra_inputs: batch keys beyond the two views that `forward` takes (DINO: `local_pixel_values`).
        initialized_modules: module types of the objective's own state whose `reset_parameters` the model's
            `post_init` calls (fresh weights only; loaded ones are kept).
        min_batch: the fewest samples its loss is defined on (statistics over the batch need 2); a smaller batch
            in eval mode gives the embeddings without a loss.

    Args:
        config: the `InSubConfig` (the objective reads its own settings, `config.objective_options`, and the heads'
            sizes).
        student: the `InSubModel` it trains (to size or copy its state; not kept).
    """

    name: ClassVar[str]
    title: ClassVar[str]
    config_class: ClassVar[type[ObjectiveConfig]]
    modality: ClassVar[str]
    encoder_inputs: ClassVar[tuple[str, ...]]
    extra_inputs: ClassVar[tuple[str, ...]] = ()
    initialized_modules: ClassVar[tuple[type[nn.Module], ...]] = ()
    min_batch: ClassVar[int] = 1

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.name, cls.title, cls.modality = cls.config_class.name, cls.config_class.title, cls.config_class.modality
        cls.encoder_inputs = cls.config_class.encoder_inputs

    def __init__(self, config, student: Student):
        super().__init__()

    def second_view(
        self, first: dict[str, torch.Tensor | None], second: dict[str, torch.Tensor | None]
    ) -> dict[str, torch.Tensor | None]:
        """The second view's inputs, given both views as the batch brings them (values may be None). Default: the
        batch's second view; an objective that builds it from the first (Self-GenomeNet) returns that instead."""
        return second

    def join_views(self, student: Student, inputs: dict[str, torch.Tensor | None]) -> dict[str, torch.Tensor]:
        """The encoder inputs of both views joined along the batch, each `(B, ...)` -> `(2B, ...)`: `inputs` are the
        batch's (the names with `_2` for the second view; `second_view` or the encoder makes one omitted), refused
        by name where this student or objective does not read them or the views do not match."""
        encoder = student.encoder
        main = encoder.main_input_name
        given = {k: v for k, v in inputs.items() if v is not None}
        first = student.encoder_inputs(**{k: v for k, v in given.items() if not k.endswith("_2")})
        allowed = [*encoder.input_names, *(f"{k}_2" for k in encoder.input_names), *self.extra_inputs]
        unknown = sorted(set(given) - set(allowed))
        if unknown:
            raise ValueError(f"InSubForPreTraining does not read the inputs {unknown}; this model reads {allowed}.")
        second = self.second_view(first, {k: given.get(f"{k}_2") for k in encoder.input_names})
        if second.get(main) is None:
            if not encoder.repeats_input_for_second_view:
                raise ValueError(f"`{main}_2`, the second augmented view, is required for this encoder.")
            second = first  # the second view differs only by its dropout mask
        else:
            second = student.encoder_inputs(**second)
        if set(first) != set(second) or first[main].shape != second[main].shape:
            raise ValueError(
                f"The two views must have the same inputs and shapes, got {tuple(first[main].shape)} and "
                f"{tuple(second[main].shape)}."
            )
        members = student.config.batch_ensemble_size
        if members > 1 and first[main].shape[0] % members:
            raise ValueError(
                f"With InSubConfig.batch_ensemble_size={members}, the batch size ({first[main].shape[0]}) must be a "
                "multiple of it so that both views of a sample go through the same member."
            )
        return {k: torch.cat([first[k], second[k]], dim=0) for k in first}

    def forward(self, student: Student, views: dict[str, torch.Tensor], **extra: torch.Tensor) -> ObjectiveOutput:
        """Args:
            student: the `InSubModel`.
            views: the encoder's inputs of both views joined along the batch, each `(2B, ...)`.
            extra: the batch's `extra_inputs`.
        """
        raise NotImplementedError

    def sync_with_student(self, student: Student) -> None:
        """Re-derives what the objective copies from the student (DINO's teacher), after initialisation or after
        encoder weights were loaded. Default: nothing."""

    def step_begin(self, step: int, total_steps: int) -> None:
        """Before optimiser step `step` (0-based) of `total_steps` (schedules). Default: nothing."""

    def step_end(self, student: Student, step: int, total_steps: int) -> None:
        """After optimiser step `step`, once per step whatever the gradient accumulation (EMA updates). Default:
        nothing."""

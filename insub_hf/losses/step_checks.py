"""Checks of a pretraining step: a loss that is not finite, or inputs far outside any normalised range.

The model's forward runs `check_training_step` (one host sync) unless `InSubTrainer` trains it; the trainer reads
the same flags without a host sync (`training_step_flags`, `step_flags_bad`) and raises `training_step_error` where it
checks (every step on the CPU, logging steps on an accelerator).
"""

from __future__ import annotations

import torch

# Normalised data (images by a mean and std, embeddings, one-hot DNA) stays within a few units; a float input beyond
# this is unnormalised or corrupt, and may still give a finite loss (a compiled forward saturates where eager overflows).
INPUT_LIMIT = 1e4


def training_step_flags(loss: torch.Tensor, inputs: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """What `check_training_step` reads, on the loss's device and without a host sync: whether `loss` is NaN or inf
    (a 0-d bool tensor) and each float input's largest magnitude (0-d float32 tensors, by input name)."""
    largest = {name: value.detach().abs().amax().float() for name, value in inputs.items()
               if isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel()}
    return ~torch.isfinite(loss.detach()), largest


def step_flags_bad(loss_bad: torch.Tensor, largest: dict[str, torch.Tensor]) -> torch.Tensor:
    """A 0-d bool tensor: the loss was not finite or an input exceeded `INPUT_LIMIT` (no host sync)."""
    return loss_bad | (torch.stack(list(largest.values())).amax() > INPUT_LIMIT) if largest else loss_bad


def training_step_error(loss_text: str, largest: dict[str, torch.Tensor]) -> FloatingPointError:
    """The refusal `check_training_step` raises, naming each float input's largest magnitude."""
    sizes = ", ".join(f"{name} max |x| = {value.item():.3g}" for name, value in largest.items())
    return FloatingPointError(
        f"The pretraining loss is {loss_text} for inputs {sizes or 'with no float tensors'}: inputs must be "
        f"normalised (|x| <= {INPUT_LIMIT:g}); values far outside the normalised range overflow the encoder. "
        "Normalise the inputs (e.g. Normalize(mean, std) of the data set)."
    )


def check_training_step(loss: torch.Tensor, inputs: dict) -> None:
    """Raises `FloatingPointError` when `loss` is NaN or inf, or a float tensor of `inputs` has |x| > `INPUT_LIMIT`,
    naming each float input's largest magnitude. One host sync: the model's forward runs it unless `InSubTrainer`
    trains the model, which checks every step on the CPU and, on an accelerator, at logging steps only."""
    loss_bad, largest = training_step_flags(loss, inputs)
    if bool(step_flags_bad(loss_bad, largest)):
        raise training_step_error(str(loss.item()), largest)

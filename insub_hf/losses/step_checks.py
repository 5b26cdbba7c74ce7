"""Checks of a pretraining step: a loss that is not finite, or inputs far outside any normalised range.

The model's forward runs `check_training_step` (one host sync) unless `InSubTrainer` trains it; the trainer reads
the same flags without a host sync (`training_step_flags`, `step_flags_bad`) and raises `training_step_error` where it
checks (every step on the CPU, logging steps on an accelerator). After the last step, `check_trained_weights` refuses
weights that an update made NaN or inf though every loss was finite (a gradient or an optimiser kernel overflowed).
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


def check_trained_weights(model: torch.nn.Module, log_history: list[dict], run: str) -> None:
    """Raises `FloatingPointError` when a floating parameter or buffer of `model` holds NaN or inf after training,
    naming how many tensors, the first few, the last logged gradient norm (`log_history`: the Trainer's) and the way
    out. One host read per tensor, once per run: a model that gives NaN for every input is never saved or measured."""
    tensors = [*model.named_parameters(), *model.named_buffers()]
    bad = [name for name, value in tensors if value.is_floating_point() and not bool(torch.isfinite(value).all())]
    if not bad:
        return
    norms = [row["grad_norm"] for row in log_history if "grad_norm" in row]
    said = f"the last logged gradient norm was {norms[-1]:.4g}" if norms else "no gradient norm was logged"
    raise FloatingPointError(
        f"pretraining {run} ended with NaN or inf in {len(bad)} of {len(tensors)} weight tensors ({', '.join(bad[:3])}"
        f"{', ...' if len(bad) > 3 else ''}) though every step's loss was finite ({said}): an update overflowed, so "
        "the model is not saved. Train again with a lower learning_rate, with max_grad_norm set, or with another "
        "optimiser kernel (optim='adamw_torch' in place of the fused 'adamw_torch_fused')."
    )

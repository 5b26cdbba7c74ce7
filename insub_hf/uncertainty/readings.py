"""The readings a model's config can name, as one registry (`READINGS`, as `OBJECTIVES` is for objectives): each is
one class with what it needs from the config (`check`), how a forward reads it (`read`) and what a card calls it
(`title`, `comment`). A new reading is one class here.

`uncertainty` is the calibrated reading or None: only `CalibratedReading` serves it. The single readings a config
may still name (folders and measurements made before, `set_bank`, a text model's length buckets) keep their own
outputs (`head_spread`, `knn_distance`); a forward of a config naming one serves `uncertainty=None` and says once
where its number is."""

from __future__ import annotations

import torch

from transformers.utils import logging

from ..validation import check_choice, check_range
from .conformal import COMBINATIONS, COMPONENTS, FITTED_SETTINGS, fitted_settings
from .knn import BANK
from .length import check_length_buckets


class Reading:
    """One reading a config can name (a class per reading; `READINGS` holds one instance of each)."""

    name: str = ""
    title: str = ""  # what a card calls it
    comment: str = ""  # the card snippet's comment on the output that holds it
    output: str = ""  # the output that holds its number (`uncertainty` for the calibrated reading alone)
    note: str = ""  # what a user does to that output to have the number, where anything

    def check(self, block, modality: str) -> None:
        """Raises, naming the field and what it allows, unless `block` (an `UncertaintyConfig`) can serve it."""

    def fitted(self, block) -> bool:
        """Whether `block` holds what the reading needs to give a number."""
        return True

    def read(self, model, knn: torch.Tensor | None, spread: torch.Tensor, lengths) -> torch.Tensor | None:
        """`uncertainty (B,)` or None, from the k-NN distances `(B,)` to the model's bank (None without one) and the
        oriented spread `(B,)` of one forward of `model`; `lengths()` gives the token counts `(B,)` of a text batch.
        A single reading serves None, and says once where its number is."""
        if self.fitted(model.config.uncertainty):
            logging.get_logger(__name__).warning_once(
                f"InSubModel: config.uncertainty['reading']={self.name!r} is a single reading, so `uncertainty` is "
                f"None: `uncertainty` is the calibrated rank in [0, 1] alone. This reading's number is "
                f"`out.{self.output}`{self.note}; fit the calibrated one with model.fit_uncertainty(your_inputs).")
        return None


class SpreadReading(Reading):
    name = "spread"
    title = "heads' spread"
    comment = "the heads' spread, read in the direction fixed on validation data: higher = more likely OOD"
    output = "head_spread"

    def fitted(self, block) -> bool:
        return block["direction"] is not None


class LengthSpreadReading(Reading):
    name = "spread_by_length"
    title = "spread per length bucket"
    comment = "the heads' spread within its length bucket: higher = more likely OOD"
    output = "head_spread"
    note = (" standardised within its token-count bucket (insub_hf.uncertainty.length.standardise_by_length with "
            "config.uncertainty['length_buckets'])")

    def check(self, block, modality):
        check_length_buckets(block.length_buckets, modality)


class KnnReading(Reading):
    name = "knn"
    title = "k-NN distance"
    comment = "cosine distance to the k-th nearest row of the model's bank: higher = more likely OOD"
    output = "knn_distance"

    def check(self, block, modality):
        if not block.bank_size:
            raise ValueError("InSubConfig.uncertainty['reading']='knn' needs a bank (bank_size >= k): set it with "
                             "model.set_bank(representations), which records both.")


class CalibratedReading(Reading):
    name = "calibrated"
    title = "calibrated rank of the k-NN distance and the heads' spread (Fisher's rule)"
    comment = ("in [0, 1]: the share of held-out in-distribution inputs that look more typical; "
               "> 0.95 flags about 5 % of in-distribution inputs")
    output = "uncertainty"

    def check(self, block, modality):
        name = "InSubConfig.uncertainty"
        if not block.bank_size:
            raise ValueError(f"{name}['reading']='calibrated' needs a k-NN bank and calibration scores: fit them with "
                             "model.fit_uncertainty(inputs), which records both.")
        components = block.components
        if not isinstance(components, (list, tuple)) or not components or components[0] != "knn":
            raise ValueError(f"{name}['components'] must list the combined readings, 'knn' first, from "
                             f"{list(COMPONENTS)}; got {components!r}.")
        for component in components:
            check_choice(f"{name}['components']", component, COMPONENTS)
        if len(set(components)) != len(components):
            raise ValueError(f"{name}['components'] lists a reading twice: {components!r}.")
        check_choice(f"{name}['combination']", block.combination, COMBINATIONS)
        if "spread" in components and block.direction is None:
            raise ValueError(f"{name}['components'] holds 'spread', which needs the spread's direction "
                             "(uncertainty['direction'] +1 or -1).")
        sizes = block.calibration_size
        if not isinstance(sizes, (list, tuple)) or len(sizes) != 2:
            raise ValueError(f"{name}['calibration_size'] must be [n_a, n_b], the bank rows each reading's "
                             f"p-values are read on and the calibration rows ranked against; got {sizes!r}.")
        for i, size in enumerate(sizes):
            check_range(f"{name}['calibration_size'][{i}]", size, low=1, integer=True)
        length_range = block.length_range
        if length_range is not None and not (isinstance(length_range, (list, tuple)) and len(length_range) == 2
                                             and all(isinstance(v, int) and v >= 1 for v in length_range)
                                             and length_range[0] <= length_range[1]):
            raise ValueError(f"{name}['length_range'] must be [low, high], the calibration rows' shortest and longest "
                             f"input (ints >= 1, low <= high), or None; got {length_range!r}.")
        fitted = block.fitted_with
        if not isinstance(fitted, dict) or set(fitted) != set(FITTED_SETTINGS):
            raise ValueError(f"{name}['fitted_with'] must record the settings the calibration was fitted with, a dict "
                             f"with keys {list(FITTED_SETTINGS)} (fit_uncertainty writes it); got {fitted!r}.")

    def read(self, model, knn, spread, lengths):
        block = model.config.uncertainty
        if fitted_settings(block) != block["fitted_with"]:
            warn_stale_settings(block)
            return None
        scores = [knn]
        if "spread" in block["components"]:
            scores.append(spread)
        return within_length_range(block["length_range"], lengths(),
                                   getattr(model, BANK).calibration(torch.stack(scores)))


def within_length_range(length_range, lengths, uncertainty: torch.Tensor) -> torch.Tensor | None:
    """`uncertainty (B,)` where the inputs' lengths lie in the calibration rows' `length_range` ([low, high], None:
    any): the 5 % at 0.95 holds only for inputs like the calibration rows. `lengths`: a DNA batch's window length (an
    int: outside the range the whole batch is None) or a text batch's token counts `(B,)` (rows outside the range are
    NaN, the others served; without a read of the device where compiled). One warning either way."""
    if length_range is None or lengths is None:
        return uncertainty
    low, high = length_range
    if isinstance(lengths, int):
        if low <= lengths <= high:
            return uncertainty
        logging.get_logger(__name__).warning_once(
            f"InSubModel: `uncertainty` was calibrated on inputs of {low}-{high} bases and this batch has {lengths}, so "
            f"it is None: its 5 % at 0.95 holds only at the calibrated lengths. Cut the inputs to {low}-{high} bases, "
            "or fit at this length: model.fit_uncertainty(your_inputs_of_this_length).")
        return None
    inside = (lengths >= low) & (lengths <= high)
    if not torch.compiler.is_compiling() and not bool(inside.all()):
        logging.get_logger(__name__).warning_once(
            f"InSubModel: `uncertainty` was calibrated on sentences of {low}-{high} tokens; rows of other lengths are "
            f"NaN (not served): its 5 % at 0.95 holds only at the calibrated lengths. Fit on sentences as long as "
            "yours: model.fit_uncertainty(your_sentences).")
    return torch.where(inside, uncertainty, torch.full_like(uncertainty, float("nan")))


def warn_stale_settings(block) -> None:
    """Says once per change that the calibration was fitted with other settings (`block['fitted_with']`) than
    `block` (a dict) names now."""
    now, fitted = fitted_settings(block), block["fitted_with"]
    said = ", ".join(f"{key} {fitted.get(key)!r} -> {now[key]!r}" for key in FITTED_SETTINGS
                     if fitted.get(key) != now[key])
    logging.get_logger(__name__).warning_once(
        f"InSubModel: config.uncertainty changed since the calibration was fitted ({said}), so `uncertainty` is None: "
        f"its ranks belong to the fitted settings. Fit again with them: model.fit_uncertainty(your_inputs, "
        f"k={block['k']}).")


READINGS: dict[str, Reading] = {r.name: r for r in (SpreadReading(), LengthSpreadReading(), KnnReading(),
                                                    CalibratedReading())}


def is_calibrated(block) -> bool:
    """Whether an uncertainty block (a dict, or None) names the calibrated reading, what `fit_uncertainty` fits."""
    return (block or {}).get("reading") == CalibratedReading.name


def reads_lengths(block) -> bool:
    """Whether an uncertainty block (a dict) names a reading of token counts (`LengthSpreadReading`)."""
    return (block or {}).get("reading") == LengthSpreadReading.name


def reads_bank(block) -> bool:
    """Whether an uncertainty block (a dict) names the k-NN distance alone (`KnnReading`)."""
    return (block or {}).get("reading") == KnnReading.name


def served_reading(block) -> Reading | None:
    """The reading a config's `uncertainty` block (the dict) serves as `uncertainty`: the calibrated one where it
    is fitted, else None (the model's `uncertainty` is then None)."""
    reading = READINGS[block["reading"]]
    return reading if is_calibrated(block) and reading.fitted(block) else None


def single_reading(block) -> Reading | None:
    """The single reading a config's `uncertainty` block (the dict) names and has fitted (its number in its own
    output, `Reading.output`), or None: none named, or the calibrated one."""
    reading = READINGS[block["reading"]]
    return reading if not is_calibrated(block) and reading.fitted(block) else None

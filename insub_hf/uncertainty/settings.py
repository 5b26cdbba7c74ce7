"""A model's uncertainty settings: one nested block of its config (`InSubConfig.uncertainty`, as `encoder_config` is
nested), typed as `UncertaintyConfig`. A config.json written before the block existed is read by
`compat.from_former_keys`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from transformers import PretrainedConfig

from ..validation import check_choice, check_range
from .readings import READINGS

# What a model's `uncertainty` can be
MODEL_READINGS = tuple(READINGS)
# The neighbour of every k-NN reading and measurement of the package unless told otherwise: Sun et al. (ICML 2022)
# use k = 50 on CIFAR-10's 50,000 training images
DEFAULT_K = 50


@dataclass(frozen=True)
class UncertaintyConfig:
    """What `InSubModelOutput.uncertainty` is and the settings it reads with; each value is fixed after training
    (on validation data) and saved with the model.

    Args:
        reading: a name in `readings.READINGS`: "calibrated" (what `InSubModel.fit_uncertainty` fits: the k-NN
            distance and the oriented spread, each ranked among held-out calibration inputs, combined, in [0, 1]),
            "spread" (the heads' spread read in `direction`), "spread_by_length" (a text model's: that spread
            standardised within token-count buckets, `length_buckets`) or "knn" (the cosine distance of the
            representation to the k-th nearest row of the model's bank, set by `InSubModel.set_bank`). A reading
            that is not fitted (the spread without a direction) serves `uncertainty=None`.
        direction: how the heads' spread is read so that higher means more likely out of distribution for this
            model: +1 (high spread) or -1 (low spread); None until fixed on validation data.
        k: the k-NN reading's neighbour, also what `InSubOODDetector` reads the model's bank with.
        bank_size: rows of the model's k-NN bank (0: no bank). A bank may sit beside a "spread" reading: then it is
            what `InSubOODDetector`'s `knn` score searches.
        bank_weights: `knn.encoder_and_heads_fingerprint` of the weights the bank was embedded with; a bank beside
            other weights (trained further since) is dropped when saved and refused when loaded.
        length_buckets: the "spread_by_length" reading's settings, fitted on validation sentences
            (`length.fit_length_buckets`): `length_edges`, `length_mean`, `length_std` and `direction`.
        components: the calibrated reading's combined readings, in `conformal.COMPONENTS` order ("spread" only where
            its direction held), as the fit chose them against the outliers it made (`conformal.choose_components`).
        combination: how the components make one score: "fisher" (their p-values by Fisher's rule, every fit) or
            "max_z" (the larger standardised score: folders fitted up to commit 9637199).
        calibration_size: the calibrated reading's `[n_a, n_b]`: the bank rows each reading's p-values are read on, and
            the held-out calibration inputs the combination is ranked against.
        length_range: the calibrated reading's `[low, high]` lengths of its calibration rows (a DNA model's window,
            a text model's token counts; None: any length): a DNA batch of another length serves None, a sentence
            of another token count NaN, with one warning.
        made_outlier_auroc: the calibrated reading's AUROC against outliers made for the purpose at its fit (the
            bank rows shuffled within themselves); below `fitting.SEES_OUTLIERS` it cannot see outliers, and
            the fit and the card say so.
        fitted_with: what the calibrated reading was fitted with (`conformal.FITTED_SETTINGS`: k, components,
            combination, direction, calibration_size, length_range): where the block names other values now,
            `uncertainty` is None, with one warning naming the line that fits again.
    """

    reading: str = "spread"
    direction: int | None = None
    k: int = DEFAULT_K
    bank_size: int = 0
    bank_weights: str | None = None
    length_buckets: dict | None = None
    components: list[str] | None = None
    combination: str | None = None
    calibration_size: list[int] | None = None
    length_range: list[int] | None = None
    made_outlier_auroc: float | None = None
    fitted_with: dict | None = None

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> UncertaintyConfig:
        """The block `values` (some of the fields; the rest default), its keys checked."""
        values = dict(values or {})
        unknown = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"InSubConfig.uncertainty has no keys {unknown}; its keys are "
                             f"{[f.name for f in dataclasses.fields(cls)]}.")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def check(self, modality: str) -> UncertaintyConfig:
        """Raises, naming the field and what it allows, unless the settings make one reading for a `modality` model."""
        check_choice("InSubConfig.uncertainty['reading']", self.reading, MODEL_READINGS)
        if isinstance(self.direction, bool):  # a bool is an int to Python: True would read as +1
            raise ValueError(f"InSubConfig.uncertainty['direction'] must be one of [1, -1, None], got {self.direction!r}"
                             " (a bool; +1 reads high spread as unusual, -1 low).")
        check_choice("InSubConfig.uncertainty['direction']", self.direction, (1, -1, None))
        check_range("InSubConfig.uncertainty['bank_size']", self.bank_size, low=0, integer=True)
        check_range("InSubConfig.uncertainty['k']", self.k, low=1, integer=True)
        READINGS[self.reading].check(self, modality)
        if self.bank_size:
            check_range("InSubConfig.uncertainty['k']", self.k, low=1, high=self.bank_size, integer=True)
        return self


class UncertaintyBlock(dict):
    """`InSubConfig.uncertainty` as the config holds it: a dict (saved, compared and read as one) whose item
    assignment and `update` are checked as `set_uncertainty` checks a change, so that `config.uncertainty['k'] = 100`
    is refused where it is written, not deep inside a later forward."""

    def __init__(self, values: dict[str, Any], modality: str):
        super().__init__(values)
        self.modality = modality

    def __setitem__(self, key: str, value: Any) -> None:
        UncertaintyConfig.from_dict({**self, key: value}).check(self.modality)
        super().__setitem__(key, value)

    def update(self, *args: Any, **kwargs: Any) -> None:
        changed = {**self, **dict(*args, **kwargs)}
        UncertaintyConfig.from_dict(changed).check(self.modality)
        super().update(changed)

    def __reduce__(self):  # copies and pickles rebuild it whole, never item by item through the check
        return type(self), (dict(self), self.modality)


class UncertaintySettings:
    """The uncertainty block's doors on `InSubConfig` (a mixin: it reads `self.uncertainty` and `self.modality`):
    typed access, a checked change and its installation in one assignment."""

    @property
    def uncertainty_options(self) -> UncertaintyConfig:
        """`uncertainty` as a typed `UncertaintyConfig`."""
        given = self.uncertainty
        return given if isinstance(given, UncertaintyConfig) else UncertaintyConfig.from_dict(given)

    def checked_uncertainty(self, replace: Any = None, **changes: Any) -> UncertaintyConfig:
        """The `uncertainty` block with some values changed (`UncertaintyConfig` fields), or `replace`d whole (a dict
        or an `UncertaintyConfig`), checked as a whole; nothing is installed."""
        if replace is not None and not isinstance(replace, (dict, UncertaintyConfig)):
            raise ValueError("InSubConfig.uncertainty must be a dict of UncertaintyConfig fields (reading, direction, "
                             f"k, bank_size, bank_weights, length_buckets, ...), got {replace!r}.")
        base = self.uncertainty_options if replace is None else (
            replace if isinstance(replace, UncertaintyConfig) else UncertaintyConfig.from_dict(replace))
        return dataclasses.replace(base, **changes).check(self.modality)

    def install_uncertainty(self, block: UncertaintyConfig) -> None:
        """Makes the checked `block` the config's `uncertainty`, in one assignment."""
        # past InSubConfig.__setattr__, which checks a whole block assigned from outside as a change
        PretrainedConfig.__setattr__(self, "uncertainty", UncertaintyBlock(block.to_dict(), self.modality))

    def set_uncertainty(self, **changes: Any) -> UncertaintyConfig:
        """Replaces some of the `uncertainty` block's values (`UncertaintyConfig` fields), checked as a whole;
        returns the block."""
        block = self.checked_uncertainty(**changes)
        self.install_uncertainty(block)
        return block

"""configuration_insub: what this folder's loaders run of the insub-hf modules compat, encoders.base, encoders.build, encoders.frozen_base, encoders.presets, encoders.registry, model.configuration_insub, model.label_settings, objectives, objectives.base, objectives.scd, recipes, uncertainty.conformal, uncertainty.knn, uncertainty.length, uncertainty.readings, uncertainty.settings, validation (documented there), bundled by `insub_hf.hub.remote_code`."""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import torch
import warnings
from dataclasses import MISSING, asdict, dataclass, field, fields
from transformers import AutoConfig, AutoModel, PretrainedConfig
from transformers.configuration_utils import SubConfigSpec
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.utils import logging
from typing import ClassVar


POOLINGS = ("cls", "mean")


def register_own_encoders(pairs) -> None:
    """Registers the package's own encoder `(config class, model class)` pairs with `AutoConfig` and `AutoModel`, so
    that an `InSubConfig` naming one resolves wherever it loads (the installed package or a repo's remote code)."""
    for config_class, model_class in pairs:
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        AutoModel.register(config_class, model_class, exist_ok=True)


def check_choice(field: str, value: Any, allowed: Iterable[Any]) -> None:
    """Raises ValueError unless `value` is one of `allowed`."""
    allowed = tuple(allowed)
    if value not in allowed:
        raise ValueError(f"{field} must be one of {list(allowed)}, got {value!r}.")


def check_range(
    field: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    integer: bool = False,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
) -> None:
    """Raises ValueError unless `value` is a finite number (an int when `integer`) inside [low, high]."""
    kind = "an integer" if integer else "a number"
    bounds = []
    if low is not None:
        bounds.append(f"{'>=' if low_inclusive else '>'} {low}")
    if high is not None:
        bounds.append(f"{'<=' if high_inclusive else '<'} {high}")
    allowed = f"{kind} {' and '.join(bounds)}".strip()
    is_number = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not is_number or not math.isfinite(value):
        raise ValueError(f"{field} must be {allowed}, got {value!r}.")
    too_low = low is not None and (value < low if low_inclusive else value <= low)
    too_high = high is not None and (value > high if high_inclusive else value >= high)
    if too_low or too_high:
        raise ValueError(f"{field} must be {allowed}, got {value!r}.")


def checked(
    default: Any = MISSING,
    help: str = "",
    *,
    default_factory: Any = MISSING,
    low: float | None = None,
    high: float | None = None,
    integer: bool = False,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
    choices: Iterable[Any] | None = None,
    optional: bool = False,
    **metadata: Any,
):
    """A dataclass `field` whose value (each element, for a list) `check_fields` checks: a number in [low, high]
    (`check_range`) or one of `choices`; `optional` lets None through. `help` and other `metadata` are what
    `HfArgumentParser` reads."""
    check = dict(low=low, high=high, integer=integer, low_inclusive=low_inclusive, high_inclusive=high_inclusive)
    rule = {"choices": tuple(choices)} if choices is not None else {"range": check}
    rule["optional"] = optional
    if choices is not None:  # the command line lists them and refuses others itself (argparse `choices`)
        metadata = {"choices": tuple(choices), **metadata}
    made = field(default=default, default_factory=default_factory, metadata={"help": help, **metadata})
    _RULES[id(made)] = (made, rule)
    return made


_RULES: dict[int, tuple[Any, dict]] = {}


def field_rule(f: Any) -> dict | None:
    """The `checked` rule of a dataclass field (None for a plain field)."""
    entry = _RULES.get(id(f))
    return entry[1] if entry is not None and entry[0] is f else None


def check_fields(arguments: Any) -> None:
    """Checks every `checked` field of a dataclass instance (a list: each element, and no element twice); messages
    name `ClassName.field`."""
    for f in fields(arguments):
        rule = field_rule(f)
        if rule is None:
            continue
        value = getattr(arguments, f.name)
        name = f"{type(arguments).__name__}.{f.name}"
        if value is None and rule["optional"]:
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        repeated = sorted({repr(v) for i, v in enumerate(values) if v in values[:i]})
        if repeated:  # a repeated seed or setting would count one run twice in a table
            raise ValueError(f"{name} lists {', '.join(repeated)} more than once, got {list(values)!r}; give each once.")
        for item in values:
            if "choices" in rule:
                check_choice(name, item, rule["choices"])
            else:
                check_range(name, item, **rule["range"])


DEFAULT_ENCODER = {
    "model_type": "vit",
    "image_size": 32,
    "patch_size": 4,
    "hidden_size": 192,
    "num_hidden_layers": 12,
    "num_attention_heads": 3,
    "intermediate_size": 768,
}


OWN_ENCODERS = ()


register_own_encoders(OWN_ENCODERS)


@dataclass
class ObjectiveConfig:
    """An objective's own settings: a dataclass of `checked` fields (each checked when built, the message naming
    `ClassName.field` and the allowed values), saved in the model's config.json as `InSubConfig.objective_config`."""

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


@dataclass
class SCDConfig(ObjectiveConfig):
    """SCD's settings (`InSubConfig.objective_config` with `objective="scd"`)."""

    name = "scd"
    title = "SCD (self-contrastive decorrelation)"
    encoder_inputs = ("input_ids",)
    modality = "text"

    dropout: float = checked(0.05, low=0.0, high=1.0, high_inclusive=False)
    dropout_2: float = checked(0.155, low=0.0, high=1.0, high_inclusive=False)
    temperature: float = checked(0.05, low=0.0, low_inclusive=False)
    alpha: float = checked(1.0, low=0.0)
    beta: float = checked(0.005225, low=0.0)
    off_diagonal_weight: float = checked(0.012, low=0.0)


OBJECTIVE_CONFIGS: dict[str, type[ObjectiveConfig]] = {SCDConfig.name: SCDConfig}


PRETRAINING = dict(
    seed=0, weight_decay=1e-4, warmup_steps=0.05, lr_scheduler_type="cosine", save_strategy="epoch", save_total_limit=1,
    dataloader_drop_last=True,
)


@dataclass(frozen=True)
class Recipe:
    """The `InSubConfig` fields one modality's InSub models start from (`InSubConfig.for_*` takes overrides), and
    `training`: the `InSubTrainingArguments` fields its pretraining jobs start from (beside `PRETRAINING`)."""

    objective: str
    num_heads: int
    diversity_alpha: float
    diversity_weight: float
    head_hidden_sizes: tuple[int, ...]
    head_output_size: int
    normalize_heads: bool = True
    head_norm: str = "batchnorm"
    freeze_encoder: bool = False
    training: dict = field(default_factory=dict, compare=False)

    def config_fields(self) -> dict:
        """The recipe as `InSubConfig` keyword arguments."""
        fields = {**asdict(self), "head_hidden_sizes": list(self.head_hidden_sizes)}
        fields.pop("training")
        return fields

    def training_arguments(self, **overrides) -> dict:
        """`InSubTrainingArguments` keyword arguments of this modality's pretraining: `PRETRAINING`, `training`,
        then `overrides`."""
        return {**PRETRAINING, **self.training, **overrides}


IMAGE = Recipe("simclr", num_heads=5, diversity_alpha=0.08, diversity_weight=0.3, head_hidden_sizes=(512,),
               head_output_size=128,
               training=dict(num_train_epochs=3, per_device_train_batch_size=240, learning_rate=3e-3, logging_steps=5))
TEXT = Recipe("scd", num_heads=3, diversity_alpha=0.1, diversity_weight=0.01, head_hidden_sizes=(512, 512),
              head_output_size=512, normalize_heads=False, freeze_encoder=True,
              training=dict(num_train_epochs=1, per_device_train_batch_size=64, learning_rate=1e-3,
                            logging_strategy="epoch"))
DNA = Recipe("genomenet", num_heads=5, diversity_alpha=0.08, diversity_weight=1.5, head_hidden_sizes=(),
             head_output_size=64, normalize_heads=False, head_norm="none",
             training=dict(num_train_epochs=4, per_device_train_batch_size=64, learning_rate=1e-3,
                           logging_strategy="epoch"))
DNA_ENCODER = {"model_type": "insub_genomic"}


REMOVAL_VERSION = "0.3.0"


FORMER_CONFIG_KEYS = {"uncertainty_reading": "reading", "uncertainty_direction": "direction", "knn_k": "k",
                      "knn_bank_size": "bank_size", "knn_bank_weights": "bank_weights",
                      "length_standardisation": "length_buckets"}


_warned: set[str] = set()


def warn_former(former: str, now: str, stacklevel: int = 3, way_out: str = "") -> None:
    """Warns once per process that `former` is `now` and that the former form goes in `REMOVAL_VERSION`
    (`way_out`: what to do, where it is not to write the new form)."""
    if former in _warned:
        return
    _warned.add(former)
    warnings.warn(f"{former} is {now} now; the former form stops working in insub-hf {REMOVAL_VERSION}"
                  f"{way_out}.", FutureWarning, stacklevel=stacklevel)


def from_former_keys(kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """Pops the flat `FORMER_CONFIG_KEYS` out of a config's keyword arguments `kwargs`, warning once, and returns
    them as the uncertainty block's values, each as given (None where there are none)."""
    found = {FORMER_CONFIG_KEYS[key]: kwargs.pop(key) for key in list(kwargs) if key in FORMER_CONFIG_KEYS}
    for key, block_key in FORMER_CONFIG_KEYS.items():
        if block_key in found:
            warn_former(f"InSubConfig({key}=...)", f"InSubConfig(uncertainty={{{block_key!r}: ...}})", 4)
    return found or None


_UNSET = object()


def former_key(config, key: str, value: Any = _UNSET) -> Any:
    """`config.<key>` for a flat `FORMER_CONFIG_KEYS` key, read from or written to its uncertainty block (a write
    checked as the block's own), warning once."""
    now = f"InSubConfig.uncertainty[{FORMER_CONFIG_KEYS[key]!r}]"
    warn_former(f"InSubConfig.{key}", now, stacklevel=4)
    if value is _UNSET:
        return config.uncertainty.get(FORMER_CONFIG_KEYS[key])
    config.uncertainty[FORMER_CONFIG_KEYS[key]] = value


def with_fitted_record(block: dict[str, Any] | None) -> dict[str, Any] | None:
    """A calibrated uncertainty block written before it recorded `fitted_with` (insub-hf up to commit ec29209) or
    its `combination` (up to commit 9637199), given both as it was fitted: the values it was saved with, and the
    larger standardised score ("max_z"), whose ranks still hold their 5 % (said once: a new fit combines by
    Fisher's rule)."""
    from transformers.utils import logging

    pass
    pass
    pass

    if not isinstance(block, dict) or not is_calibrated(block):
        return block
    if block.get("combination") is not None and block.get("fitted_with") is not None:
        return block
    block = dict(block)
    if block.get("combination") is None:
        block["combination"] = "max_z"
        logging.get_logger(__name__).warning_once(
            "InSubConfig: this calibrated `uncertainty` was fitted by an insub-hf up to commit 9637199, which combined "
            "its readings by the larger standardised score (still 5 % above 0.95, but up to several AUROC points under "
            "its better reading); fit it again for Fisher's rule: model.fit_uncertainty(your_inputs).")
    if block.get("fitted_with") is None:
        block["fitted_with"] = fitted_settings({"k": DEFAULT_K, **block})  # k: the default, where left out
    elif "combination" not in block["fitted_with"]:
        block["fitted_with"] = {**block["fitted_with"], "combination": "max_z"}
    return block


def former_keys_into_block(config_dict: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """`config_dict` (a config.json's) with the flat `FORMER_CONFIG_KEYS` among `kwargs` (a `from_pretrained`'s,
    popped, warning once) written into its uncertainty block, each as given; `config_dict` itself where none."""
    given = from_former_keys(kwargs)
    if not given:
        return config_dict
    config_dict = dict(config_dict)
    block = from_former_keys(config_dict) or dict(config_dict.get("uncertainty") or {})
    config_dict["uncertainty"] = {**with_fitted_record(block), **given}
    return config_dict


COMPONENTS = ("knn", "spread")
COMBINATIONS = ("fisher", "max_z")
FITTED_SETTINGS = ("k", "components", "combination", "direction", "calibration_size", "length_range")


def fitted_settings(block) -> dict:
    """The values of `FITTED_SETTINGS` in `block` (a dict), as `fitted_with` records them (lists as lists)."""
    return {key: list(block[key]) if isinstance(block.get(key), (list, tuple)) else block.get(key)
            for key in FITTED_SETTINGS}


BANK = "knn_bank"


LENGTH_SETTINGS = ("length_edges", "length_mean", "length_std", "direction")


def check_length_buckets(settings: dict | None, modality: str) -> None:
    """The "spread_by_length" reading's settings for a model reading `modality`: a text model's, its keys, one more
    bucket than edges, positive deviations."""
    if modality != "text":
        raise ValueError("InSubConfig.uncertainty['reading']='spread_by_length' reads sentence lengths: it is a text "
                         f"model's; this model reads {modality} (allowed here: 'spread', 'knn').")
    name = "InSubConfig.uncertainty['length_buckets']"
    if not isinstance(settings, dict) or set(settings) != set(LENGTH_SETTINGS):
        raise ValueError(f"{name} must be a dict with keys {list(LENGTH_SETTINGS)} for the reading "
                         f"'spread_by_length' (uncertainty.length.fit_length_buckets), got {settings!r}.")
    check_choice(f"{name}['direction']", settings["direction"], (1, -1))
    edges, means, stds = (settings[k] for k in LENGTH_SETTINGS[:3])
    if not (len(means) == len(stds) == len(edges) + 1) or not all(s > 0 for s in stds):
        raise ValueError(f"{name}: length_mean and length_std need one value per bucket ({len(edges) + 1} for "
                         f"{len(edges)} edges) and positive deviations; got {len(means)} means and stds {stds}.")


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


MODEL_READINGS = tuple(READINGS)
DEFAULT_K = 50


@dataclass(frozen=True)
class UncertaintyConfig:
    """What `InSubModelOutput.uncertainty` is and the settings it reads with; each value is fixed after training
    (on validation data) and saved with the model."""

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


_SHA256 = re.compile(r"[0-9a-f]{64}")


def check_frozen_base(value) -> None:
    """`InSubConfig.frozen_base`: None or `{"repo_id": str, "sha256": 64 hex digits}`."""
    if value is None:
        return
    if (not isinstance(value, dict) or set(value) != {"repo_id", "sha256"} or not isinstance(value["repo_id"], str)
            or not value["repo_id"] or not isinstance(value["sha256"], str) or not _SHA256.fullmatch(value["sha256"])):
        raise ValueError(f"InSubConfig.frozen_base must be None or {{'repo_id': a Hub repo id or folder, 'sha256': the "
                         f"64 hex digits of its weights' fingerprint}}, got {value!r}.")


MAX_LABELS = 100_000

PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")


def check_label_settings(num_labels, problem_type, where: str = "InSubConfig") -> None:
    """Refuses label settings the classifiers cannot honour, with the reason: a `problem_type` outside
    `PROBLEM_TYPES`, a single-label classifier over one class (a one-class softmax is always 1 and never learns), or
    more than `MAX_LABELS` labels."""
    if problem_type is not None:
        check_choice(f"{where}.problem_type", problem_type, PROBLEM_TYPES)
    if num_labels == 1 and problem_type == "single_label_classification":
        raise ValueError(
            f"{where}.num_labels must be at least 2 for problem_type='single_label_classification', got 1: a one-class "
            "softmax is always 1 and never learns (num_labels=1 is transformers' regression convention)."
        )
    check_range(f"{where}.num_labels", num_labels, low=1, high=MAX_LABELS, integer=True)


HEAD_NORMS = ("batchnorm", "none")
DIVERSITY_REDUCTIONS = ("mean", "sum")
OBJECTIVE_FIELDS: dict[str, tuple[str, ...]] = {
    field: tuple(name for name, options in OBJECTIVE_CONFIGS.items() if field in options.__dataclass_fields__)
    for every in OBJECTIVE_CONFIGS.values() for field in every.__dataclass_fields__
}


def encoder_field(encoder_config, key: str):
    """A field of an encoder config given as a config object or a dict (None where it has none)."""
    return encoder_config.get(key) if isinstance(encoder_config, dict) else getattr(encoder_config, key, None)


MAX_DIVERSITY_ALPHA, MAX_DIVERSITY_WEIGHT = 10.0, 1e4
DEFAULT_OBJECTIVES = {"pixel_values": "simclr", "input_ids": "scd", "dna_one_hot": "genomenet"}


def encoder_input(config) -> str:
    """The input an `InSubConfig`'s encoder reads (`MODALITY_INPUTS` values): timm models read images; a model type
    nobody registered is left to `build_encoder`'s own error."""
    pass

    if config.timm_model_name is not None:
        return "pixel_values"
    model_type = encoder_field(config.encoder_config, "model_type")
    try:
        return getattr(encoder_model_class(model_type), "main_input_name", None)
    except KeyError:
        return None


def _check_attention_heads(encoder_config) -> None:
    """A transformer encoder's hidden_size must split evenly over its attention heads."""
    hidden, heads = (encoder_field(encoder_config, key) for key in ("hidden_size", "num_attention_heads"))
    if isinstance(hidden, int) and isinstance(heads, int) and heads > 0 and hidden % heads:
        raise ValueError(
            f"InSubConfig.encoder_config: hidden_size={hidden} must be a multiple of num_attention_heads={heads} "
            f"(each head gets hidden_size / num_attention_heads dimensions); e.g. hidden_size={hidden // heads * heads or heads}."
        )


_BOOKKEEPING_KEYS = {
    "model_type", "transformers_version", "auto_map", "custom_pipelines", "architectures", "torch_dtype", "dtype",
    "name_or_path", "num_labels", "output_attentions", "output_hidden_states", "use_cache", "attn_implementation",
    "experts_implementation", "rope_scaling", "rope_theta", "per_layer_config", "tie_word_embeddings",
    "insub_card_only",  # a card-only folder's build line (`model_files.CARD_ONLY_KEY`), which its loading says
}


def _check_unknown_keys(kwargs: dict[str, Any], encoder_keys: set[str], objective: str) -> None:
    """transformers keeps an unknown keyword as an attribute nobody reads, so a misspelt field would silently do
    nothing: a key close to a field (`num_head`) is refused, naming that field, and so is a field of the encoder
    config (`hidden_size`). A key close to none only warns: a config.json written by a later release or another
    tool must still load."""
    known = set(InSubConfig.__dataclass_fields__) | set(PretrainedConfig.__dataclass_fields__)
    for key in sorted(set(kwargs) - known - _BOOKKEEPING_KEYS):
        if key.startswith("_"):
            continue
        if key in encoder_keys:
            raise ValueError(
                f"InSubConfig got {key}={kwargs[key]!r}, a field of the encoder: set it in encoder_config "
                f"(e.g. encoder_config={{..., {key!r}: {kwargs[key]!r}}})."
            )
        if key in OBJECTIVE_FIELDS:
            owners, name = OBJECTIVE_FIELDS[key], key
            objective = objective if objective in owners else owners[0]
            raise ValueError(
                f"InSubConfig got {key}={kwargs[key]!r}, a setting of objective={objective!r}: set it in "
                f"objective_config (objective={objective!r}, objective_config={{{name!r}: {kwargs[key]!r}}})."
            )
        close = difflib.get_close_matches(key, sorted(InSubConfig.__dataclass_fields__), n=1, cutoff=0.75)
        if close:
            raise ValueError(
                f"InSubConfig got {key}={kwargs[key]!r}, which is not one of its fields; did you mean {close[0]!r}?"
            )
        warnings.warn(
            f"InSubConfig got {key}={kwargs[key]!r}, which is not one of its fields (kept as an attribute; nothing "
            "reads it).", stacklevel=4,
        )


class InSubConfig(UncertaintySettings, PretrainedConfig):
    r"""Architecture of an InSub model (Vahidi et al., AAAI 2024)."""

    model_type = "insub"
    sub_configs_defaults = {"encoder_config": SubConfigSpec(config_class=AutoConfig, model_type="vit", optional=True)}

    encoder_config: dict | PretrainedConfig | None = None
    timm_model_name: str | None = None
    timm_kwargs: dict | None = None
    pooling: str = "cls"
    num_heads: int = IMAGE.num_heads
    head_hidden_sizes: list[int] | None = None
    head_output_size: int = IMAGE.head_output_size
    head_norm: str = "batchnorm"
    diversity_alpha: float = IMAGE.diversity_alpha
    diversity_weight: float = IMAGE.diversity_weight
    diversity_eps: float = 1e-4
    diversity_reduction: str = "mean"
    objective: str | None = None
    objective_config: dict | ObjectiveConfig | None = None
    normalize_heads: bool = True
    batch_ensemble_size: int = 1
    freeze_encoder: bool = False
    frozen_base: dict | None = None
    uncertainty: dict | None = None

    def __setattr__(self, key: str, value: Any) -> None:
        if key in FORMER_CONFIG_KEYS and "uncertainty" in self.__dict__:  # a flat key of the block, written there
            return former_key(self, key, value)
        if key in FIELD_CHECKS and key in self.__dict__:  # a change after construction, checked where it is written
            FIELD_CHECKS[key](value)
        if key == "uncertainty" and isinstance(self.__dict__.get(key), UncertaintyBlock):  # a whole block, after
            self.install_uncertainty(self.checked_uncertainty(replace=value))  # construction, is checked as a change
            return
        # a field of the encoder written on the top-level config (a former form) goes to the encoder's config, so
        # that what save_pretrained writes, from_pretrained reads; reading it back there answers from the encoder
        encoder = self.__dict__.get("encoder_config")
        if (isinstance(encoder, PretrainedConfig) and not key.startswith("_") and key not in _OWN_KEYS
                and key in encoder.to_dict()):
            warn_former(f"InSubConfig.{key}", f"InSubConfig.encoder_config.{key}")
            setattr(encoder, key, value)
            self.__dict__.setdefault("_encoder_fields_written", set()).add(key)
            return
        super().__setattr__(key, value)

    def __getattr__(self, key: str) -> Any:
        # only what was written here (`__setattr__`): libraries probe configs with hasattr, and an encoder field
        # answered to them would change what they do
        if key in self.__dict__.get("_encoder_fields_written", ()):
            warn_former(f"InSubConfig.{key}", f"InSubConfig.encoder_config.{key}")
            return getattr(self.__dict__["encoder_config"], key)
        if key in FORMER_CONFIG_KEYS and "uncertainty" in self.__dict__:  # a flat key of the block, read from it
            return former_key(self, key)
        raise AttributeError(f"'InSubConfig' object has no attribute {key!r}")

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out.pop("_encoder_fields_written", None)  # bookkeeping of `__setattr__`: the values are the encoder's
        return out

    def __post_init__(self, **kwargs: Any) -> None:
        if self.encoder_config is not None and self.timm_model_name is not None:
            raise ValueError(
                "InSubConfig: set only one of `encoder_config` and `timm_model_name`, got both "
                f"(timm_model_name={self.timm_model_name!r})."
            )
        if isinstance(self.encoder_config, str):  # the config is the architecture; names are the presets' job
            raise ValueError(
                f"InSubConfig.encoder_config must be a dict with a `model_type` or an encoder config, got the name "
                f"{self.encoder_config!r}; build it with insub_hf.named_encoder({self.encoder_config!r})."
            )
        if isinstance(self.encoder_config, dict) and "model_type" not in self.encoder_config:
            raise ValueError(
                "InSubConfig.encoder_config: a dict needs a `model_type` (e.g. 'vit', 'resnet', 'bert', "
                f"'insub_genomic'), got keys {sorted(self.encoder_config)}."
            )
        if isinstance(self.encoder_config, dict) and self.encoder_config["model_type"] not in CONFIG_MAPPING:
            import transformers

            raise ValueError(
                f"InSubConfig.encoder_config.model_type={self.encoder_config['model_type']!r} is not an encoder this "
                f"installation knows (transformers {transformers.__version__}): use a transformers model type (e.g. "
                f"'vit', 'resnet', 'bert'), insub-hf's {[c.model_type for c, _ in OWN_ENCODERS]}, or install the library "
                "that registers it. A checkpoint naming it was saved with code this environment lacks."
            )
        if self.encoder_config is None and self.timm_model_name is None:
            self.encoder_config = dict(DEFAULT_ENCODER)
        if self.head_hidden_sizes is None:  # the image recipe's, as every other default
            self.head_hidden_sizes = list(IMAGE.head_hidden_sizes)
        if not isinstance(self.head_hidden_sizes, (list, tuple)):
            raise ValueError(
                "InSubConfig.head_hidden_sizes must be a list of hidden widths (e.g. [2048]; [] for one Linear layer), "
                f"got {self.head_hidden_sizes!r}."
            )
        given = sorted(set(kwargs) & set(FORMER_CONFIG_KEYS))
        former = from_former_keys(kwargs)
        if former is not None:
            if self.uncertainty is not None:
                raise ValueError(f"InSubConfig got the flat keys {given} of a former config beside `uncertainty`: "
                                 "give them in the `uncertainty` block only.")
            self.uncertainty = former
        encoder = self.encoder_config
        _check_unknown_keys(
            kwargs, set(encoder if isinstance(encoder, dict) else (encoder.to_dict() if encoder else {})), self.objective
        )
        if "num_labels" in kwargs:  # before transformers builds an id2label entry per class
            check_label_settings(kwargs["num_labels"], kwargs.get("problem_type"))
            names = self.id2label  # transformers would replace given names by LABEL_i ones, saying so in a log line
            given = names is not None and any(str(v) != f"LABEL_{k}" for k, v in names.items())
            if given and kwargs["num_labels"] is not None and len(names) != kwargs["num_labels"]:
                raise ValueError(f"InSubConfig.id2label has {len(names)} names but num_labels={kwargs['num_labels']}: "
                                 "give one name per class (or leave num_labels out: it follows id2label).")
        if self.objective is None:
            self.objective = DEFAULT_OBJECTIVES.get(encoder_input(self), "simclr")
        self.timm_kwargs = dict(self.timm_kwargs or {})
        if self.objective == "dino" and self.timm_model_name and "vit" in self.timm_model_name:
            self.timm_kwargs.setdefault("dynamic_img_size", True)  # local crops are smaller than global ones
        super().__post_init__(**kwargs)
        self._check_values()

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any) -> InSubConfig:
        """`PretrainedConfig.from_dict`, with the flat keys of a former config among `kwargs` (`knn_k=7`, as
        `from_pretrained` passes them on) kept as given in the uncertainty block, with their warning."""
        return super().from_dict(former_keys_into_block(config_dict, kwargs), **kwargs)

    @classmethod
    def for_images(cls, **overrides: Any) -> InSubConfig:
        """The image recipe (`insub_hf.recipes.IMAGE`: SimCLR, M 5, alpha 0.08, lambda 0.3, heads 512 -> 128), on the
        default encoder unless `encoder_config` (or `timm_model_name`) is given; `overrides` replace any field."""
        return cls(**{**IMAGE.config_fields(), **overrides})

    @classmethod
    def for_text(cls, encoder_config, **overrides: Any) -> InSubConfig:
        """The text recipe (`insub_hf.recipes.TEXT`: SCD, M 3, alpha 0.1, lambda 0.01, mean pooling) on a BERT-style
        `encoder_config`; `overrides` replace any field."""
        return cls(**{**TEXT.config_fields(), "pooling": "mean", "encoder_config": encoder_config, **overrides})

    @classmethod
    def for_dna(cls, encoder_config=None, **overrides: Any) -> InSubConfig:
        """The DNA recipe (`insub_hf.recipes.DNA`: Self-GenomeNet, M 5, alpha 0.08, lambda 1.5, heads one Linear to
        64) on the genomic encoder (`GenomicEncoderConfig()`, `recipes.DNA_ENCODER`, unless `encoder_config` is given)."""
        encoder_config = dict(DNA_ENCODER) if encoder_config is None else encoder_config
        return cls(**{**DNA.config_fields(), "encoder_config": encoder_config, **overrides})

    @property
    def hidden_size(self) -> int | None:
        """The representation size d (`pooler_output`; what sentence-transformers and other tools read): the
        encoder's `hidden_size`, or its last stage's width for CNNs; None for a timm encoder (known once built)."""
        if self.encoder_config is None:
            return None
        sizes = encoder_field(self.encoder_config, "hidden_sizes")
        return sizes[-1] if sizes else encoder_field(self.encoder_config, "hidden_size")

    def get_text_config(self, *args: Any, **kwargs: Any) -> PretrainedConfig:
        """A text model's encoder config (its vocabulary and sizes, what transformers' token tools such as
        `resize_token_embeddings` read and write); this config for other models."""
        if isinstance(self.encoder_config, PretrainedConfig) and encoder_input(self) == "input_ids":
            return self.encoder_config
        return super().get_text_config(*args, **kwargs)

    def text_max_length(self, tokenizer) -> int:
        """Tokens per sentence a text model reads by default: the base model's (the tokenizer's `model_max_length`),
        capped by the encoder's position embeddings."""
        positions = encoder_field(self.encoder_config, "max_position_embeddings")
        return min(tokenizer.model_max_length, positions or tokenizer.model_max_length)

    @property
    def modality(self) -> str:
        """What the model reads: "image", "text" or "dna" (its objective's modality)."""
        return OBJECTIVE_CONFIGS[self.objective].modality

    @property
    def objective_options(self) -> ObjectiveConfig:
        """`objective_config` as its objective's typed, checked config (e.g. `SimCLRConfig`)."""
        return OBJECTIVE_CONFIGS[self.objective].from_dict(self.objective_config, self.objective)

    def _check_values(self) -> None:
        check_choice("InSubConfig.normalize_heads", self.normalize_heads, (True, False))
        check_choice("InSubConfig.freeze_encoder", self.freeze_encoder, (True, False))
        _check_attention_heads(self.encoder_config)
        check_choice("InSubConfig.objective", self.objective, tuple(OBJECTIVE_CONFIGS))
        check_label_settings(self.num_labels, self.problem_type)
        reads, takes = encoder_input(self), OBJECTIVE_CONFIGS[self.objective].encoder_inputs
        if reads is not None and reads not in takes:
            fitting = sorted(name for name, o in OBJECTIVE_CONFIGS.items() if reads in o.encoder_inputs)
            if not fitting:
                raise ValueError(
                    f"InSubConfig.encoder_config model_type={encoder_field(self.encoder_config, 'model_type')!r} reads "
                    f"{reads!r}; allowed encoders read one of {list(DEFAULT_OBJECTIVES)}."
                )
            raise ValueError(
                f"InSubConfig.objective={self.objective!r} trains encoders that read {list(takes)}, but this encoder "
                f"reads {reads}: use one of {fitting} with it, or another encoder."
            )
        given = self.objective_config
        expected = OBJECTIVE_CONFIGS[self.objective]
        if isinstance(given, ObjectiveConfig) and not isinstance(given, expected):
            raise ValueError(
                f"InSubConfig.objective_config is a {type(given).__name__}; objective={self.objective!r} takes a "
                f"{expected.__name__} (or a dict of its fields)."
            )
        if given is not None and not isinstance(given, (dict, ObjectiveConfig)):
            raise ValueError(
                f"InSubConfig.objective_config must be a dict of {expected.__name__} fields or a {expected.__name__}, "
                f"got {given!r}."
            )
        self.objective_config = (given if isinstance(given, ObjectiveConfig) else self.objective_options).to_dict()
        given = self.uncertainty  # a dict, an UncertaintyConfig or None (the defaults); anything else is refused
        self.install_uncertainty(self.checked_uncertainty(
            replace=with_fitted_record(dict(given)) if isinstance(given, dict) else given))
        for key, check in FIELD_CHECKS.items():
            check(getattr(self, key))
        for i, size in enumerate(self.head_hidden_sizes):
            check_range(f"InSubConfig.head_hidden_sizes[{i}]", size, low=1, integer=True)


FIELD_CHECKS = {
    "head_norm": lambda v: check_choice("InSubConfig.head_norm", v, HEAD_NORMS),
    "pooling": lambda v: check_choice("InSubConfig.pooling", v, POOLINGS),
    "num_heads": lambda v: check_range("InSubConfig.num_heads", v, low=1, integer=True),
    "head_output_size": lambda v: check_range("InSubConfig.head_output_size", v, low=1, integer=True),
    "diversity_alpha": lambda v: check_range("InSubConfig.diversity_alpha", v, low=0.0, high=MAX_DIVERSITY_ALPHA),
    "diversity_weight": lambda v: check_range("InSubConfig.diversity_weight", v, low=0.0, high=MAX_DIVERSITY_WEIGHT),
    "diversity_eps": lambda v: check_range("InSubConfig.diversity_eps", v, low=0.0, low_inclusive=False),
    "diversity_reduction": lambda v: check_choice("InSubConfig.diversity_reduction", v, DIVERSITY_REDUCTIONS),
    "batch_ensemble_size": lambda v: check_range("InSubConfig.batch_ensemble_size", v, low=1, integer=True),
    "frozen_base": check_frozen_base,
}


_OWN_KEYS = set(InSubConfig.__dataclass_fields__) | set(PretrainedConfig.__dataclass_fields__) | _BOOKKEEPING_KEYS | {
    "id2label", "label2id", "problem_type"}


def encoder_model_class(model_type: str, config_class: type | None = None) -> type:
    """The model class of an encoder `model_type`: the package's own by name (a config loaded through remote code may
    be another copy of the class than the registered one), else `AutoModel`'s for `config_class` (default: the
    registered config class of `model_type`). Raises KeyError when there is none."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    own = {own_config.model_type: own_model for own_config, own_model in OWN_ENCODERS}
    return own.get(model_type) or AutoModel._model_mapping[config_class or CONFIG_MAPPING[model_type]]

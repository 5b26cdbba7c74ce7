"""Configuration of an InSub model: a shared encoder with M independent projection heads."""

from __future__ import annotations

import difflib
import warnings
from typing import Any

from transformers import AutoConfig, PretrainedConfig
from transformers.configuration_utils import SubConfigSpec
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from ..encoders.base import POOLINGS
# named_encoder lived here before presets moved to encoders/: it stays importable from here for existing code
from ..encoders.presets import DEFAULT_ENCODER, named_encoder  # noqa: F401
from ..encoders.registry import OWN_ENCODERS  # registers the package's encoder configs, so nested configs resolve
from ..objectives import OBJECTIVE_CONFIGS, ObjectiveConfig
from ..recipes import DNA, DNA_ENCODER, IMAGE, TEXT
from ..compat import (FORMER_CONFIG_KEYS, former_key, former_keys_into_block, from_former_keys, warn_former,
                      with_fitted_record)
from ..uncertainty.settings import UncertaintyBlock, UncertaintySettings
from ..encoders.frozen_base import check_frozen_base
from .label_settings import check_label_settings
from ..validation import check_choice, check_range

HEAD_NORMS = ("batchnorm", "none")
# How the hinge's per-view sums over dimensions combine the two views: "mean" divides by the views (the authors' code:
# sum over batch, views and dims / 2B), "sum" adds them (the paper's l_div(k)).
DIVERSITY_REDUCTIONS = ("mean", "sum")
# Each objective's own settings (its config's fields) -> the objectives that have it: such a key given flat is
# refused, naming `objective_config`
OBJECTIVE_FIELDS: dict[str, tuple[str, ...]] = {
    field: tuple(name for name, options in OBJECTIVE_CONFIGS.items() if field in options.__dataclass_fields__)
    for every in OBJECTIVE_CONFIGS.values() for field in every.__dataclass_fields__
}


def encoder_field(encoder_config, key: str):
    """A field of an encoder config given as a config object or a dict (None where it has none)."""
    return encoder_config.get(key) if isinstance(encoder_config, dict) else getattr(encoder_config, key, None)


# The largest hinge settings a config takes (see `_check_values`)
MAX_DIVERSITY_ALPHA, MAX_DIVERSITY_WEIGHT = 10.0, 1e4
# The objective an InSubConfig trains with when none is named, by what its encoder reads
DEFAULT_OBJECTIVES = {"pixel_values": "simclr", "input_ids": "scd", "dna_one_hot": "genomenet"}


def encoder_input(config) -> str:
    """The input an `InSubConfig`'s encoder reads (`MODALITY_INPUTS` values): timm models read images; a model type
    nobody registered is left to `build_encoder`'s own error."""
    from ..encoders.build import encoder_model_class

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


# Keywords transformers passes to or keeps in any config besides its fields (bookkeeping, model options)
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
    r"""Architecture of an InSub model (Vahidi et al., AAAI 2024).

    The encoder is either a nested transformers config (`encoder_config`: ViT, ResNet, BERT-style, the genomic
    encoder, ... anything `AutoModel.from_config` builds) or a timm model name (`timm_model_name`, with
    `timm_kwargs` such as `img_size`, `in_chans`). Exactly one of the two may be set; with neither, a ViT-tiny for
    32x32 images is used.

    Args:
        encoder_config: nested encoder config (a `PretrainedConfig` or its dict with `model_type`); a short name of
            `NAMED_ENCODERS` becomes one through `named_encoder` (e.g. `named_encoder("resnet18_cifar")`).
        timm_model_name: a timm model name, built with `num_classes=0` (random init; weights load separately).
        timm_kwargs: extra keyword arguments for `timm.create_model`.
        pooling: how a token sequence becomes one vector for text encoders: `"cls"` or `"mean"` (masked).
        num_heads: M, the number of independent projection heads (1 = the single-head baseline).
        head_hidden_sizes: hidden widths of each head MLP; `[]` makes each head one Linear layer.
        (M, alpha, lambda and the heads default to the image recipe, `recipes.IMAGE`, the one place that states them.)
        head_output_size: q, the embedding size of each head.
        head_norm: `"batchnorm"` (per-head BatchNorm after each hidden Linear) or `"none"`.
        diversity_alpha: alpha, the minimum per-dimension spread the hinge asks for.
        diversity_weight: lambda, the weight of the diversity loss (0 disables it): `loss = ssl + lambda * div`.
        diversity_eps: eps added to the variance inside the square root.
        diversity_reduction: how `div` combines the two views' hinges (each summed over dimensions, averaged over
            the batch): `"mean"` averages them, i.e. sum over batch, views and dims / 2B (the authors' code);
            `"sum"` adds them (the paper's `l_div(k)`; twice as strong at the same lambda).
        objective: the self-supervised objective on the mean head embedding, a key of
            `insub_hf.objectives.OBJECTIVES` (e.g. `"simclr"`, `"dino"`, `"byol"` for images, `"scd"` for sentences,
            `"genomenet"` for DNA). Default (None): the encoder's modality's first objective (`DEFAULT_OBJECTIVES`:
            SimCLR for an image encoder, SCD for a text one, Self-GenomeNet for DNA); an objective of another
            modality than the encoder's is refused.
        objective_config: that objective's own settings: a dict of some of the fields of its `config_class` (the
            rest default; e.g. `SimCLRConfig`, `DINOConfig`), or that config itself; saved in full as a dict. Typed
            access: `objective_options`. E.g. the paper's written formula (cosine of the mean):
            `objective_config={"normalize_mean": True}`.
        normalize_heads: L2-normalise each head output before averaging (reference code).
        batch_ensemble_size: > 1 turns the encoder's linear layers into BatchEnsemble layers with this many
            members (the BatchEnsemble baseline of the paper; 1 = off).
        freeze_encoder: pretrain the heads only: the encoder's weights keep the values it was built or loaded with
            (`init_encoder_from`), so its representation stays a pretrained base model's exactly; dropout still makes
            the text views. Fine-tuning ignores it (`InSubForImageClassification.freeze_encoder()` decides there).
        frozen_base: `{"repo_id", "sha256"}`: the encoder holds the weights of that Hub repo unchanged (their
            fingerprint), so saves leave them out and `from_pretrained` loads them from there (`encoders/frozen_base.py`).
        uncertainty: how `InSubModelOutput.uncertainty` is read, a dict of `uncertainty.settings.UncertaintyConfig`
            fields (the reading, the spread's direction, the k-NN bank's k and size, ...), fixed after training and
            saved in full; typed access `uncertainty_options`, changes through `set_uncertainty`. A config.json
            written before this block (its keys flat, `compat.FORMER_CONFIG_KEYS`) loads with them moved in, warning once.
    """

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


# The fields checked alone, at construction and when assigned after it (`InSubConfig.__setattr__`). alpha is a
# spread of unit vectors (at most 1 per dimension); lambda beyond MAX_DIVERSITY_WEIGHT overflows the loss in float32
# long before it means anything (the authors' largest is 1.5)
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


# What the top-level config keeps itself, never the encoder's: its own fields, every config's and the bookkeeping
_OWN_KEYS = set(InSubConfig.__dataclass_fields__) | set(PretrainedConfig.__dataclass_fields__) | _BOOKKEEPING_KEYS | {
    "id2label", "label2id", "problem_type"}

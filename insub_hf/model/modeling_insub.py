"""InSub models: a shared encoder and M independent heads (InSubModel); pretraining adds the objective and the diversity
hinge on top (InSubForPreTraining). The classifiers are in `modeling_classification`."""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.utils import logging

from .configuration_insub import InSubConfig
from .modeling_outputs import InSubForPreTrainingOutput, InSubModelOutput, per_view
from ..encoders.base import EncoderOutput, set_dropout
from ..encoders.build import build_encoder
from .heads import BatchedHeads
from ..losses.diversity import DiversityLoss, head_spread
from ..losses.precision import upcast_half
from ..encoders.frozen_base import leaving_out_base, with_frozen_base
from .model_files import package_module
from ..objectives import OBJECTIVES
from ..losses.step_checks import check_training_step
from ..uncertainty.reading import UncertaintyReading

logger = logging.get_logger(__name__)

# What transformers' pipelines report a model reads (`input_modalities`), by the encoder's input
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
        `card` (an `insub_hf.hub.model_card.HubCard`: metrics, training data, tokenizer, extra files).

        `upload`: `token`, `private`, `commit_message`, `commit_description`, `revision`, `create_pr`,
        `max_shard_size`, as `insub_hf.hub.push_model_to_hub` takes them. Raises before building or sending anything
        when HF_HUB_OFFLINE=1 is set or no token is available.
        """
        return package_module("hub").push_model_to_hub(self, repo_id, card, **upload)


class InSubModel(InSubPreTrainedModel, UncertaintyReading):
    """Encoder f and M independent heads g_1..g_M; no training objective.

    Give the inputs of the encoder's modality: `pixel_values (B, C, H, W)`, or `input_ids / attention_mask
    (B, T)`, or `dna_one_hot (B, L, 4)`.
    """

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


class InSubForPreTraining(InSubPreTrainedModel):
    """InSub self-supervised pretraining: the objective `config.objective` on two views of each sample, plus the
    diversity hinge on the student's heads.

    Views: the encoder's inputs (`pixel_values`, `input_ids` / `attention_mask` / `token_type_ids`, `dna_one_hot`)
    and the same names with `_2` for the second view, which may be omitted where the encoder or the objective makes
    it (text: the same tokens under another dropout mask; Self-GenomeNet: the reverse complement). Both views go
    through the encoder as one batch of 2B unless the objective says otherwise. The objective's `extra_inputs` (DINO:
    `local_pixel_values`) are passed on to it.

    Submodules: `insub`, the student `InSubModel` that probes and the evaluation harness read; `objective`, an
    `Objective` with its own state (DINO's teacher and centre, Self-GenomeNet's projections), moved once per
    optimiser step by `InSubTrainer` through `step_begin` / `step_end`.
    """

    # whether forward refuses a NaN/inf loss or unnormalised inputs itself (one host sync); InSubTrainer turns it off
    # and checks the batches itself, deferring the sync to logging steps on an accelerator
    check_steps_in_forward = True

    def __init__(self, config: InSubConfig):
        super().__init__(config)
        self.insub = InSubModel(config)
        self.main_input_name = self.insub.main_input_name
        self.diversity = DiversityLoss(config.diversity_alpha, config.diversity_eps, config.diversity_reduction)
        self.objective = OBJECTIVES[config.objective](config, self.insub)
        self.post_init()
        self.sync_objective_with_student()
        if config.freeze_encoder:  # no gradient reaches the encoder: the optimiser skips it, backward stops at the heads
            self.insub.encoder.requires_grad_(False)

    def fit_uncertainty(self, *args, **kwargs):
        """The student's `InSubModel.fit_uncertainty` (what `save_pretrained` keeps and `insub` serves)."""
        return self.insub.fit_uncertainty(*args, **kwargs)

    def own_modules(self) -> tuple[type[nn.Module], ...]:
        """The heads and the objective's own state (`Objective.initialized_modules`)."""
        return (BatchedHeads, *self.objective.initialized_modules)

    def sync_objective_with_student(self) -> None:
        """Lets the objective re-copy what it derives from the student (after initialisation or loaded encoder
        weights)."""
        self.objective.sync_with_student(self.insub)

    def step_begin(self, step: int, total_steps: int) -> None:
        """Before optimiser step `step` (0-based) of `total_steps`: the objective's schedules."""
        self.objective.step_begin(step, total_steps)

    def step_end(self, step: int, total_steps: int) -> None:
        """After optimiser step `step`: the objective's per-step updates (e.g. an EMA teacher)."""
        self.objective.step_end(self.insub, step, total_steps)

    def _embeddings_only(self, views: dict[str, torch.Tensor], states, return_dict: bool | None):
        """Both views' representations and head embeddings, without a loss: for a batch smaller than the
        objective's `min_batch` in eval mode (e.g. one sentence through the text model)."""
        representation = self.insub.get_representation(**views)  # (2B, d)
        z = self.insub.embed_heads(representation)
        result = InSubForPreTrainingOutput(head_embeddings=torch.stack(z.chunk(2, dim=0)),
                                           representation=torch.stack(representation.chunk(2, dim=0)),
                                           hidden_states=per_view(getattr(states, "hidden_states", None)),
                                           attentions=per_view(getattr(states, "attentions", None)))
        return result if return_dict is not False else result.to_tuple()

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        pixel_values_2: torch.Tensor | None = None,
        return_loss: bool = True,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
        **inputs: torch.Tensor | None,
    ) -> InSubForPreTrainingOutput | tuple:
        """`output_hidden_states` / `output_attentions`: the student encoder's, per view (`(2, B, ...)` each layer,
        view 1 first, as `head_embeddings`), from one more pass of it: the same as the loss's pass in eval mode, not
        under dropout in training."""
        extra = {k: inputs.pop(k) for k in self.objective.extra_inputs if k in inputs}
        pixel_values, inputs = self.insub.positional_main_input(pixel_values, inputs)
        given = dict(pixel_values=pixel_values, pixel_values_2=pixel_values_2, **inputs)
        views = self.objective.join_views(self.insub, given)
        asked = self.insub.requested_outputs(output_hidden_states, output_attentions)
        states = self.insub.encode(*asked, **views) if any(asked) else None
        if views[self.insub.encoder.main_input_name].shape[0] < 2 * self.objective.min_batch and not self.training:
            return self._embeddings_only(views, states, return_dict)  # per-sample outputs need no batch statistics
        out = self.objective(self.insub, views, **extra)
        z1, z2 = out.head_embeddings.chunk(2, dim=0)  # (B, M, q) each
        diversity_loss = self.diversity(z1, z2).mean()
        loss = out.ssl_loss + self.config.diversity_weight * diversity_loss
        if self.check_steps_in_forward and not torch.compiler.is_compiling():  # else: InSubTrainer checks the batch
            check_training_step(loss, {**given, **extra})
        if views[self.insub.encoder.main_input_name].shape[0] == 2:
            logger.warning_once(
                "InSubForPreTraining got a batch of one sample: a contrastive loss has no negatives then (SimCLR's "
                "is exactly 0); train with batches of several samples."
            )
        with torch.no_grad():
            sigma = head_spread(out.head_embeddings, self.config.diversity_eps)
            mean_sigma = sigma.mean()
            hinge_active = (sigma < self.config.diversity_alpha).float().mean() if self.config.num_heads > 1 else (
                sigma.new_zeros(())
            )
        result = InSubForPreTrainingOutput(
            loss=loss,
            ssl_loss=out.ssl_loss.detach(),
            diversity_loss=diversity_loss.detach(),
            mean_sigma=mean_sigma,
            head_embeddings=torch.stack([z1, z2]),
            representation=torch.stack(out.representation.chunk(2, dim=0)),
            hinge_active=hinge_active,
            hidden_states=per_view(getattr(states, "hidden_states", None)),
            attentions=per_view(getattr(states, "attentions", None)),
        )
        return result if return_dict is not False else result.to_tuple()

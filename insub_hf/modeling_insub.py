"""InSub models: a shared encoder, M independent heads, and the pretraining loss on top."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput
from transformers.utils import ModelOutput

from .configuration_insub import InSubConfig
from .dino import cosine_momentum, ema_update_, teacher_temperature
from .encoders import build_encoder, dropout_rate
from .heads import BatchedHeads, WeightNormedLinear
from .data.dna_encoding import reverse_complement
from .losses import (
    DINOLoss,
    DistanceProjections,
    DiversityLoss,
    head_spread,
    nt_xent_loss,
    scd_loss,
    self_genomenet_loss,
)


@dataclass
class InSubModelOutput(ModelOutput):
    """Outputs of `InSubModel` for a batch of B inputs.

    Args:
        representation: `(B, d)` encoder output (what probes and k-NN read; the heads are not involved).
        head_embeddings: `(B, M, q)` the M head embeddings (L2-normalised when `config.normalize_heads`).
        mean_embedding: `(B, q)` their mean over heads.
        sigma: `(B, q)` per-dimension spread across heads, `sqrt(var + eps)`; zeros when M = 1.
    """

    representation: torch.Tensor | None = None
    head_embeddings: torch.Tensor | None = None
    mean_embedding: torch.Tensor | None = None
    sigma: torch.Tensor | None = None


@dataclass
class InSubForPreTrainingOutput(ModelOutput):
    """Outputs of `InSubForPreTraining` for B samples, two views each.

    Args:
        loss: scalar, `ssl_loss + diversity_weight * diversity_loss`.
        ssl_loss: scalar, the self-supervised loss on the mean embeddings.
        diversity_loss: scalar, the hinge summed over dims and both views, averaged over the batch.
        mean_sigma: scalar, sigma averaged over samples, dims and views (a diagnostic, no gradient).
        head_embeddings: `(2, B, M, q)` head embeddings of view 1 and view 2.
        representation: `(2, B, d)` encoder outputs of both views.
    """

    loss: torch.Tensor | None = None
    ssl_loss: torch.Tensor | None = None
    diversity_loss: torch.Tensor | None = None
    mean_sigma: torch.Tensor | None = None
    head_embeddings: torch.Tensor | None = None
    representation: torch.Tensor | None = None


def _package_module(name: str):
    """An insub-hf module the model code itself does not need (the Hub tools).

    Imported by name, not by a relative import statement, so that the remote-code copy of this file stays free of
    them: a class loaded from a repo with `trust_remote_code=True` runs without insub-hf, except for these tools.
    """
    try:
        return importlib.import_module(f"insub_hf.{name}")
    except ImportError as error:
        raise ImportError(
            f"insub_hf.{name} is part of the insub-hf package, which this environment lacks (the model was loaded "
            "from a repo's remote code); install insub-hf to push or to save remote code."
        ) from error


class InSubPreTrainedModel(PreTrainedModel):
    config_class = InSubConfig
    base_model_prefix = "insub"
    main_input_name = "pixel_values"
    supports_gradient_checkpointing = False

    def _init_weights(self, module: nn.Module) -> None:
        # Encoders that are PreTrainedModels initialise themselves; timm models are initialised when built.
        if isinstance(module, (BatchedHeads, WeightNormedLinear, DistanceProjections)):
            module.reset_parameters()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        try:
            return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        except OSError as error:
            clearer = _package_module("hub").offline_load_error(str(pretrained_model_name_or_path), error)
            if clearer is None:
                raise
            raise clearer from error

    def save_pretrained(self, save_directory, *args, remote_code: bool | None = None, **kwargs) -> None:
        """`PreTrainedModel.save_pretrained`, plus the model code as flat files with an `auto_map` when
        `remote_code` (default: when the class was registered with `register_for_auto_class`), so that the folder
        loads with `trust_remote_code=True` without insub-hf (see `remote_code.py`). `push_to_hub=True` goes
        through `push_to_hub` (weights, remote code and the generated model card)."""
        if kwargs.pop("push_to_hub", False):
            repo_id = kwargs.pop("repo_id", None) or os.path.basename(os.path.normpath(save_directory))
            self.save_pretrained(save_directory, *args, remote_code=remote_code is not False, **kwargs)
            return self.push_to_hub(repo_id, token=kwargs.get("token"))
        cls = type(self)
        remote_code = cls._auto_class is not None if remote_code is None else remote_code
        # transformers' own copy (`is_remote_code()` reads the class) handles flat packages only; the flat files are
        # written below instead
        registered, cls._auto_class = cls._auto_class, None
        try:
            super().save_pretrained(save_directory, *args, **kwargs)
        finally:
            cls._auto_class = registered
        if remote_code:
            _package_module("remote_code").write_remote_code(save_directory)

    def push_to_hub(
        self,
        repo_id: str,
        *,
        commit_message: str | None = None,
        commit_description: str | None = None,
        private: bool | None = None,
        token: bool | str | None = None,
        revision: str | None = None,
        create_pr: bool = False,
        eval_results: list | None = None,
        training_data: str | None = None,
        datasets: list[str] | None = None,
        tokenizer=None,
        extra_files: dict | None = None,
        tags: list[str] | None = None,
        max_shard_size: int | str = "50GB",
    ):
        """Uploads the model to the Hub repo `repo_id` (created if needed) as one commit: safetensors weights,
        config, remote code (loads with `trust_remote_code=True` without insub-hf) and a generated model card.

        Args:
            eval_results: `huggingface_hub.EvalResult`s for the card's model-index (`insub_hf.hub.harness_eval_results`,
                `senteval_eval_results`).
            training_data: what the model was pretrained on (card text); datasets: their Hub ids (card metadata).
            tokenizer: saved beside the model (text models).
            extra_files: `{path in repo: local file}`, e.g. evaluation results.
            tags: extra card tags; max_shard_size: as in `save_pretrained`.
        Raises before building or sending anything when HF_HUB_OFFLINE=1 is set or no token is available.
        """
        return _package_module("hub").push_model_to_hub(
            self, repo_id, token=token, private=private, commit_message=commit_message,
            commit_description=commit_description, revision=revision, create_pr=create_pr,
            eval_results=eval_results, training_data=training_data, datasets=datasets, tokenizer=tokenizer,
            extra_files=extra_files, tags=tags, max_shard_size=max_shard_size,
        )


class InSubModel(InSubPreTrainedModel):
    """Encoder f and M independent heads g_1..g_M.

    Give the inputs of the encoder's modality: `pixel_values (B, C, H, W)`, or `input_ids / attention_mask
    (B, T)`, or `dna_one_hot (B, L, 4)`.
    """

    def __init__(self, config: InSubConfig):
        super().__init__(config)
        self.encoder = build_encoder(config)
        self.main_input_name = self.encoder.main_input_name
        self.heads = BatchedHeads(
            self.encoder.output_dim,
            list(config.head_hidden_sizes),
            config.head_output_size,
            config.num_heads,
            config.head_norm,
        )
        # DINO's weight-normalised last layer, shared by the heads and applied to their mean (see WeightNormedLinear)
        self.prototypes = (
            WeightNormedLinear(config.head_output_size, config.dino_out_dim) if config.objective == "dino" else None
        )
        self.post_init()

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

    def get_representation(self, **inputs: torch.Tensor | None) -> torch.Tensor:
        """Encoder output `(B, d)` without the heads (for probes and k-NN)."""
        return self.encoder(**self.encoder_inputs(**inputs))

    def embed_heads(self, representation: torch.Tensor) -> torch.Tensor:
        """Head embeddings `(B, M, q)` of representations `(B, d)`, normalised as the config says."""
        z = self.heads(representation)
        return F.normalize(z, dim=-1) if self.config.normalize_heads else z

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        dna_one_hot: torch.Tensor | None = None,
        return_dict: bool | None = None,
    ) -> InSubModelOutput | tuple:
        representation = self.get_representation(
            pixel_values=pixel_values,
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            dna_one_hot=dna_one_hot,
        )
        z = self.embed_heads(representation)  # (B, M, q)
        out = InSubModelOutput(
            representation=representation,
            head_embeddings=z,
            mean_embedding=z.mean(dim=1),
            sigma=head_spread(z, self.config.diversity_eps),
        )
        return out if return_dict is not False else out.to_tuple()


class InSubForPreTraining(InSubPreTrainedModel):
    """InSub self-supervised pretraining on two views of each sample.

    Views: `pixel_values` and `pixel_values_2` (images), `dna_one_hot` and `dna_one_hot_2` (DNA), or `input_ids`
    with optional `input_ids_2` (text; without it the second view is the same tokens under another dropout mask).
    Both views go through the encoder as one batch of 2B (with `objective="scd"`: two passes, one per dropout rate).

    With `config.objective == "dino"` the two image views are DINO's global crops, `local_pixel_values`
    `(B, N, C, h, w)` adds N local crops for the student, and the model holds the teacher (`self.teacher`, an EMA of
    `self.insub` without gradients) and the teacher centre (`self.dino_loss.center`); `InSubTrainer` moves both
    after every optimiser step (`DINOScheduleCallback`). Probes and the evaluation harness read the student.
    """

    def __init__(self, config: InSubConfig):
        super().__init__(config)
        self.insub = InSubModel(config)
        self.main_input_name = self.insub.main_input_name
        self.diversity = DiversityLoss(config.diversity_alpha, config.diversity_eps)
        self.teacher = InSubModel(config) if config.objective == "dino" else None
        if self.teacher is not None:
            self.dino_loss = DINOLoss(config.dino_out_dim, config.dino_center_momentum, config.dino_student_temperature)
            self.teacher_temperature = config.dino_warmup_teacher_temperature
        if config.objective == "genomenet":
            self.genomenet_projections = DistanceProjections(config.genomenet_distances, config.head_output_size)
        self.post_init()
        if self.teacher is not None:
            self.teacher.load_state_dict(self.insub.state_dict())
            self.teacher.requires_grad_(False)

    def dino_step_begin(self, step: int, total_steps: int) -> None:
        """Sets the teacher temperature of optimiser step `step` (0-based) of `total_steps`."""
        config = self.config
        warmup = round(config.dino_warmup_teacher_temperature_fraction * total_steps)
        self.teacher_temperature = teacher_temperature(
            step, warmup, config.dino_warmup_teacher_temperature, config.dino_teacher_temperature
        )

    def dino_step_end(self, step: int, total_steps: int) -> None:
        """After optimiser step `step`: moves the centre, then the teacher towards the student."""
        config = self.config
        self.dino_loss.update_center()
        momentum = cosine_momentum(step, total_steps, config.dino_teacher_momentum, config.dino_final_teacher_momentum)
        ema_update_(self.teacher, self.insub, momentum)

    def _two_views(self, first: dict, second: dict) -> dict[str, torch.Tensor]:
        """Concatenates the two views' encoder inputs along the batch: each `(B, ...)` -> `(2B, ...)`."""
        main = self.insub.encoder.main_input_name
        first = self.insub.encoder_inputs(**first)
        if second.get(main) is None:
            if main != "input_ids":
                raise ValueError(f"`{main}_2`, the second augmented view, is required for this encoder.")
            second = first  # text: the second view differs only by its dropout mask
        else:
            second = self.insub.encoder_inputs(**second)
        if set(first) != set(second) or first[main].shape != second[main].shape:
            raise ValueError(
                f"The two views must have the same inputs and shapes, got {tuple(first[main].shape)} and "
                f"{tuple(second[main].shape)}."
            )
        members = self.config.batch_ensemble_size
        if members > 1 and first[main].shape[0] % members:
            raise ValueError(
                f"With InSubConfig.batch_ensemble_size={members}, the batch size ({first[main].shape[0]}) must be a "
                "multiple of it so that both views of a sample go through the same member."
            )
        return {k: torch.cat([first[k], second[k]], dim=0) for k in first}

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        pixel_values_2: torch.Tensor | None = None,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        input_ids_2: torch.Tensor | None = None,
        attention_mask_2: torch.Tensor | None = None,
        token_type_ids_2: torch.Tensor | None = None,
        dna_one_hot: torch.Tensor | None = None,
        dna_one_hot_2: torch.Tensor | None = None,
        local_pixel_values: torch.Tensor | None = None,
        return_loss: bool = True,
        return_dict: bool | None = None,
    ) -> InSubForPreTrainingOutput | tuple:
        if self.config.objective == "genomenet" and dna_one_hot is not None:
            if dna_one_hot_2 is not None:
                raise ValueError(
                    "objective='genomenet' pairs each sequence with its own reverse complement, built here; pass only "
                    "dna_one_hot (e.g. DNAViews(..., two_views=False))."
                )
            dna_one_hot_2 = reverse_complement(dna_one_hot)
        inputs = self._two_views(
            dict(pixel_values=pixel_values, input_ids=input_ids, attention_mask=attention_mask,
                 token_type_ids=token_type_ids, dna_one_hot=dna_one_hot),
            dict(pixel_values=pixel_values_2, input_ids=input_ids_2, attention_mask=attention_mask_2,
                 token_type_ids=token_type_ids_2, dna_one_hot=dna_one_hot_2),
        )
        if self.teacher is not None:
            ssl_loss, z, representation = self._dino(inputs, local_pixel_values)
        elif self.config.objective == "scd":
            ssl_loss, z, representation = self._scd(inputs)
        elif self.config.objective == "genomenet":
            ssl_loss, z, representation = self._genomenet(inputs)
        else:
            representation = self.insub.encoder(**inputs)  # (2B, d)
            z = self.insub.embed_heads(representation)  # (2B, M, q)
            z1, z2 = z.chunk(2, dim=0)
            ssl_loss = nt_xent_loss(
                z1.mean(dim=1), z2.mean(dim=1), self.config.temperature, self.config.normalize_mean
            ).mean()
        z1, z2 = z.chunk(2, dim=0)  # (B, M, q) each
        diversity_loss = self.diversity(z1, z2).mean()
        loss = ssl_loss + self.config.diversity_weight * diversity_loss
        with torch.no_grad():
            mean_sigma = head_spread(z, self.config.diversity_eps).mean()
        out = InSubForPreTrainingOutput(
            loss=loss,
            ssl_loss=ssl_loss.detach(),
            diversity_loss=diversity_loss.detach(),
            mean_sigma=mean_sigma,
            head_embeddings=torch.stack([z1, z2]),
            representation=torch.stack(representation.chunk(2, dim=0)),
        )
        return out if return_dict is not False else out.to_tuple()

    def _genomenet(self, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Self-GenomeNet. inputs: `dna_one_hot` `(2B, L, 4)`, the sequences then their reverse complements.

        The M heads embed every context position; their mean feeds the contrastive prediction. The diversity hinge
        reads the heads on the pooled representation. Returns the loss, those head outputs `(2B, M, q)` and the
        pooled representations `(2B, d)`.
        """
        if "dna_one_hot" not in inputs or not hasattr(self.insub.encoder, "model"):
            raise ValueError("InSubConfig.objective='genomenet' needs the genomic encoder (dna_one_hot).")
        hidden = self.insub.encoder.model(dna_one_hot=inputs["dna_one_hot"]).last_hidden_state  # (2B, T, H)
        n, t, h = hidden.shape
        per_position = self.insub.embed_heads(hidden.reshape(n * t, h)).view(n, t, self.config.num_heads, -1)
        context, context_rc = per_position.mean(dim=2).chunk(2)  # (B, T, q) each
        ssl_loss = self_genomenet_loss(context, context_rc, self.genomenet_projections.weight).mean()
        representation = hidden.mean(dim=1)  # (2B, H), what the encoder adapter returns
        return ssl_loss, self.insub.embed_heads(representation), representation

    def _scd(self, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """SCD: the two views are separate encoder passes under dropout rates `scd_dropout` and `scd_dropout_2`.

        Returns the loss, the head outputs `(2B, M, q)` and the sentence representations `(2B, d)`.
        """
        config, encoder = self.config, self.insub.encoder
        first, second = ({k: v.chunk(2)[i] for k, v in inputs.items()} for i in range(2))
        with dropout_rate(encoder, config.scd_dropout):
            h1 = encoder(**first)
        with dropout_rate(encoder, config.scd_dropout_2):
            h2 = encoder(**second)
        representation = torch.cat([h1, h2])  # (2B, d)
        z = self.insub.embed_heads(representation)  # (2B, M, q)
        p1, p2 = z.chunk(2)
        loss = scd_loss(h1, h2, p1, p2, config.scd_temperature, config.scd_alpha, config.scd_beta, config.scd_lambda)
        return loss, z, representation

    def _dino(
        self, inputs: dict[str, torch.Tensor], local_pixel_values: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """DINO on the mean head output. inputs: the two global crops `(2B, C, H, W)`; local crops `(B, N, C, h, w)`.

        Each crop's DINO output is the shared weight-normalised layer applied to the mean of its M head embeddings
        `(.., K)`. Returns the loss, the student head embeddings of the global crops `(2B, M, q)` (the diversity
        hinge reads them) and their representations `(2B, d)`.
        """
        if "pixel_values" not in inputs:
            raise ValueError(
                f"InSubConfig.objective='dino' needs an image encoder (pixel_values); this encoder reads "
                f"{sorted(inputs)}."
            )
        globals_ = inputs["pixel_values"]
        representation = self.insub.encoder(**inputs)  # (2B, d)
        z = self.insub.embed_heads(representation)  # (2B, M, q)
        student = list(self.insub.prototypes(z.mean(dim=1)).chunk(2))  # 2 x (B, K)
        if local_pixel_values is not None:
            b = globals_.shape[0] // 2
            if local_pixel_values.dim() != 5 or local_pixel_values.shape[0] != b:
                raise ValueError(
                    f"local_pixel_values must be (batch={b}, crops, channels, height, width), got "
                    f"{tuple(local_pixel_values.shape)}."
                )
            if max(local_pixel_values.shape[-2:]) > min(globals_.shape[-2:]):
                raise ValueError(
                    f"local crops ({tuple(local_pixel_values.shape[-2:])}) are larger than the global crops "
                    f"({tuple(globals_.shape[-2:])}); local crops must not exceed the global crop size."
                )
            n = local_pixel_values.shape[1]
            local = local_pixel_values.transpose(0, 1).reshape(n * b, *local_pixel_values.shape[2:])  # view-major
            z_local = self.insub.embed_heads(self.insub.encoder(pixel_values=local))  # (N*B, M, q)
            student += list(self.insub.prototypes(z_local.mean(dim=1)).chunk(n))
        with torch.no_grad():
            teacher = self.teacher.prototypes(self.teacher.embed_heads(self.teacher.encoder(**inputs)).mean(dim=1))
        ssl_loss = self.dino_loss(torch.stack(student), torch.stack(teacher.chunk(2)), self.teacher_temperature)
        return ssl_loss.mean(), z, representation


class InSubForSequenceClassification(InSubPreTrainedModel):
    """The pretrained encoder with a linear classifier, for fine-tuning (the heads are not used).

    `from_pretrained(pretraining_checkpoint, num_labels=C)` loads the encoder of an `InSubForPreTraining` or
    `InSubModel` checkpoint and starts the classifier fresh. Inputs as `InSubModel`, plus optional `labels (B,)`.
    Outputs: `loss` (cross-entropy, when labels are given) and `logits (B, C)`.
    """

    def __init__(self, config: InSubConfig):
        super().__init__(config)
        self.insub = InSubModel(config)
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
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        dna_one_hot: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        return_dict: bool | None = None,
    ) -> SequenceClassifierOutput | tuple:
        representation = self.insub.get_representation(
            pixel_values=pixel_values, input_ids=input_ids, attention_mask=attention_mask,
            token_type_ids=token_type_ids, dna_one_hot=dna_one_hot,
        )
        logits = self.classifier(representation)
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        out = SequenceClassifierOutput(loss=loss, logits=logits)
        return out if return_dict is not False else out.to_tuple()

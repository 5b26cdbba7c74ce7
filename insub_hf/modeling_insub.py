"""InSub models: a shared encoder, M independent heads, and the pretraining loss on top."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.utils import ModelOutput

from .configuration_insub import InSubConfig
from .encoders import build_encoder
from .heads import BatchedHeads
from .losses import DiversityLoss, head_spread, nt_xent_loss


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


class InSubPreTrainedModel(PreTrainedModel):
    config_class = InSubConfig
    base_model_prefix = "insub"
    main_input_name = "pixel_values"
    supports_gradient_checkpointing = False

    def _init_weights(self, module: nn.Module) -> None:
        # Encoders that are PreTrainedModels initialise themselves; timm models are initialised when built.
        if isinstance(module, BatchedHeads):
            module.reset_parameters()


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
    Both views go through the encoder as one batch of 2B.
    """

    def __init__(self, config: InSubConfig):
        super().__init__(config)
        self.insub = InSubModel(config)
        self.main_input_name = self.insub.main_input_name
        self.diversity = DiversityLoss(config.diversity_alpha, config.diversity_eps)
        self.post_init()

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
        return_loss: bool = True,
        return_dict: bool | None = None,
    ) -> InSubForPreTrainingOutput | tuple:
        inputs = self._two_views(
            dict(pixel_values=pixel_values, input_ids=input_ids, attention_mask=attention_mask,
                 token_type_ids=token_type_ids, dna_one_hot=dna_one_hot),
            dict(pixel_values=pixel_values_2, input_ids=input_ids_2, attention_mask=attention_mask_2,
                 token_type_ids=token_type_ids_2, dna_one_hot=dna_one_hot_2),
        )
        representation = self.insub.encoder(**inputs)  # (2B, d)
        z = self.insub.embed_heads(representation)  # (2B, M, q)
        z1, z2 = z.chunk(2, dim=0)  # (B, M, q) each
        ssl_loss = nt_xent_loss(
            z1.mean(dim=1), z2.mean(dim=1), self.config.temperature, self.config.normalize_mean
        ).mean()
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

"""What the InSub models return (`InSubModel`, `InSubForPreTraining`), as transformers' `ModelOutput`s."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.utils import ModelOutput


@dataclass
class InSubModelOutput(ModelOutput):
    """Outputs of `InSubModel` for a batch of B inputs.

    Args:
        representation: `(B, d)` encoder output (what probes and k-NN read; the heads are not involved).
        head_embeddings: `(B, M, q)` the M head embeddings (L2-normalised when `config.normalize_heads`).
        mean_embedding: `(B, q)` their mean over heads.
        sigma: `(B, q)` per-dimension spread across heads, `sqrt(var + eps)`; zeros when M = 1.
        uncertainty: `(B,)` the model's calibrated uncertainty in [0, 1] (`fit_uncertainty`: the share of held-out
            in-distribution inputs that look more typical; `> 0.95` flags about 5 % of them), or None: not fitted,
            fitted on other weights or settings, or a DNA batch of another length than the calibrated one; NaN in
            the rows of sentences with other token counts than the calibration's (`config.uncertainty
            ['length_range']`). Never another reading: the single readings have their own names (`head_spread`,
            `knn_distance`).
        pooler_output: `(B, d)` the representation again, under the name transformers' feature extraction reads
            (`pipeline("image-feature-extraction", pool=True)`).
        last_hidden_state: the encoder states the representation was pooled from, where it has them: `(B, T, d)`
            tokens or DNA windows, `(B, C, h, w)` a CNN's feature map; None for timm encoders.
        hidden_states: every encoder layer's states with `output_hidden_states=True` (transformers encoders).
        attentions: every encoder layer's attention weights `(B, heads, T, T)` with `output_attentions=True` (ViT,
            BERT-style encoders).
        head_spread: `(B,)` the spread averaged over dimensions, oriented so that higher means more likely out of
            distribution for this model (`config.uncertainty['direction']`, fixed on validation data; read as it is
            while that is None); zeros when M = 1.
        knn_distance: `(B,)` the cosine distance of the representation to its k-th nearest row of the model's bank
            (`config.uncertainty['k']`), where the model holds one (`fit_uncertainty`, `set_bank`); else None.
    """

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


@dataclass
class InSubForPreTrainingOutput(ModelOutput):
    """Outputs of `InSubForPreTraining` for B samples, two views each.

    Args:
        loss: scalar, `ssl_loss + diversity_weight * diversity_loss`.
        ssl_loss: scalar, the self-supervised loss on the mean embeddings.
        diversity_loss: scalar, the hinge summed over dims, combined over both views as `config.diversity_reduction`
            says, averaged over the batch.
        mean_sigma: scalar, sigma averaged over samples, dims and views (a diagnostic, no gradient).
        head_embeddings: `(2, B, M, q)` head embeddings of view 1 and view 2.
        representation: `(2, B, d)` encoder outputs of both views.
        hinge_active: scalar, the share of (sample, dim, view) spreads below alpha, where the hinge pushes (0 with
            one head; a diagnostic, no gradient).
        hidden_states, attentions: the student encoder's per view (`(2, B, ...)` each layer), when asked.
    """

    loss: torch.Tensor | None = None
    ssl_loss: torch.Tensor | None = None
    diversity_loss: torch.Tensor | None = None
    mean_sigma: torch.Tensor | None = None
    head_embeddings: torch.Tensor | None = None
    representation: torch.Tensor | None = None
    hinge_active: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


def per_view(layers: tuple[torch.Tensor | None, ...] | None) -> tuple[torch.Tensor | None, ...] | None:
    """Each layer's `(2B, ...)` over both views as `(2, B, ...)`: view first, then sample, as `head_embeddings` and
    `representation` are laid out (unselected layers stay None)."""
    if layers is None:
        return None
    return tuple(None if layer is None else torch.stack(layer.chunk(2, dim=0)) for layer in layers)

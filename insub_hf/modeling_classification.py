"""Classifiers on a pretrained InSub encoder. Finetune-InSub (`InSubForImageClassification`): M independent classifier
heads, for `AutoModelForImageClassification` and `pipeline("image-classification")`; the prediction averages the heads'
probabilities, and how much they disagree (the mutual information) is each sample's uncertainty, kept after
fine-tuning. `InSubForSequenceClassification`: one linear classifier, for `AutoModelForSequenceClassification`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_outputs import SequenceClassifierOutput
from transformers.utils import ModelOutput

from .configuration_insub import InSubConfig, check_label_settings
from .heads import BatchedHeads
from .modeling_insub import InSubModel, InSubPreTrainedModel


def check_labels(labels: torch.Tensor, batch_size: int, num_labels: int) -> None:
    """Class labels `(B,)`: integers in [0, num_labels) or -100 (ignored), not all ignored."""
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


@dataclass
class InSubImageClassifierOutput(ModelOutput):
    """Outputs of `InSubForImageClassification` for B images, C classes and M heads.

    Args:
        loss: scalar, the heads' cross-entropies averaged over heads (each head learns on its own; given `labels`).
        logits: `(B, C)` log of the heads' mean probabilities, so `logits.softmax(-1)` is the ensemble's prediction
            (what `pipeline("image-classification")` reports).
        head_logits: `(B, M, C)` each head's logits.
        mutual_information: `(B,)` entropy of the mean prediction minus the heads' mean entropy, in nats: 0 when
            the heads agree, higher = the heads disagree (epistemic uncertainty).
        entropy: `(B,)` entropy of the mean prediction in nats (total uncertainty).
        representation: `(B, d)` encoder output.
    """

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    head_logits: torch.Tensor | None = None
    mutual_information: torch.Tensor | None = None
    entropy: torch.Tensor | None = None
    representation: torch.Tensor | None = None


def ensemble_log_probabilities(head_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(B, M, C)` head logits -> (log of the mean probability `(B, C)`, its entropy `(B,)`, the mutual information
    `(B,)`), from log-softmax (no log of a rounded-to-zero probability)."""
    log_p = F.log_softmax(head_logits.float(), dim=-1)  # (B, M, C)
    log_mean = torch.logsumexp(log_p, dim=1) - math.log(head_logits.shape[1])  # (B, C)
    entropy = -(log_mean.exp() * log_mean).sum(-1)
    mean_head_entropy = -(log_p.exp() * log_p).sum(-1).mean(1)
    return log_mean, entropy, (entropy - mean_head_entropy).clamp_min(0)


class InSubForImageClassification(InSubPreTrainedModel):
    """An InSub image encoder with `config.num_heads` independent linear classifier heads (the paper's
    Finetune-InSub).

    `from_pretrained(insub_checkpoint, num_labels=C, id2label=..., label2id=...)` loads the encoder of an
    `InSubForPreTraining` or `InSubModel` checkpoint and starts the M classifier heads fresh, each from its own
    initialisation. Inputs: `pixel_values (B, C_in, H, W)` as the checkpoint's image processor makes them, optional
    `labels (B,)`. Call `freeze_encoder()` to train the heads only (the frozen encoder also keeps its BatchNorm
    statistics). The pretraining projection heads are kept (unused) so that the checkpoint's weights load by name.
    """

    def __init__(self, config: InSubConfig):
        # from_pretrained(..., num_labels=1) sets the field after the config was checked
        check_label_settings(config.num_labels, config.problem_type)
        super().__init__(config)
        self.insub = InSubModel(config)
        if self.insub.main_input_name != "pixel_values":
            raise ValueError(
                f"InSubForImageClassification needs an image encoder (pixel_values); this config's encoder reads "
                f"{self.insub.main_input_name}. Use InSubForSequenceClassification for text and DNA."
            )
        self.classifier = BatchedHeads(self.insub.encoder.output_dim, [], config.num_labels, config.num_heads, "none")
        self.post_init()

    def freeze_encoder(self) -> None:
        """Trains the classifier heads only: the encoder's weights get no gradient and it runs in eval mode."""
        self.insub.encoder.requires_grad_(False)

    def encoder_is_frozen(self) -> bool:
        return not any(p.requires_grad for p in self.insub.encoder.parameters())

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        return_dict: bool | None = None,
    ) -> InSubImageClassifierOutput | tuple:
        if self.encoder_is_frozen():
            self.insub.encoder.eval()
            with torch.no_grad():
                representation = self.insub.get_representation(pixel_values=pixel_values)
        else:
            representation = self.insub.get_representation(pixel_values=pixel_values)
        head_logits = self.classifier(representation)  # (B, M, C)
        logits, entropy, mutual_information = ensemble_log_probabilities(head_logits)
        loss = None
        if labels is not None:
            check_labels(labels, logits.shape[0], self.config.num_labels)
            batch, heads, classes = head_logits.shape
            per_head = labels[:, None].expand(batch, heads).reshape(-1)  # (B*M,)
            loss = F.cross_entropy(head_logits.reshape(-1, classes).float(), per_head)
        out = InSubImageClassifierOutput(
            loss=loss, logits=logits, head_logits=head_logits, mutual_information=mutual_information.detach(),
            entropy=entropy.detach(), representation=representation,
        )
        return out if return_dict is not False else out.to_tuple()


class InSubForSequenceClassification(InSubPreTrainedModel):
    """The pretrained encoder with a linear classifier, for fine-tuning (the heads are not used).

    `from_pretrained(pretraining_checkpoint, num_labels=C)` loads the encoder of an `InSubForPreTraining` or
    `InSubModel` checkpoint and starts the classifier fresh. Inputs as `InSubModel` (keywords), plus optional
    `labels (B,)`. Outputs: `loss` (cross-entropy, when labels are given) and `logits (B, C)`.
    """

    def __init__(self, config: InSubConfig):
        check_label_settings(config.num_labels, config.problem_type)
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
        labels: torch.Tensor | None = None,
        return_dict: bool | None = None,
        **inputs: torch.Tensor | None,
    ) -> SequenceClassifierOutput | tuple:
        logits = self.classifier(self.insub.get_representation(pixel_values=pixel_values, **inputs))
        loss = None
        if labels is not None:
            check_labels(labels, logits.shape[0], self.config.num_labels)
            loss = F.cross_entropy(logits, labels)
        out = SequenceClassifierOutput(loss=loss, logits=logits)
        return out if return_dict is not False else out.to_tuple()

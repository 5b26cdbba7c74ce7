"""Classifiers on a pretrained InSub encoder, for every `problem_type` transformers' classifiers take (single-label,
multi-label, regression). Finetune-InSub (`InSubForImageClassification`): M independent classifier heads, for
`AutoModelForImageClassification` and `pipeline("image-classification")`; the prediction is the heads' ensemble
(averaged probabilities or sigmoids, or the heads' mean), and how much they disagree is each sample's uncertainty,
kept after fine-tuning. `InSubForSequenceClassification`: one linear classifier, for
`AutoModelForSequenceClassification`.

The pretraining projection heads are not part of a classifier: loading a pretraining checkpoint leaves them out (the
load report lists them as unexpected keys), so every parameter gets a gradient (DDP needs no
`find_unused_parameters`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_outputs import SequenceClassifierOutput
from transformers.utils import ModelOutput

from .configuration_insub import InSubConfig
from .label_settings import check_label_settings
from .heads import BatchedHeads
from .modeling_insub import InSubModel, InSubPreTrainedModel


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


@dataclass
class InSubImageClassifierOutput(ModelOutput):
    """Outputs of `InSubForImageClassification` for B images, C classes and M heads.

    Args:
        loss: scalar, the heads' losses averaged over heads (each head learns on its own; given `labels`):
            cross-entropy, binary cross-entropy per label (multi-label) or mean squared error (regression).
        logits: `(B, C)` the ensemble's prediction: the log of the heads' mean probabilities (`logits.softmax(-1)`,
            what `pipeline("image-classification")` reports), the logit of their mean sigmoids (multi-label:
            `logits.sigmoid()`), or the heads' mean (regression).
        head_logits: `(B, M, C)` each head's outputs.
        mutual_information: `(B,)` entropy of the mean prediction minus the heads' mean entropy, in nats (summed over
            labels for multi-label): 0 when the heads agree, higher = they disagree (epistemic uncertainty); None
            for regression and for one head (nothing to disagree with: it would always read 0).
        entropy: `(B,)` entropy of the mean prediction in nats (total uncertainty); None for regression.
        variance: `(B, C)` the heads' variance around their mean (regression's uncertainty); None otherwise and for
            one head.
        representation: `(B, d)` encoder output.
        hidden_states, attentions: the encoder's, with `output_hidden_states` / `output_attentions`.
    """

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    head_logits: torch.Tensor | None = None
    mutual_information: torch.Tensor | None = None
    entropy: torch.Tensor | None = None
    variance: torch.Tensor | None = None
    representation: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


def ensemble_log_probabilities(head_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(B, M, C)` head logits -> (log of the mean probability `(B, C)`, its entropy `(B,)`, the mutual information
    `(B,)`), from log-softmax (no log of a rounded-to-zero probability)."""
    log_p = F.log_softmax(head_logits.float(), dim=-1)  # (B, M, C)
    log_mean = torch.logsumexp(log_p, dim=1) - math.log(head_logits.shape[1])  # (B, C)
    entropy = -(log_mean.exp() * log_mean).sum(-1)
    mean_head_entropy = -(log_p.exp() * log_p).sum(-1).mean(1)
    return log_mean, entropy, (entropy - mean_head_entropy).clamp_min(0)


def ensemble_sigmoids(head_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Multi-label: `(B, M, C)` head logits -> (the logit of the heads' mean sigmoid `(B, C)`, the entropy of that
    mean summed over labels `(B,)`, the mutual information summed over labels `(B,)`), from log-sigmoids."""
    log_p, log_q = F.logsigmoid(head_logits.float()), F.logsigmoid(-head_logits.float())  # log p, log (1 - p)
    heads = math.log(head_logits.shape[1])
    log_mean_p, log_mean_q = torch.logsumexp(log_p, 1) - heads, torch.logsumexp(log_q, 1) - heads  # (B, C)
    entropy = -(log_mean_p.exp() * log_mean_p + log_mean_q.exp() * log_mean_q)  # (B, C)
    head_entropy = -(log_p.exp() * log_p + log_q.exp() * log_q).mean(1)
    return log_mean_p - log_mean_q, entropy.sum(-1), (entropy - head_entropy).clamp_min(0).sum(-1)


class InSubForImageClassification(InSubPreTrainedModel):
    """An InSub image encoder with `config.num_heads` independent linear classifier heads (the paper's
    Finetune-InSub).

    `from_pretrained(insub_checkpoint, num_labels=C, id2label=..., label2id=...)` loads the encoder of an
    `InSubForPreTraining` or `InSubModel` checkpoint and starts the M classifier heads fresh, each from its own
    initialisation. Inputs: `pixel_values (B, C_in, H, W)` as the checkpoint's image processor makes them, optional
    `labels` (`check_labels`: classes `(B,)`, or per-label targets for multi-label and regression, as
    `config.problem_type` says). Call `freeze_encoder()` to train the heads only (the frozen encoder also keeps its
    BatchNorm statistics).
    """

    def __init__(self, config: InSubConfig):
        # from_pretrained(..., num_labels=1) sets the field after the config was checked
        check_label_settings(config.num_labels, config.problem_type)
        super().__init__(config)
        self.insub = InSubModel(config, with_heads=False)
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
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
    ) -> InSubImageClassifierOutput | tuple:
        frozen = self.encoder_is_frozen()
        if frozen:
            self.insub.encoder.eval()
        with torch.set_grad_enabled(torch.is_grad_enabled() and not frozen):
            encoded = self.insub.encode(output_hidden_states, output_attentions, pixel_values=pixel_values)
        representation = encoded.pooled
        head_logits = self.classifier(representation)  # (B, M, C)
        problem = problem_type(self.config, labels)
        entropy = mutual_information = variance = None
        if problem == "single_label_classification":
            logits, entropy, mutual_information = ensemble_log_probabilities(head_logits)
        elif problem == "multi_label_classification":
            logits, entropy, mutual_information = ensemble_sigmoids(head_logits)
        else:
            logits, variance = head_logits.mean(1), head_logits.var(1, unbiased=False).detach()
        if head_logits.shape[1] == 1:  # one head has no spread: a 0 here would read as "certain"
            mutual_information = variance = None
        loss = None
        if labels is not None:
            batch, heads, classes = head_logits.shape
            targets = check_labels(labels, batch, classes, problem)
            # each head learns on its own: the batch's targets once per head
            per_head = targets[:, None].expand(batch, heads, *targets.shape[1:]).reshape(batch * heads, *targets.shape[1:])
            loss = label_loss(head_logits.reshape(batch * heads, classes), per_head, problem)
        out = InSubImageClassifierOutput(
            loss=loss, logits=logits, head_logits=head_logits,
            mutual_information=None if mutual_information is None else mutual_information.detach(),
            entropy=None if entropy is None else entropy.detach(), variance=variance, representation=representation,
            hidden_states=encoded.hidden_states, attentions=encoded.attentions,
        )
        return out if return_dict is not False else out.to_tuple()


class InSubForSequenceClassification(InSubPreTrainedModel):
    """The pretrained encoder with a linear classifier, for fine-tuning.

    `from_pretrained(pretraining_checkpoint, num_labels=C)` loads the encoder of an `InSubForPreTraining` or
    `InSubModel` checkpoint and starts the classifier fresh. Inputs as `InSubModel` (keywords), plus optional
    `labels` (`check_labels`, as `config.problem_type` says). Outputs: `loss` (cross-entropy, binary cross-entropy
    per label, or mean squared error, when labels are given), `logits (B, C)` and, when asked, the encoder's
    `hidden_states` and `attentions`.
    """

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

"""The genomic encoder as a `PreTrainedModel`, plus its adapter to the `Encoder` interface."""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPooling

from .base import Encoder, check_finite, check_rank
from .configuration_genomic import GenomicEncoderConfig


class GenomicEncoderModel(PreTrainedModel):
    """Conv1D over one-hot DNA -> ReLU -> LSTM context network.

    Shapes: dna_one_hot `(B, L, 4)` -> last_hidden_state `(B, T, H)` with `T = (L - kernel) // stride + 1`,
    pooler_output `(B, H)` (mean over T).
    """

    config_class = GenomicEncoderConfig
    base_model_prefix = "genomic"
    main_input_name = "dna_one_hot"

    def __init__(self, config: GenomicEncoderConfig):
        super().__init__(config)
        self.conv = nn.Conv1d(4, config.conv_filters, config.kernel_size, stride=config.stride)
        self.dropout = nn.Dropout(config.dropout)
        self.lstm = nn.LSTM(
            config.conv_filters, config.lstm_hidden_size, num_layers=config.num_lstm_layers, batch_first=True
        )
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Conv1d, nn.LSTM)):
            module.reset_parameters()

    def forward(self, dna_one_hot: torch.Tensor, return_dict: bool | None = None) -> BaseModelOutputWithPooling:
        check_rank("dna_one_hot", dna_one_hot, 3, "(batch, length, 4)")
        if dna_one_hot.shape[2] != 4:
            raise ValueError(f"dna_one_hot must have 4 channels (A, C, G, T) last, got shape {tuple(dna_one_hot.shape)}.")
        if dna_one_hot.shape[1] < self.config.kernel_size:
            raise ValueError(
                f"dna_one_hot sequences have length {dna_one_hot.shape[1]}, shorter than the conv kernel "
                f"(GenomicEncoderConfig.kernel_size={self.config.kernel_size}); crop or pad them to at least that length."
            )
        check_finite("dna_one_hot", dna_one_hot)
        features = torch.relu(self.conv(dna_one_hot.transpose(1, 2)))  # (B, F, T)
        features = self.dropout(features).transpose(1, 2)  # (B, T, F)
        hidden, _ = self.lstm(features)  # (B, T, H)
        return BaseModelOutputWithPooling(last_hidden_state=hidden, pooler_output=hidden.mean(dim=1))


class GenomicEncoder(Encoder):
    """Adapter: dna_one_hot `(B, L, 4)` -> window features `(B, T, H)` -> their mean, the representation `(B, H)`."""

    main_input_name = "dna_one_hot"
    input_names = ("dna_one_hot",)

    def __init__(self, model: GenomicEncoderModel):
        super().__init__()
        self.model = model
        self.output_dim = model.config.lstm_hidden_size

    def forward_features(self, dna_one_hot: torch.Tensor) -> torch.Tensor:
        return self.model(dna_one_hot=dna_one_hot).last_hidden_state

    def pool(self, features: torch.Tensor, **inputs) -> torch.Tensor:
        return features.mean(dim=1)  # the model's pooler_output

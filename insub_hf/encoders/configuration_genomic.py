"""Configuration of the genomic encoder: a 1-D CNN over one-hot DNA followed by an LSTM context network."""

from __future__ import annotations

from typing import Any

from transformers import PretrainedConfig

from ..validation import check_range


class GenomicEncoderConfig(PretrainedConfig):
    r"""Self-GenomeNet-style DNA encoder (Gunduz et al. 2021).

    The paper's sizes are 1024 conv filters (kernel 24 stride 6 for 150 nt, kernel 40 stride 20 for 1000 nt) and an
    LSTM of 512; the defaults here are small enough for a CPU.

    Args:
        conv_filters: output channels of the Conv1D.
        kernel_size: Conv1D kernel width in nucleotides.
        stride: Conv1D stride in nucleotides.
        lstm_hidden_size: hidden size of the LSTM context network (the representation size d).
        num_lstm_layers: stacked LSTM layers.
        dropout: dropout on the conv features.
    """

    model_type = "insub_genomic"

    conv_filters: int = 64
    kernel_size: int = 24
    stride: int = 6
    lstm_hidden_size: int = 64
    num_lstm_layers: int = 1
    dropout: float = 0.0

    def __post_init__(self, **kwargs: Any) -> None:
        super().__post_init__(**kwargs)
        for field in ("conv_filters", "kernel_size", "stride", "lstm_hidden_size", "num_lstm_layers"):
            check_range(f"GenomicEncoderConfig.{field}", getattr(self, field), low=1, integer=True)
        check_range("GenomicEncoderConfig.dropout", self.dropout, low=0.0, high=1.0, high_inclusive=False)

    @property
    def hidden_size(self) -> int:
        return self.lstm_hidden_size

import pytest
import torch

import insub_hf  # noqa: F401  (registers the Auto classes)
from insub_hf import InSubConfig

TINY_VIT = dict(
    model_type="vit", image_size=32, patch_size=4, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
    intermediate_size=64,
)


def tiny_config(**overrides) -> InSubConfig:
    kwargs = dict(encoder_config=dict(TINY_VIT), num_heads=3, head_hidden_sizes=[48], head_output_size=16)
    kwargs.update(overrides)
    return InSubConfig(**kwargs)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)

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


def compare_argv(output_dir, **options) -> list[str]:
    """`insub-hf compare` arguments on the bundled data at a tiny budget (1 epoch of a CIFAR ResNet-18 at width 1/16,
    2 heads, 20 images per class); `options` add or override flags (lists for multi-value flags)."""
    options = {
        "output_dir": output_dir, "data_source": "bundled", "num_heads": 2, "num_train_epochs": 1,
        "per_device_train_batch_size": 20, "encoder": "resnet18_cifar", "width": 0.0625, "head_hidden_size": 16,
        "train_per_class": 20, "test_per_class": 10, **options,
    }
    argv = ["compare"]
    for name, value in options.items():
        argv += [f"--{name}", *map(str, value if isinstance(value, list) else [value])]
    return argv


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)

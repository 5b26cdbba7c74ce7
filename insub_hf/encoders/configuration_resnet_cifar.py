"""Configuration of the CIFAR-style ResNet: the encoder of SimCLR's (and the InSub paper's) CIFAR experiments."""

from __future__ import annotations

from typing import Any

from transformers import PretrainedConfig

from ..validation import check_choice, check_range

# depth -> (block, blocks per stage); the widths of the four stages are 64, 128, 256, 512 times width_multiplier.
RESNET_LAYOUTS = {
    10: ("basic", (1, 1, 1, 1)), 18: ("basic", (2, 2, 2, 2)), 34: ("basic", (3, 4, 6, 3)), 50: ("bottleneck", (3, 4, 6, 3)),
}
BASE_WIDTHS = (64, 128, 256, 512)
EXPANSION = {"basic": 1, "bottleneck": 4}


class CifarResNetConfig(PretrainedConfig):
    r"""A ResNet with the CIFAR stem (He et al. 2016; SimCLR's CIFAR variant): a 3x3 stride-1 first convolution and
    no max-pool, so 32x32 (or 28x28) images keep their resolution through the first stage.

    transformers' `ResNetConfig` has the ImageNet stem (7x7 stride 2 + max-pool), which shrinks a 32-pixel image to
    8x8 before the first block; SimCLR is known to lose about ten points of CIFAR-10 accuracy with it.

    Args:
        depth: 10, 18 or 34 (basic blocks) or 50 (bottleneck blocks).
        width_multiplier: scales every stage's width (64, 128, 256, 512 at 1.0; at least one channel each).
        num_channels: 1 (grey) or 3 (RGB) input channels.
        hidden_dropout_prob: dropout after each stage (0: none; MC Dropout samples it at test time).
        image_size: the training resolution (informational; the network takes any size >= 8).
    """

    model_type = "insub_cifar_resnet"

    depth: int = 18
    width_multiplier: float = 1.0
    num_channels: int = 3
    hidden_dropout_prob: float = 0.0
    image_size: int = 32

    def __post_init__(self, **kwargs: Any) -> None:
        super().__post_init__(**kwargs)
        check_choice("CifarResNetConfig.depth", self.depth, tuple(RESNET_LAYOUTS))
        check_range("CifarResNetConfig.width_multiplier", self.width_multiplier, low=0.0, low_inclusive=False)
        check_choice("CifarResNetConfig.num_channels", self.num_channels, (1, 3))
        check_range(
            "CifarResNetConfig.hidden_dropout_prob", self.hidden_dropout_prob, low=0.0, high=1.0, high_inclusive=False
        )
        check_range("CifarResNetConfig.image_size", self.image_size, low=8, integer=True)

    @property
    def block_type(self) -> str:
        return RESNET_LAYOUTS[self.depth][0]

    @property
    def depths(self) -> tuple[int, ...]:
        """Blocks per stage."""
        return RESNET_LAYOUTS[self.depth][1]

    @property
    def stage_widths(self) -> list[int]:
        """Inner width of each stage's blocks (the 3x3 convolutions)."""
        return [max(1, round(w * self.width_multiplier)) for w in BASE_WIDTHS]

    @property
    def hidden_sizes(self) -> list[int]:
        """Output channels of each stage; the last is the representation size d."""
        return [w * EXPANSION[self.block_type] for w in self.stage_widths]

    @property
    def hidden_size(self) -> int:
        return self.hidden_sizes[-1]

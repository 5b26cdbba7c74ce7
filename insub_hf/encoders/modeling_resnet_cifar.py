"""The CIFAR-style ResNet as a `PreTrainedModel` (registered with AutoModel, saved as safetensors)."""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutputWithPoolingAndNoAttention

from .base import check_finite, check_rank
from .configuration_resnet_cifar import EXPANSION, CifarResNetConfig


def _conv_bn(in_channels: int, out_channels: int, kernel: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, kernel, stride=stride, padding=kernel // 2, bias=False),
        nn.BatchNorm2d(out_channels),
    )


class CifarBasicBlock(nn.Module):
    """3x3 -> 3x3 with an identity (or 1x1 projection) shortcut. Shapes: `(B, C_in, H, W)` -> `(B, width, H/s, W/s)`."""

    expansion = EXPANSION["basic"]

    def __init__(self, in_channels: int, width: int, stride: int):
        super().__init__()
        self.conv1 = _conv_bn(in_channels, width, 3, stride)
        self.conv2 = _conv_bn(width, width, 3)
        out = width * self.expansion
        self.shortcut = _conv_bn(in_channels, out, 1, stride) if stride != 1 or in_channels != out else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv2(torch.relu(self.conv1(x))) + self.shortcut(x))


class CifarBottleneckBlock(nn.Module):
    """1x1 -> 3x3 (stride) -> 1x1 (x4). Shapes: `(B, C_in, H, W)` -> `(B, 4 * width, H/s, W/s)`."""

    expansion = EXPANSION["bottleneck"]

    def __init__(self, in_channels: int, width: int, stride: int):
        super().__init__()
        out = width * self.expansion
        self.conv1 = _conv_bn(in_channels, width, 1)
        self.conv2 = _conv_bn(width, width, 3, stride)
        self.conv3 = _conv_bn(width, out, 1)
        self.shortcut = _conv_bn(in_channels, out, 1, stride) if stride != 1 or in_channels != out else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return torch.relu(self.conv3(h) + self.shortcut(x))


BLOCKS = {"basic": CifarBasicBlock, "bottleneck": CifarBottleneckBlock}


class CifarResNetModel(PreTrainedModel):
    """ResNet-10/18/34/50 with the CIFAR stem (3x3 stride-1 convolution, no max-pool) and no classifier. Like
    transformers' `ResNetModel` it offers no gradient checkpointing: replaying a block in the backward pass would
    update its BatchNorm statistics twice per step.

    Shapes: pixel_values `(B, C, H, W)` -> last_hidden_state `(B, d, H/8, W/8)` (rounded up), pooler_output
    `(B, d, 1, 1)` (global average), with `d = config.hidden_size`; `hidden_states` (when asked): the stem's and
    each stage's output. The output layout is transformers' `ResNetModel`'s, so the same adapter reads both.
    """

    config_class = CifarResNetConfig
    base_model_prefix = "resnet"
    main_input_name = "pixel_values"

    def __init__(self, config: CifarResNetConfig):
        super().__init__(config)
        widths = config.stage_widths
        self.stem = _conv_bn(config.num_channels, widths[0], 3)
        block = BLOCKS[config.block_type]
        stages, channels = [], widths[0]
        for index, (width, blocks) in enumerate(zip(widths, config.depths)):
            layers = []
            for b in range(blocks):
                layers.append(block(channels, width, stride=2 if index > 0 and b == 0 else 1))
                channels = width * block.expansion
            stages.append(nn.Sequential(*layers))
        self.stages = nn.ModuleList(stages)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Conv2d):
            init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(module, nn.BatchNorm2d):
            init.ones_(module.weight)
            init.zeros_(module.bias)
            init.zeros_(module.running_mean)
            init.ones_(module.running_var)
            init.zeros_(module.num_batches_tracked)

    def forward(
        self, pixel_values: torch.Tensor, output_hidden_states: bool | None = None, return_dict: bool | None = None
    ) -> BaseModelOutputWithPoolingAndNoAttention:
        check_rank("pixel_values", pixel_values, 4, "(batch, channels, height, width)")
        if pixel_values.shape[1] != self.config.num_channels:
            raise ValueError(
                f"pixel_values has {pixel_values.shape[1]} channels; CifarResNetConfig.num_channels="
                f"{self.config.num_channels}."
            )
        check_finite("pixel_values", pixel_values)
        hidden = torch.relu(self.stem(pixel_values))
        states = [hidden]
        for stage in self.stages:
            hidden = self.dropout(stage(hidden))
            states.append(hidden)
        pooled = hidden.mean(dim=(2, 3), keepdim=True)
        return BaseModelOutputWithPoolingAndNoAttention(
            last_hidden_state=hidden, pooler_output=pooled,
            hidden_states=tuple(states) if output_hidden_states else None,
        )

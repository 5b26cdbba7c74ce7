"""image_processing_insub: what this folder's loaders run of the insub-hf modules processing.image_processing_insub (documented there), bundled by `insub_hf.hub.remote_code`."""

from __future__ import annotations

import math
import numpy as np
import sys
import torch
from PIL import Image
from torchvision.transforms.v2 import functional as TF
from transformers.image_processing_backends import TorchvisionBackend
from transformers.image_processing_utils import BatchFeature
from transformers.image_transforms import convert_to_rgb
from transformers.image_utils import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, PILImageResampling
from transformers.processing_utils import ImagesKwargs
from .image_processing_pil_insub import (
    ALLOWED_INPUTS, INTEGER_RANGES, InSubImageProcessorFields, InSubImageProcessorKwargs, LUMA, NUM_CHANNELS,
    SETTINGS, SIXTEEN_BIT_MODES, STOCK_PIPELINES, _refuse, _side, _unit_range, check_crop_fits,
    check_not_under_a_stock_pipeline, check_processor_fields, check_processor_settings, check_unit_images,
    checked_images, normalize_images, read_image, stack_processed, to_channels,
)


class InSubImageProcessor(InSubImageProcessorFields, TorchvisionBackend):
    """Resize, centre crop and normalise images for an InSub image encoder (fields: `InSubImageProcessorFields`)."""

    def process_image(self, image, **kwargs) -> torch.Tensor:
        """One input image -> `(num_channels, H, W)` (uint8 as given, or float)."""
        image, num_channels = self._channels(image, kwargs)
        return to_channels(super().process_image(image, **kwargs), num_channels)

    def _preprocess(self, images: list[torch.Tensor], do_resize, size, do_center_crop, crop_size, do_rescale,
                    rescale_factor, do_normalize, image_mean, image_std, return_tensors=None, num_channels=None,
                    **kwargs) -> BatchFeature:
        out = []
        for image in images:  # images of any size; each (C, H, W)
            if do_rescale and not image.is_floating_point():  # as ToDtype(scale=True) does for the default 1/255
                image = TF.to_dtype(image, torch.float32, scale=True) if rescale_factor == 1 / 255 else (
                    image.float() * rescale_factor
                )
            image = image.float()
            if do_resize:
                image = TF.resize(image, [size.shortest_edge], antialias=True)
            if do_center_crop:
                check_crop_fits(image.shape[-2:], crop_size)
                image = TF.center_crop(image, [crop_size.height, crop_size.width])
            if do_normalize:
                image = normalize_images(image, image_mean, image_std)
            out.append(image)
        return stack_processed(out, return_tensors)

"""The image processor that travels with every InSub image checkpoint (`preprocessor_config.json`): what
`AutoImageProcessor` and `pipeline("image-feature-extraction" | "image-classification")` use to turn PIL images,
arrays or tensors into the model's `pixel_values`; this is its torchvision backend (`InSubImageProcessorPil` the PIL
one, where torchvision is not installed).

The steps are the evaluation transform's (`insub_hf.data.eval_image_transform`): to float in [0, 1], resize the shorter
side (bilinear, antialiased), centre crop, normalise by the training data's mean and std. Images are first converted to
the model's channel count: the pipelines hand over RGB images, which a 1-channel (grey) model needs back as grey (PIL's
`convert("L")`, exact for images that were grey to begin with).
"""

from __future__ import annotations

import torch
from torchvision.transforms.v2 import functional as TF
from transformers.image_processing_backends import TorchvisionBackend
from transformers.image_processing_utils import BatchFeature

from .image_processing_pil_insub import (  # noqa: F401  (the kwargs class, where transformers looks for it)
    InSubImageProcessorFields, InSubImageProcessorKwargs, check_crop_fits, stack_processed, to_channels,
)
from .image_range import check_processor_fields, normalize_images

__all__ = ["InSubImageProcessor", "InSubImageProcessorKwargs", "check_processor_fields", "normalize_images",
           "to_channels"]


class InSubImageProcessor(InSubImageProcessorFields, TorchvisionBackend):
    """Resize, centre crop and normalise images for an InSub image encoder (fields: `InSubImageProcessorFields`).

    Returns `BatchFeature` with `pixel_values (B, num_channels, H, W)` float32.
    """

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

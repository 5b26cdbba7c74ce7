"""The PIL backend of the InSub image processor, and what both backends share: the fields and their checks, the
conversion to the model's channel count, the normalisation.

`AutoImageProcessor` takes `InSubImageProcessor` (torchvision, `image_processing_insub.py`) where torchvision is
installed and this class where it is not (a repo's `auto_map` names both), as it does for transformers' own
processors. The steps are the same: to the model's channel count, resize the shorter side (bilinear), centre crop, to
[0, 1], normalise. PIL resizes the 8-bit image where torchvision resizes floats (antialiased), so resized pixels differ
by about one grey level (1/255 before normalising); without a resize the outputs are equal.
"""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image
from transformers.image_processing_backends import PilBackend
from transformers.image_processing_utils import BatchFeature
from transformers.image_utils import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, PILImageResampling
from transformers.processing_utils import ImagesKwargs

NUM_CHANNELS = (1, 3)
# ITU-R 601-2 luma in PIL's fixed point (`Image.convert("L")`): grey = (R*19595 + G*38470 + B*7471 + 2**15) >> 16
LUMA = (19595, 38470, 7471)


class InSubImageProcessorKwargs(ImagesKwargs, total=False):
    num_channels: int


def to_channels(image: torch.Tensor, num_channels: int) -> torch.Tensor:
    """A `(C, H, W)` uint8 image with C in {1, 3, 4} as `num_channels` channels: RGB(A) -> grey by PIL's luma (exact
    where R = G = B), grey -> RGB by repeating, an alpha channel dropped."""
    channels = image.shape[0]
    if channels not in (1, 3, 4):
        raise ValueError(f"InSubImageProcessor: images must have 1, 3 or 4 channels, got {channels}.")
    if channels == 4:
        image, channels = image[:3], 3
    if channels == num_channels:
        return image
    if num_channels == 3:
        return image.expand(3, -1, -1)
    if image.dtype != torch.uint8:  # float images in [0, 1]: the same weights, without the fixed point
        weights = torch.tensor(LUMA, dtype=image.dtype, device=image.device) / 65536
        return (image * weights[:, None, None]).sum(0, keepdim=True)
    weights = torch.tensor(LUMA, dtype=torch.int32, device=image.device)
    return (((image.int() * weights[:, None, None]).sum(0, keepdim=True) + 2**15) >> 16).to(torch.uint8)


class InSubImageProcessorFields:
    """The fields both backends of the InSub image processor share (all saved in `preprocessor_config.json`):

    size: `{"shortest_edge": S}`, the shorter side after resizing.
    crop_size: `{"height": H, "width": W}` of the centre crop (the encoder's image size).
    num_channels: 1 (grey) or 3 (RGB): images are converted to it first.
    image_mean, image_std: per-channel normalisation of the pretraining data (one value per channel).
    """

    model_input_names = ["pixel_values"]
    valid_kwargs = InSubImageProcessorKwargs
    resample = PILImageResampling.BILINEAR
    size = {"shortest_edge": 224}
    crop_size = {"height": 224, "width": 224}
    num_channels = 3
    image_mean = IMAGENET_DEFAULT_MEAN
    image_std = IMAGENET_DEFAULT_STD
    do_resize = True
    do_center_crop = True
    do_rescale = True
    do_normalize = True
    do_convert_rgb = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        check_processor_fields(self.num_channels, self.image_mean, self.image_std)

    @classmethod
    def for_images(cls, image_size: int, num_channels: int, mean, std, **kwargs):
        """The processor of an encoder reading `(num_channels, image_size, image_size)` images normalised by
        `mean` and `std`: resize the shorter side to `image_size`, centre crop a square."""
        return cls(size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size},
                   num_channels=num_channels, image_mean=list(mean), image_std=list(std), **kwargs)

    def _channels(self, image, kwargs: dict):
        """`image` as an array or tensor the backend reads, a PIL image already in the model's mode (grey or RGB);
        pops `num_channels` from `kwargs` and returns it."""
        num_channels = kwargs.pop("num_channels", None) or self.num_channels
        kwargs["do_convert_rgb"] = False  # the conversion is to_channels', to the model's channel count
        if isinstance(image, Image.Image):
            image = np.array(image.convert("L" if num_channels == 1 else "RGB"))
        return image, num_channels


class InSubImageProcessorPil(InSubImageProcessorFields, PilBackend):
    """Resize, centre crop and normalise images for an InSub image encoder with PIL and NumPy (no torchvision).

    Returns `BatchFeature` with `pixel_values (B, num_channels, H, W)` float32.
    """

    def process_image(self, image, **kwargs) -> np.ndarray:
        """One input image -> `(num_channels, H, W)` (uint8 as given, or float)."""
        image, num_channels = self._channels(image, kwargs)
        array = super().process_image(image, **kwargs)
        return to_channels(torch.from_numpy(np.ascontiguousarray(array)), num_channels).numpy()

    def _preprocess(self, images: list[np.ndarray], do_resize, size, resample, do_center_crop, crop_size, do_rescale,
                    rescale_factor, do_normalize, image_mean, image_std, return_tensors=None, num_channels=None,
                    **kwargs) -> BatchFeature:
        check_processor_fields(num_channels or self.num_channels, image_mean, image_std)
        out = []
        for image in images:  # images of any size; each (C, H, W)
            if do_resize:
                image = self.resize(image, size, resample=resample)
            if do_center_crop:
                image = self.center_crop(image, crop_size)
            if do_rescale and not np.issubdtype(image.dtype, np.floating):
                image = self.rescale(image, rescale_factor)
            image = image.astype(np.float32)
            if do_normalize:
                image = normalize_images(torch.from_numpy(image), image_mean, image_std).numpy()
            out.append(image)
        return stack_processed(out, return_tensors)


def stack_processed(images: list, return_tensors) -> BatchFeature:
    """The processed images as `pixel_values` (one batch tensor with `return_tensors`); refuses images of different
    shapes then."""
    shapes = {tuple(image.shape) for image in images}
    if len(shapes) > 1 and return_tensors is not None:
        raise ValueError(
            f"InSubImageProcessor: the processed images have different shapes {sorted(shapes)}; keep "
            "do_resize and do_center_crop on (or give images of one size) to batch them."
        )
    if return_tensors:
        images = torch.stack([torch.as_tensor(image) for image in images])
    return BatchFeature(data={"pixel_values": images}, tensor_type=return_tensors)


def normalize_images(images: torch.Tensor, mean, std) -> torch.Tensor:
    """`(images - mean) / std` per channel: the one image normalisation of the package (this processor, the
    per-sample and per-batch views and the evaluation harness apply it).

    Args:
        images: `(..., C, H, W)` floats in [0, 1] (one image or a batch).
        mean, std: one value per channel.

    Returns:
        A new tensor of the same shape and dtype.
    """
    mean_t = torch.as_tensor(mean, dtype=images.dtype, device=images.device).view(-1, 1, 1)
    std_t = torch.as_tensor(std, dtype=images.dtype, device=images.device).view(-1, 1, 1)
    return (images - mean_t) / std_t


def check_processor_fields(num_channels: int, mean, std) -> None:
    """Refuses a channel count other than 1 or 3, a mean or std (a number or one per channel) of another length
    than the channels, and a std that is not positive, naming the field."""
    if num_channels not in NUM_CHANNELS:
        raise ValueError(f"InSubImageProcessor.num_channels must be one of {NUM_CHANNELS}, got {num_channels!r}.")
    fields = {name: [v] if isinstance(v, (int, float)) else list(v) for name, v in (("image_mean", mean),
                                                                                     ("image_std", std))}
    for name, values in fields.items():
        if len(values) != num_channels:
            raise ValueError(
                f"InSubImageProcessor.{name} must give one value per channel (num_channels={num_channels}), got "
                f"{values}."
            )
    if any(s <= 0 for s in fields["image_std"]):
        raise ValueError(f"InSubImageProcessor.image_std must be positive, got {fields['image_std']}.")

"""The image processor that travels with every InSub image checkpoint (`preprocessor_config.json`): what
`AutoImageProcessor` and `pipeline("image-feature-extraction" | "image-classification")` use to turn PIL images,
arrays or tensors into the model's `pixel_values`.

The steps are the evaluation transform's (`insub_hf.data.eval_image_transform`): to float in [0, 1], resize the shorter
side (bilinear, antialiased), centre crop, normalise by the training data's mean and std. Images are first converted to
the model's channel count: the pipelines hand over RGB images, which a 1-channel (grey) model needs back as grey (PIL's
`convert("L")`, exact for images that were grey to begin with).
"""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image
from torchvision.transforms.v2 import functional as TF
from transformers.image_processing_backends import TorchvisionBackend
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


class InSubImageProcessor(TorchvisionBackend):
    """Resize, centre crop and normalise images for an InSub image encoder.

    Args (all saved in `preprocessor_config.json`):
        size: `{"shortest_edge": S}`, the shorter side after resizing.
        crop_size: `{"height": H, "width": W}` of the centre crop (the encoder's image size).
        num_channels: 1 (grey) or 3 (RGB): images are converted to it first.
        image_mean, image_std: per-channel normalisation of the pretraining data (one value per channel).

    Returns `BatchFeature` with `pixel_values (B, num_channels, H, W)` float32.
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
    def for_images(cls, image_size: int, num_channels: int, mean, std, **kwargs) -> InSubImageProcessor:
        """The processor of an encoder reading `(num_channels, image_size, image_size)` images normalised by
        `mean` and `std`: resize the shorter side to `image_size`, centre crop a square."""
        return cls(size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size},
                   num_channels=num_channels, image_mean=list(mean), image_std=list(std), **kwargs)

    def process_image(self, image, **kwargs) -> torch.Tensor:
        """One input image -> `(num_channels, H, W)` (uint8 as given, or float)."""
        num_channels = kwargs.pop("num_channels", None) or self.num_channels
        kwargs["do_convert_rgb"] = False  # the conversion is to_channels', to the model's channel count
        if isinstance(image, Image.Image):
            image = np.array(image.convert("L" if num_channels == 1 else "RGB"))
        return to_channels(super().process_image(image, **kwargs), num_channels)

    def _preprocess(self, images: list[torch.Tensor], do_resize, size, do_center_crop, crop_size, do_rescale,
                    rescale_factor, do_normalize, image_mean, image_std, return_tensors=None, num_channels=None,
                    **kwargs) -> BatchFeature:
        check_processor_fields(num_channels or self.num_channels, image_mean, image_std)
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
                image = TF.center_crop(image, [crop_size.height, crop_size.width])
            if do_normalize:
                image = normalize_images(image, image_mean, image_std)
            out.append(image)
        shapes = {tuple(image.shape) for image in out}
        if len(shapes) > 1 and return_tensors is not None:
            raise ValueError(
                f"InSubImageProcessor: the processed images have different shapes {sorted(shapes)}; keep "
                "do_resize and do_center_crop on (or give images of one size) to batch them."
            )
        return BatchFeature(data={"pixel_values": torch.stack(out) if return_tensors else out},
                            tensor_type=return_tensors)


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

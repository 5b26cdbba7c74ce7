"""image_processing_pil_insub: what this folder's loaders run of the insub-hf modules processing.image_processing_pil_insub, processing.image_range (documented there), bundled by `insub_hf.hub.remote_code`."""

from __future__ import annotations

import math
import numpy as np
import sys
import torch
from PIL import Image
from transformers.image_processing_backends import PilBackend
from transformers.image_processing_utils import BatchFeature
from transformers.image_transforms import convert_to_rgb
from transformers.image_utils import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, PILImageResampling
from transformers.processing_utils import ImagesKwargs


NUM_CHANNELS = (1, 3, 4)


def check_unit_images(images: torch.Tensor, name: str) -> None:
    """Raises unless `images` are floats in [0, 1], the one rule for float images on every path (this processor, the
    batched views, the harness): uint8 or 0..255 pixels and images already normalised to [-1, 1] or by a mean and
    std are named as such. Reads the values: call it on data up front, not inside a training step."""
    if not images.is_floating_point():
        raise ValueError(f"{name} must be float images in [0, 1], got dtype {images.dtype} (uint8 pixels: divide by 255).")
    if images.numel() == 0:
        return
    low, high = float(images.min()), float(images.max())
    if not (math.isfinite(low) and math.isfinite(high)) or low < 0 or high > 1:
        hint = ("non-finite values" if not (math.isfinite(low) and math.isfinite(high)) else
                "0..255 pixels: divide by 255" if high > 1.5 else "normalised images: pass them before normalisation")
        raise ValueError(f"{name} must be float images in [0, 1], got values in [{low:.4g}, {high:.4g}] ({hint}).")


def check_processor_fields(num_channels: int, mean, std, owner: str = "InSubImageProcessor") -> None:
    """Refuses a channel count other than 1, 3 or 4, a mean or std (a number or one per channel) of another length
    than the channels, and values no [0, 1] image has: a mean outside [0, 1] or a std outside (0, 1] (0..255 units
    are named as such), naming the field of `owner`."""
    if num_channels not in NUM_CHANNELS:
        raise ValueError(f"{owner}.num_channels must be one of {NUM_CHANNELS}, got {num_channels!r}.")
    fields = {name: [v] if isinstance(v, (int, float)) else list(v) for name, v in (("image_mean", mean),
                                                                                     ("image_std", std))}
    for name, values in fields.items():
        if len(values) != num_channels:
            raise ValueError(
                f"{owner}.{name} must give one value per channel (num_channels={num_channels}), got {values}."
            )
        if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
            raise ValueError(f"{owner}.{name} must be finite numbers, got {values}.")
        low_ok = all(v >= 0 for v in values) if name == "image_mean" else all(v > 0 for v in values)
        if not low_ok or any(v > 1 for v in values):
            unit = " (0..255 units? the images are in [0, 1]: divide by 255)" if any(v > 1 for v in values) else ""
            allowed = "in [0, 1]" if name == "image_mean" else "in (0, 1]"
            raise ValueError(f"{owner}.{name} must be {allowed} for pixels in [0, 1], got {values}{unit}.")


def normalize_images(images: torch.Tensor, mean, std) -> torch.Tensor:
    """`(images - mean) / std` per channel: the one image normalisation of the package (this processor, the
    per-sample and per-batch views and the evaluation harness apply it)."""
    mean_t = torch.as_tensor(mean, dtype=images.dtype, device=images.device).view(-1, 1, 1)
    std_t = torch.as_tensor(std, dtype=images.dtype, device=images.device).view(-1, 1, 1)
    return (images - mean_t) / std_t


SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N")
INTEGER_RANGES = {np.dtype(np.uint8): 255, np.dtype(np.uint16): 65535}
ALLOWED_INPUTS = ("uint8 (0..255) or uint16 (0..65535) pixels, floats in [0, 1], or a PIL image (8-bit modes, "
                  "16-bit grey)")
LUMA = (19595, 38470, 7471)


class InSubImageProcessorKwargs(ImagesKwargs, total=False):
    num_channels: int


def to_channels(image: torch.Tensor, num_channels: int) -> torch.Tensor:
    """A `(C, H, W)` uint8 image with C in {1, 3, 4} as `num_channels` channels: RGB(A) -> grey by PIL's luma (exact
    where R = G = B), grey -> RGB by repeating, an alpha channel dropped; a 4-channel model (RGBA, 4 bands) reads
    4-channel images only."""
    channels = image.shape[0]
    if channels not in (1, 3, 4):
        raise ValueError(f"InSubImageProcessor: images must have 1, 3 or 4 channels, got {channels}.")
    if channels == num_channels:
        return image
    if num_channels == 4:
        raise ValueError(
            f"InSubImageProcessor: num_channels=4 reads 4-channel images (RGBA or four bands), got {channels} "
            "channels; a fourth channel is not made up."
        )
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
    """The fields both backends of the InSub image processor share (all saved in `preprocessor_config.json`):"""

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
        check_processor_settings(**{name: getattr(self, name) for name in SETTINGS})

    @classmethod
    def for_images(cls, image_size: int, num_channels: int, mean, std, **kwargs):
        """The processor of an encoder reading `(num_channels, image_size, image_size)` images normalised by
        `mean` and `std`: resize the shorter side to `image_size`, centre crop a square."""
        return cls(size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size},
                   num_channels=num_channels, image_mean=list(mean), image_std=list(std), **kwargs)

    def _channels(self, image, kwargs: dict):
        """`image` as an array or tensor the backend reads, a PIL image already in the model's mode (grey or RGB);
        pops `num_channels` from `kwargs` and returns it. `do_convert_rgb=True` converts a PIL image to RGB first
        (transformers' `convert_to_rgb`: transparency composited onto white)."""
        num_channels = kwargs.pop("num_channels", None) or self.num_channels
        if kwargs.get("do_convert_rgb") and isinstance(image, Image.Image) and image.mode not in SIXTEEN_BIT_MODES:
            image = convert_to_rgb(image)
        kwargs["do_convert_rgb"] = False  # the rest of the conversion is to_channels', to the model's channel count
        return read_image(image, num_channels), num_channels

    def preprocess(self, images, *args, **kwargs) -> BatchFeature:
        """transformers' preprocessing of `checked_images(images)`; refused under transformers' stock image
        pipelines (`check_not_under_a_stock_pipeline`)."""
        check_not_under_a_stock_pipeline(type(self).__name__)
        return super().preprocess(checked_images(images), *args, **kwargs)

    def _validate_preprocess_kwargs(self, **kwargs) -> None:
        """transformers' checks, then `check_processor_settings` on the settings of this call (a call's own
        `do_rescale=False` or `image_std` is refused as a built processor's is)."""
        super()._validate_preprocess_kwargs(**kwargs)
        check_processor_settings(**{name: kwargs.get(name) for name in SETTINGS})


class InSubImageProcessorPil(InSubImageProcessorFields, PilBackend):
    """Resize, centre crop and normalise images for an InSub image encoder with PIL and NumPy (no torchvision)."""

    def process_image(self, image, **kwargs) -> np.ndarray:
        """One input image -> `(num_channels, H, W)` (uint8 as given, or float)."""
        image, num_channels = self._channels(image, kwargs)
        array = super().process_image(image, **kwargs)
        return to_channels(torch.from_numpy(np.ascontiguousarray(array)), num_channels).numpy()

    def resize(self, image: np.ndarray, size, resample=None, reducing_gap=None, **kwargs) -> np.ndarray:
        """transformers' PIL resize for uint8 images; a float image (16-bit or float input, `(C, H, W)` in [0, 1]) is
        resized channel by channel as a 32-bit float PIL image (mode "F"), where transformers' would go through 8
        bits, to the size transformers' gives."""
        if not np.issubdtype(image.dtype, np.floating):
            return super().resize(image, size, resample=resample, reducing_gap=reducing_gap, **kwargs)
        shape = super().resize(np.zeros((1, *image.shape[-2:]), dtype=np.uint8), size, resample=resample).shape[-2:]
        resample = resample if isinstance(resample, (PILImageResampling, int)) else PILImageResampling.BILINEAR
        return np.stack([
            np.asarray(Image.fromarray(channel.astype(np.float32)).resize(  # mode "F"
                (shape[1], shape[0]), resample=resample, reducing_gap=reducing_gap))
            for channel in image
        ])

    def _preprocess(self, images: list[np.ndarray], do_resize, size, resample, do_center_crop, crop_size, do_rescale,
                    rescale_factor, do_normalize, image_mean, image_std, return_tensors=None, num_channels=None,
                    **kwargs) -> BatchFeature:
        out = []
        for image in images:  # images of any size; each (C, H, W)
            if do_resize:
                image = self.resize(image, size, resample=resample)
            if do_center_crop:
                check_crop_fits(image.shape[-2:], crop_size)
                image = centre_crop(image, crop_size)
            if do_rescale and not np.issubdtype(image.dtype, np.floating):
                image = self.rescale(image, rescale_factor)
            image = image.astype(np.float32)
            if do_normalize:
                image = normalize_images(torch.from_numpy(image), image_mean, image_std).numpy()
            out.append(image)
        return stack_processed(out, return_tensors)


STOCK_PIPELINES = {"transformers.pipelines.image_feature_extraction": "ImageFeatureExtractionPipeline",
                   "transformers.pipelines.image_classification": "ImageClassificationPipeline"}


def check_not_under_a_stock_pipeline(processor: str) -> None:
    """Refuses, in one line with the ways that read every image, a call made by the `preprocess` of one of
    `STOCK_PIPELINES` (a few frames up; the InSub pipelines' own `preprocess` is other code)."""
    codes = {getattr(sys.modules[module], name).preprocess.__code__
             for module, name in STOCK_PIPELINES.items() if module in sys.modules}
    frame = sys._getframe(1)
    for _ in range(6):
        if frame is None:
            return
        if frame.f_code in codes:
            raise ValueError(
                f"{processor} under transformers' own image pipeline, which makes every image 8-bit RGB first (a "
                "16-bit image clipped at 255): pass pipeline_class=InSubImageFeatureExtractionPipeline (or "
                "InSubImageClassificationPipeline) from insub_hf, call insub_hf.register_pipelines() once, or give "
                "pipeline() a folder that holds pipeline_insub.py (save_pretrained writes it) with "
                "trust_remote_code=True."
            )
        frame = frame.f_back


def checked_images(images):
    """`images` (one image or a list) as the backends read them, refused in one line where they cannot be: no images,
    an image with no pixels. A 2-D array or tensor `(H, W)` is one grey image (`(1, H, W)`), which transformers'
    own reading cannot tell from a list of rows."""
    single = not isinstance(images, (list, tuple))
    items = [images] if single else list(images)
    if not items:
        raise ValueError("InSubImageProcessor: got no images; give an image (PIL, array or tensor) or a list of them.")
    out = []
    for i, image in enumerate(items):
        shape = image.size[::-1] if isinstance(image, Image.Image) else tuple(getattr(image, "shape", ()))
        if 0 in shape:
            raise ValueError(f"InSubImageProcessor: image {i} has no pixels (shape {shape}); give images of at least "
                             "1x1 pixels.")
        if isinstance(image, (np.ndarray, torch.Tensor)) and image.ndim == 2:
            image = image[None]
        out.append(image)
    return out[0] if single else out


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


def read_image(image, num_channels: int):
    """One input image as the backends read it: a PIL image in the model's mode (grey or RGB; 16-bit grey by its bit
    depth, as floats in [0, 1]), a uint8 array or tensor as it is, a uint16 one divided by 65535, floats checked to
    lie in [0, 1]. Anything else is refused, naming its type, dtype and range and what is allowed (`ALLOWED_INPUTS`):
    other integer dtypes (an int64 0..255 array: cast it to uint8), floats outside [0, 1] (0..255 pixels, or images
    normalised already), non-finite values."""
    if isinstance(image, Image.Image):
        if image.mode in SIXTEEN_BIT_MODES:
            return np.asarray(image, dtype=np.uint16).astype(np.float32) / 65535
        if image.mode not in ("I", "F"):  # 8-bit modes: PIL's own conversion is exact there
            if num_channels != 4 and (image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info):
                image = convert_to_rgb(image)  # transparency onto white, as transformers' convert_to_rgb
            return np.array(image.convert({1: "L", 3: "RGB", 4: "RGBA"}[num_channels]))
        image = np.asarray(image)  # 32-bit integer or float pixels: read by their dtype below
    if isinstance(image, torch.Tensor):
        if image.dtype == torch.uint8 or image.is_floating_point() and _unit_range(image, "tensor"):
            return image
        if image.dtype == getattr(torch, "uint16", None):
            return image.float() / 65535
        _refuse("tensor", str(image.dtype).removeprefix("torch."), image)
    if isinstance(image, np.ndarray):
        if image.dtype in INTEGER_RANGES:
            return image if image.dtype == np.uint8 else image.astype(np.float32) / INTEGER_RANGES[image.dtype]
        if np.issubdtype(image.dtype, np.floating) and _unit_range(torch.from_numpy(np.asarray(image)), "array"):
            return image
        _refuse("array", str(image.dtype), torch.from_numpy(np.asarray(image, dtype=np.float64)))
    raise TypeError(f"InSubImageProcessor: images must be PIL images, numpy arrays or torch tensors, got "
                    f"{type(image).__name__}.")


def _unit_range(image: torch.Tensor, kind: str) -> bool:
    """True for float pixels in [0, 1] (`check_unit_images`, naming the input and what else is allowed)."""
    try:
        check_unit_images(image, f"InSubImageProcessor: a float {kind} image")
    except ValueError as error:
        raise ValueError(f"{error} Allowed: {ALLOWED_INPUTS}.") from None
    return True


def _refuse(kind: str, dtype: str, image: torch.Tensor) -> None:
    """Raises for an image of a dtype the processor does not read, naming the dtype and its values' range."""
    values = f"values in [{float(image.min()):.6g}, {float(image.max()):.6g}]" if image.numel() else "no values"
    high = float(image.max()) if image.numel() else 0.0
    # the cast that keeps the values: uint8 where they fit, uint16 for 16-bit ones (a 32-bit TIFF of 16-bit data)
    cast = "" if "int" not in dtype else (" (0..255 pixels: cast to uint8)" if high <= 255 else
                                          " (0..65535 pixels: cast to uint16)" if high <= 65535 else "")
    article = "an" if kind == "array" else "a"
    raise ValueError(f"InSubImageProcessor: {article} {kind} image of dtype {dtype} ({values}) is not read{cast}; "
                     f"allowed: {ALLOWED_INPUTS}.")


def centre_crop(image: np.ndarray, crop_size) -> np.ndarray:
    """The centre `crop_size` of a `(C, H, W)` array, its offsets rounded as torchvision's `center_crop` rounds them
    (the torchvision backend and the evaluation transform), so both backends crop the same pixels."""
    height, width = image.shape[-2:]
    top = int(round((height - crop_size.height) / 2.0))
    left = int(round((width - crop_size.width) / 2.0))
    return image[..., top:top + crop_size.height, left:left + crop_size.width]


def check_crop_fits(shape, crop_size) -> None:
    """Refuses an image `(H, W)` smaller than the centre crop: the crop would pad it with zeros."""
    height, width = (int(v) for v in shape)
    if height < crop_size.height or width < crop_size.width:
        raise ValueError(
            f"InSubImageProcessor: an image of {height}x{width} is smaller than crop_size "
            f"{crop_size.height}x{crop_size.width}, which would pad it with zeros; keep do_resize on or give larger "
            "images."
        )


SETTINGS = ("num_channels", "image_mean", "image_std", "do_rescale", "rescale_factor", "do_resize", "size",
            "do_center_crop", "crop_size")


def _side(value, key: str):
    """`value[key]` of a size dict or SizeDict (None when absent)."""
    if value is None:
        return None
    return value.get(key) if isinstance(value, dict) else getattr(value, key, None)


def check_processor_settings(num_channels, image_mean, image_std, do_rescale=True, rescale_factor=1 / 255,
                             do_resize=True, size=None, do_center_crop=True, crop_size=None) -> None:
    """Refuses, naming the field, every setting under which the model would read something else than the image:
    the channels, mean and std (`check_processor_fields`), a rescale other than uint8's 1/255 (integer images are
    read by their dtype), a size other than `{"shortest_edge": S}` with S >= 2, a crop under 2x2 (a constant
    image), and a crop larger than the resized image (padded with zeros)."""
    check_processor_fields(num_channels, image_mean, image_std)
    if not do_rescale:
        raise ValueError("InSubImageProcessor.do_rescale must be True: integer images are read by their dtype "
                         "(uint8 / 255, uint16 / 65535) and float images must be in [0, 1]; got False.")
    if rescale_factor is None or not math.isclose(rescale_factor, 1 / 255, rel_tol=1e-6):
        raise ValueError(f"InSubImageProcessor.rescale_factor must be 1/255 (uint8 pixels to [0, 1]; other dtypes "
                         f"are read by their range), got {rescale_factor!r}.")
    edge = _side(size, "shortest_edge")
    if do_resize and (not isinstance(edge, int) or isinstance(edge, bool) or edge < 2):
        raise ValueError(f"InSubImageProcessor.size must be {{'shortest_edge': S}} with an integer S >= 2, got "
                         f"{dict(size) if size is not None else None!r}.")
    if do_center_crop:
        height, width = _side(crop_size, "height"), _side(crop_size, "width")
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 2 for v in (height, width)):
            raise ValueError(f"InSubImageProcessor.crop_size must be {{'height': H, 'width': W}} with integers >= 2 "
                             f"(a 1-pixel image is constant), got {dict(crop_size) if crop_size else None!r}.")
        if do_resize and max(height, width) > edge:
            raise ValueError(
                f"InSubImageProcessor.crop_size {height}x{width} must fit inside the resized image (size "
                f"shortest_edge {edge}): a larger crop pads the image with zeros."
            )

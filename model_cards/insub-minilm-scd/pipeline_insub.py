"""`pipeline("image-feature-extraction")` and `pipeline("image-classification")` over an InSub image processor read
each image as that processor does.

transformers' own pipelines convert every image to 8-bit RGB before the processor sees it (`load_image`), which
clips a 16-bit image at 255: nearly white, garbage features, no word. With an InSub processor these pipelines hand
local files, URLs, base64 strings and PIL images to it as they are (opened by PIL, not converted), so a 16-bit image is
read by its bit depth (`read_image`) and an image no InSub processor reads (32-bit integers, NaN pixels) is refused
naming its dtype and range. With any other processor they are transformers' own.

Every saved InSub model carries this file as `pipeline_insub.py` and names its classes in its config.json's
`custom_pipelines` (`remote_code.write_pipelines`): `pipeline(task, model=folder_or_repo, trust_remote_code=True)`
runs them, and without `trust_remote_code=True` transformers refuses the folder in one line rather than clip. A task
that hands a model another modality (`"feature-extraction"` to an image model, an image task to a text or DNA model)
is named too, with `InSubOtherModalityPipeline`, which refuses it in one line. In
memory: `pipeline(task, model=model, pipeline_class=...)`, or `register_pipelines()` once to make them the two tasks'
classes; `import insub_hf` registers nothing. The file imports nothing of insub-hf: it is the same beside a model.
"""

from __future__ import annotations

import base64
import binascii
import os
import urllib.request
from io import BytesIO

from PIL import Image, ImageOps, UnidentifiedImageError
from transformers.pipelines import PIPELINE_REGISTRY, ImageClassificationPipeline, ImageFeatureExtractionPipeline


# the InSub image processors (both backends), by name: the package's classes and a folder's remote-code copies alike
INSUB_PROCESSORS = ("InSubImageProcessor", "InSubImageProcessorPil")


def _insub_processor(pipeline) -> bool:
    return type(pipeline.image_processor).__name__ in INSUB_PROCESSORS


def _as_given(image, timeout):
    """A local file, a URL, a base64 string (bare or a `data:image/...;base64,` URI) or a PIL image, opened as it is:
    its EXIF orientation applied, its mode and bit depth kept (transformers' `load_image` reads the same sources but
    converts every image to 8-bit RGB)."""
    try:
        image = _opened(image, timeout)
    except Image.DecompressionBombError as error:  # PIL's guard against a file that decodes to gigabytes
        raise ValueError(f"image {str(image)[:80]!r} is too large for PIL to open ({error}); downscale it, or raise "
                         "PIL.Image.MAX_IMAGE_PIXELS if you trust the file.") from None
    if not isinstance(image, Image.Image):
        raise TypeError(f"images must be PIL images, local paths, URLs or base64 strings, got {type(image).__name__}.")
    return ImageOps.exif_transpose(image)


def _opened(image, timeout):
    """`image` opened by PIL where it is a local file, an http(s) URL or a base64 string; as it is otherwise."""
    if isinstance(image, str):
        if image.startswith(("http://", "https://")):
            with urllib.request.urlopen(image, timeout=timeout) as response:  # follows redirects
                image = Image.open(BytesIO(response.read()))
        elif os.path.isfile(image):
            image = Image.open(image)
        else:
            try:
                image = Image.open(BytesIO(base64.b64decode(image.split(",", 1)[-1] if image.startswith("data:image/")
                                                            else image, validate=True)))
            except (binascii.Error, ValueError, UnidentifiedImageError) as error:
                raise ValueError(
                    f"image {image[:40]!r}... is neither a local file, an http(s) URL nor a base64-encoded image: "
                    f"{error}"
                ) from None
    return image


class InSubImageFeatureExtractionPipeline(ImageFeatureExtractionPipeline):
    """transformers' image feature extraction, reading images by their bit depth for InSub processors;
    `return_uncertainty=True` gives `{"features": ..., "uncertainty": float or None}` per image, the model's own
    `uncertainty` (None where the model serves none)."""

    def _sanitize_parameters(self, return_uncertainty=None, **kwargs):
        preprocess, forward, postprocess = super()._sanitize_parameters(**kwargs)
        if return_uncertainty is not None:
            postprocess["return_uncertainty"] = return_uncertainty
        return preprocess, forward, postprocess

    def preprocess(self, image, timeout=None, **image_processor_kwargs):
        if not _insub_processor(self):
            return super().preprocess(image, timeout=timeout, **image_processor_kwargs)
        image = _as_given(image, timeout)
        return self.image_processor(image, return_tensors="pt", **image_processor_kwargs).to(self.dtype)

    def postprocess(self, model_outputs, return_uncertainty=False, **kwargs):
        features = super().postprocess(model_outputs, **kwargs)
        if not return_uncertainty:
            return features
        uncertainty = model_outputs.get("uncertainty")  # (1,): one image a forward
        return {"features": features, "uncertainty": None if uncertainty is None else float(uncertainty[0])}


class InSubImageClassificationPipeline(ImageClassificationPipeline):
    """transformers' image classification, reading images by their bit depth for InSub processors."""

    def preprocess(self, image, timeout=None):
        if not _insub_processor(self):
            return super().preprocess(image, timeout=timeout)
        image = image if not isinstance(image, (str, Image.Image)) else _as_given(image, timeout)  # arrays as given
        return self.image_processor(images=image, return_tensors="pt").to(self.dtype)


# What each task hands a model, and per model input (`main_input_name`) what the model reads and what does read it
TASK_GIVES = {"feature-extraction": "texts", "image-feature-extraction": "images", "image-classification": "images"}
MODEL_READS = {
    "pixel_values": ("images", 'pipeline("image-feature-extraction", model=..., trust_remote_code=True) (a fine-tuned '
                               'classifier: "image-classification")'),
    "input_ids": ("texts", "SentenceTransformer(folder, trust_remote_code=True).encode(texts), or AutoModel with the "
                           "folder's tokenizer"),
    "dna_one_hot": ("one-hot DNA (dna_one_hot (B, L, 4))", "AutoModel.from_pretrained(folder, trust_remote_code=True)"
                                                           "(dna_one_hot=...)"),
}


class InSubOtherModalityPipeline:
    """What a folder names for a task that hands its model another modality (`remote_code.write_pipelines`): built
    by `pipeline(task, model=folder, trust_remote_code=True)`, it refuses in one line naming what the model reads
    and what reads it, before any processor is looked for (transformers would otherwise fail on a processor or
    tokenizer the folder does not have, in its own words)."""

    _load_tokenizer = _load_image_processor = _load_feature_extractor = _load_processor = False
    _load_video_processor = False

    def __init__(self, model, task: str = "", **kwargs):
        reads, works = MODEL_READS.get(getattr(model, "main_input_name", None), ("its own inputs", "its card's code"))
        given = TASK_GIVES.get(task, "another modality")
        raise ValueError(f"pipeline({task!r}) hands this model {given}, and it reads {reads}: use {works}.")


# task -> (transformers' class, the one that replaces it)
PIPELINES = {"image-feature-extraction": (ImageFeatureExtractionPipeline, InSubImageFeatureExtractionPipeline),
             "image-classification": (ImageClassificationPipeline, InSubImageClassificationPipeline)}


def register_pipelines() -> None:
    """Makes `PIPELINES` the tasks' pipelines (their defaults stay transformers'); a task another library has
    replaced already is left alone."""
    for name, (stock, ours) in PIPELINES.items():
        task = PIPELINE_REGISTRY.supported_tasks[name]
        impl = task["impl"]  # the class, or its dotted path (transformers resolves it when a pipeline is built)
        if impl is stock or impl == f"{stock.__module__}.{stock.__name__}":
            task["impl"] = ours

"""InSubImageProcessor: the test transform's numbers from PIL images, arrays and tensors, grey and colour; saved with
checkpoints, found by AutoImageProcessor, used by pipeline("image-feature-extraction") in a fresh process."""

import json
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import AutoImageProcessor

from insub_hf import InSubConfig, InSubForPreTraining, InSubImageProcessor
from insub_hf.checkpointing import save_pretrained_atomic
from insub_hf.encoders.presets import named_encoder
from insub_hf.data import IMAGE_DATASET_PRESETS, eval_image_transform

RNG = np.random.default_rng(0)
GREY = [Image.fromarray(RNG.integers(0, 256, (28, 28), dtype=np.uint8), "L") for _ in range(3)]
COLOUR = [Image.fromarray(RNG.integers(0, 256, (40, 50, 3), dtype=np.uint8)) for _ in range(2)]


def test_grey_images_given_as_rgb_come_back_as_the_test_transform_gives_them():
    processor = IMAGE_DATASET_PRESETS["fashion_mnist"].image_processor()
    expected = torch.stack([IMAGE_DATASET_PRESETS["fashion_mnist"].eval_transform()(im) for im in GREY])
    as_rgb = processor([im.convert("RGB") for im in GREY], return_tensors="pt").pixel_values  # what pipelines pass
    torch.testing.assert_close(as_rgb, expected, rtol=0, atol=0)
    arrays = [np.asarray(im.convert("RGB")) for im in GREY]  # (H, W, 3) uint8
    torch.testing.assert_close(processor(arrays, return_tensors="pt").pixel_values, expected, rtol=0, atol=0)
    tensors = [torch.from_numpy(a).permute(2, 0, 1) for a in arrays]
    torch.testing.assert_close(processor(tensors, return_tensors="pt").pixel_values, expected, rtol=0, atol=0)


def test_colour_images_are_resized_cropped_and_normalised_as_the_test_transform():
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    processor = InSubImageProcessor.for_images(32, 3, mean, std)
    expected = torch.stack([eval_image_transform(32, mean, std, 3)(im) for im in COLOUR])
    out = processor(COLOUR, return_tensors="pt").pixel_values
    assert out.shape == (2, 3, 32, 32)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    grey_input = processor([GREY[0]], return_tensors="pt").pixel_values  # a grey image for a colour model: repeated
    torch.testing.assert_close(grey_input[0, 0] * std[0] + mean[0], grey_input[0, 1] * std[1] + mean[1])


def test_rgb_to_grey_is_pils_luma():
    image = COLOUR[0]
    processor = InSubImageProcessor.for_images(32, 1, (0.0,), (1.0,))
    expected = eval_image_transform(32, (0.0,), (1.0,), 1)(image.convert("L"))
    tensor = torch.from_numpy(np.asarray(image)).permute(2, 0, 1).contiguous()
    torch.testing.assert_close(processor([tensor], return_tensors="pt").pixel_values[0], expected, rtol=0, atol=0)


@pytest.mark.parametrize("fields, message", [
    (dict(num_channels=2), r"InSubImageProcessor.num_channels must be one of \(1, 3, 4\), got 2"),
    (dict(num_channels=1, image_mean=[0.5, 0.5, 0.5], image_std=[0.2]),
     r"InSubImageProcessor.image_mean must give one value per channel \(num_channels=1\)"),
    (dict(num_channels=1, image_mean=[0.5], image_std=[0.0]), r"image_std must be in \(0, 1\] for pixels in \[0, 1\], got \[0.0\]"),
    # settings under which the model would read a blank, constant or padded image
    (dict(num_channels=1, image_mean=[0.5], image_std=[float("inf")]), r"image_std must be finite numbers, got \[inf\]"),
    (dict(num_channels=1, image_mean=[float("nan")], image_std=[0.5]), r"image_mean must be finite numbers, got \[nan\]"),
    # normalisation settings in 0..255 units would make every [0, 1] image near-constant
    (dict(num_channels=1, image_mean=[73.0], image_std=[0.3]), r"image_mean must be in \[0, 1\] for pixels in \[0, 1\], "
                                                                r"got \[73.0\] \(0..255 units\? .*divide by 255\)"),
    (dict(num_channels=1, image_mean=[0.3], image_std=[90.0]), r"image_std must be in \(0, 1\] .*got \[90.0\] \(0..255 units"),
    (dict(do_rescale=False), r"do_rescale must be True: integer images are read by their dtype"),
    (dict(rescale_factor=1.0), r"rescale_factor must be 1/255 \(uint8 pixels to \[0, 1\]"),
    (dict(size={"shortest_edge": 1}, crop_size={"height": 1, "width": 1}), r"size must be \{'shortest_edge': S\} with an integer S >= 2"),
    (dict(size={"height": 32, "width": 32}), r"size must be \{'shortest_edge': S\}.*got \{'height': 32, 'width': 32\}"),
    (dict(size={"shortest_edge": 32}, crop_size={"height": 1, "width": 32}), r"crop_size must be .* integers >= 2 \(a 1-pixel image is constant\)"),
    (dict(size={"shortest_edge": 28}, crop_size={"height": 32, "width": 32}), r"crop_size 32x32 must fit inside the resized image \(size shortest_edge 28\): a larger crop pads"),
])
def test_bad_fields_are_refused_naming_them(fields, message):
    with pytest.raises(ValueError, match=message):
        InSubImageProcessor(**fields)


def test_saved_processor_loads_with_auto_image_processor(tmp_path):
    processor = IMAGE_DATASET_PRESETS["fashion_mnist"].image_processor()
    processor.save_pretrained(tmp_path)
    loaded = AutoImageProcessor.from_pretrained(tmp_path)
    assert type(loaded) is InSubImageProcessor and loaded.num_channels == 1
    torch.testing.assert_close(loaded(GREY, return_tensors="pt").pixel_values,
                               processor(GREY, return_tensors="pt").pixel_values, rtol=0, atol=0)


@pytest.mark.slow
def test_the_stock_pipeline_on_a_saved_folder_reads_every_bit_depth_or_refuses(tmp_path):
    """`pipeline(task, model=folder)` as a user writes it, in a fresh process that imports insub_hf and registers
    nothing: the folder names its own pipelines, so without trust_remote_code transformers refuses it in one line,
    and with it 8-bit, 16-bit (PNG, TIFF in both byte orders) and float images are read at their real range; 32-bit
    integer and NaN images are refused naming what they are. Never clipped to 8 bits."""
    preset = IMAGE_DATASET_PRESETS["fashion_mnist"]
    config = InSubConfig(encoder_config=named_encoder("resnet18_cifar", 28, 1, 0.0625), num_heads=3,
                         head_hidden_sizes=[16], head_output_size=8)
    model = InSubForPreTraining(config).eval()
    processor = preset.image_processor()
    save_pretrained_atomic(model, tmp_path / "model", processor=processor)
    for i, image in enumerate(GREY):
        image.save(tmp_path / f"{i}.png")
    wide = (np.arange(28 * 28).reshape(28, 28) * 83).astype(np.uint16)  # 0 .. 65,000: most of it above 255
    Image.fromarray(wide).save(tmp_path / "grey16.png")
    Image.fromarray(wide).save(tmp_path / "little16.tif")
    Image.fromarray(wide.astype(">u2")).save(tmp_path / "big16.tif")
    unit = wide.astype(np.float32) / 65535
    Image.fromarray(unit).save(tmp_path / "float.tif")
    with_nan = unit.copy()
    with_nan[3, 4] = np.nan
    Image.fromarray(with_nan).save(tmp_path / "nan.tif")
    Image.fromarray(wide.astype(np.int32)).save(tmp_path / "int32.tif")
    sixteen = ["grey16.png", "little16.tif", "big16.tif", "float.tif"]
    code = f"""
import json, insub_hf
from transformers import pipeline
folder, images = {str(tmp_path / "model")!r}, {str(tmp_path)!r}
try:
    pipeline("image-feature-extraction", model=folder)
    refused = None
except ValueError as error:
    refused = str(error)
extractor = pipeline("image-feature-extraction", model=folder, trust_remote_code=True)
out = {{"refused": refused, "class": type(extractor).__name__,
        "grey": [extractor(images + f"/{{i}}.png")[0] for i in range(3)],
        "sixteen": [extractor(images + "/" + name)[0] for name in {sixteen!r}]}}
for name in ("nan.tif", "int32.tif"):
    try:
        extractor(images + "/" + name)
    except ValueError as error:
        out[name] = str(error)
print(json.dumps(out))
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert "trust_remote_code=True" in out["refused"] and "\n" not in out["refused"]
    assert out["class"] == "InSubImageFeatureExtractionPipeline"
    mean, std = torch.tensor(processor.image_mean).view(1, -1, 1, 1), torch.tensor(processor.image_std).view(1, -1, 1, 1)
    with torch.no_grad():
        pixels = torch.stack([preset.eval_transform()(im) for im in GREY])
        expected = model.insub.get_representation(pixel_values=pixels)
        # by hand: pixel / 65535, normalised, what each 16-bit and float file holds
        wide_expected = model.insub.get_representation(pixel_values=(torch.from_numpy(unit)[None, None] - mean) / std)
        clipped = model.insub.get_representation(pixel_values=(torch.ones(1, 1, 28, 28) - mean) / std)
    assert model.insub.encoder.output_dim == expected.shape[1]
    torch.testing.assert_close(torch.tensor(out["grey"]), expected, rtol=1e-4, atol=1e-5)
    for name, features in zip(sixteen, out["sixteen"]):
        torch.testing.assert_close(torch.tensor(features), wide_expected[0], rtol=1e-4, atol=1e-5, msg=name)
        assert not torch.allclose(torch.tensor(features), clipped[0], atol=1e-3), name
    assert re.search(r"float array image must be float images in \[0, 1\].*non-finite", out["nan.tif"])
    assert re.search(r"an array image of dtype int32 \(values in \[0, 64989\]\) is not read \(0..65535 pixels: cast to "
                     r"uint16\)", out["int32.tif"])


def test_the_pil_backend_gives_the_torchvision_numbers_without_torchvision():
    from insub_hf import InSubImageProcessorPil

    mean, std = (0.3, 0.4, 0.5), (0.2, 0.25, 0.3)
    fast, pil = (cls.for_images(32, 3, mean, std) for cls in (InSubImageProcessor, InSubImageProcessorPil))
    same_size = [Image.fromarray(RNG.integers(0, 256, (32, 32, 3), dtype=np.uint8)) for _ in range(2)]
    torch.testing.assert_close(pil(same_size, return_tensors="pt").pixel_values,
                               fast(same_size, return_tensors="pt").pixel_values, rtol=0, atol=1e-6)
    # resized: PIL resizes 8-bit pixels, torchvision floats; about one grey level (1/255 / std) apart
    got, expected = (p(COLOUR, return_tensors="pt").pixel_values for p in (pil, fast))
    assert got.shape == expected.shape == (2, 3, 32, 32) and got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=0, atol=1.5 / 255 / min(std))
    grey_pil, grey_fast = (cls.for_images(28, 1, (0.5,), (0.25,)) for cls in (InSubImageProcessorPil, InSubImageProcessor))
    rgb = [im.convert("RGB") for im in GREY]  # what pipelines pass: back to grey by PIL's luma in both
    torch.testing.assert_close(grey_pil(rgb, return_tensors="pt").pixel_values,
                               grey_fast(rgb, return_tensors="pt").pixel_values, rtol=0, atol=1e-6)
    assert pil.to_dict()["image_processor_type"] == "InSubImageProcessor"  # one saved form for both backends


def _processors():
    from insub_hf import InSubImageProcessorPil

    return [cls.for_images(28, 1, (0.5,), (0.25,)) for cls in (InSubImageProcessor, InSubImageProcessorPil)]


@pytest.mark.parametrize("backend", [0, 1], ids=["torchvision", "pil"])
def test_a_16_bit_png_is_read_by_its_bit_depth(tmp_path, backend):
    processor = _processors()[backend]
    pixels = (np.arange(28 * 28).reshape(28, 28) * 83).astype(np.uint16)  # 0 .. 65,000: most of it above 255
    Image.fromarray(pixels).save(tmp_path / "grey16.png")
    image = Image.open(tmp_path / "grey16.png")
    assert image.mode == "I;16"
    got = processor(image, return_tensors="pt").pixel_values[0, 0]
    # by hand: pixel / 65535, normalised; not PIL's clipping at 255 (which would read nearly every pixel as white)
    expected = (torch.from_numpy(pixels.astype(np.float32)) / 65535 - 0.5) / 0.25
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)  # both backends at the image's precision
    rgb16 = np.repeat(pixels[..., None], 3, axis=-1)  # a uint16 array: the same image by its dtype
    torch.testing.assert_close(processor(rgb16, return_tensors="pt").pixel_values[0, 0], got, rtol=0, atol=1e-6)


def test_both_backends_resize_a_16_bit_image_at_its_precision(tmp_path):
    """Downsized 56 -> 28, the two backends agree on a 16-bit image far within one 8-bit grey level, and the PIL
    backend's pixels are not on the 8-bit grid (it resized in floats)."""
    torchvision_backend, pil_backend = _processors()
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 65536, (56, 56), dtype=np.uint16)
    pixels = np.sort(pixels.ravel()).reshape(56, 56).astype(np.uint16)  # smooth, so that both filters agree
    Image.fromarray(pixels).save(tmp_path / "grey16.png")
    through = [p(Image.open(tmp_path / "grey16.png"), return_tensors="pt").pixel_values[0, 0]
               for p in (torchvision_backend, pil_backend)]
    torch.testing.assert_close(through[1], through[0], rtol=0, atol=0.1 / 255 / 0.25)
    unit = through[1] * 0.25 + 0.5  # back to [0, 1]
    assert (unit * 255 - (unit * 255).round()).abs().max() > 0.1  # not 8-bit levels


def test_the_feature_extraction_pipeline_reads_a_16_bit_png_by_its_bit_depth(tmp_path):
    from transformers import pipeline

    from insub_hf import InSubForImageClassification, InSubModel

    from .conftest import tiny_config

    processor = _processors()[0]
    model = InSubModel(tiny_config(encoder_config=dict(model_type="vit", image_size=28, patch_size=4, hidden_size=32,
                                                       num_hidden_layers=1, num_attention_heads=2,
                                                       intermediate_size=64, num_channels=1))).eval()
    pixels = (np.arange(28 * 28).reshape(28, 28) * 83).astype(np.uint16)
    Image.fromarray(pixels).save(tmp_path / "grey16.png")
    from insub_hf import InSubImageFeatureExtractionPipeline, register_pipelines

    extractor = pipeline("image-feature-extraction", model=model, image_processor=processor,
                         pipeline_class=InSubImageFeatureExtractionPipeline)
    with torch.no_grad():
        expected = model(**processor(Image.open(tmp_path / "grey16.png"), return_tensors="pt")).representation
        clipped = model(**processor(Image.open(tmp_path / "grey16.png").convert("L"), return_tensors="pt"))
    import base64
    import http.server
    import threading
    from functools import partial

    encoded = base64.b64encode((tmp_path / "grey16.png").read_bytes()).decode()
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/grey16.png"
    sources = [str(tmp_path / "grey16.png"), Image.open(tmp_path / "grey16.png"), url, encoded,
               "data:image/png;base64," + encoded]  # a path, a PIL image, a URL, base64 bare and as a data URI
    for image in sources:
        pooled = torch.tensor(extractor(image, pool=True)).reshape(expected.shape)
        torch.testing.assert_close(pooled, expected, rtol=1e-5, atol=1e-6)
        assert not torch.allclose(pooled, clipped.representation, atol=1e-3)  # what 8-bit conversion would give
    classifier = InSubForImageClassification(tiny_config(encoder_config=model.config.encoder_config, num_labels=3))
    register_pipelines()  # the other opt-in: the task's own pipeline() reads by bit depth from here on
    classify = pipeline("image-classification", model=classifier.eval(), image_processor=processor)
    with torch.no_grad():
        probabilities = classifier(**processor(Image.open(tmp_path / "grey16.png"), return_tensors="pt")).logits.softmax(-1)
    scores = {row["label"]: row["score"] for row in classify(str(tmp_path / "grey16.png"), top_k=3)}
    torch.testing.assert_close(torch.tensor([scores[classifier.config.id2label[i]] for i in range(3)]),
                               probabilities[0], rtol=1e-5, atol=1e-6)
    by_url = {row["label"]: row["score"] for row in classify(url, top_k=3)}
    assert by_url == pytest.approx(scores, rel=1e-5)
    server.shutdown()
    with pytest.raises(ValueError, match=r"is neither a local file, an http\(s\) URL nor a base64-encoded image"):
        extractor("not-a-file-or-base64!", pool=True)


@pytest.mark.parametrize("backend", [0, 1], ids=["torchvision", "pil"])
@pytest.mark.parametrize("image, message", [
    (np.full((28, 28, 3), 100, dtype=np.int32), r"an array image of dtype int32 \(values in \[100, 100\]\) is not read "
     r"\(0..255 pixels: cast to uint8\); allowed: uint8 \(0..255\) or uint16"),
    (torch.full((3, 28, 28), 100, dtype=torch.int64), r"a tensor image of dtype int64 \(values in \[100, 100\]\)"),
    (np.full((28, 28, 3), 200.0), r"a float array image must be float images in \[0, 1\], got values in \[200, 200\] "
     r"\(0..255 pixels: divide by 255\)"),
    (np.full((28, 28, 3), -0.5, dtype=np.float32), r"got values in \[-0.5, -0.5\] \(normalised images: pass them before"),
    (torch.full((3, 28, 28), float("nan")), r"a float tensor image must be float images in \[0, 1\].*non-finite"),
])
def test_images_outside_their_range_are_refused_naming_dtype_and_range(backend, image, message):
    with pytest.raises(ValueError, match=message):
        _processors()[backend](image, return_tensors="pt")


@pytest.mark.parametrize("backend", [0, 1], ids=["torchvision", "pil"])
def test_float_images_in_the_unit_range_and_uint8_read_the_same(backend):
    processor = _processors()[backend]
    pixels = RNG.integers(0, 256, (28, 28, 3), dtype=np.uint8)
    as_uint8 = processor(pixels, return_tensors="pt").pixel_values
    as_float = processor(pixels.astype(np.float32) / 255, return_tensors="pt").pixel_values
    torch.testing.assert_close(as_float, as_uint8, rtol=0, atol=1.5 / 255 / 0.25)


def test_a_calls_own_settings_are_checked_as_a_built_processors():
    processor = _processors()[0]
    with pytest.raises(ValueError, match="do_rescale must be True"):
        processor(GREY, do_rescale=False)
    with pytest.raises(ValueError, match=r"an image of 10x10 is smaller than crop_size 28x28, which would pad it"):
        processor(np.zeros((10, 10, 3), dtype=np.uint8), do_resize=False)


def test_the_harness_takes_images_by_the_same_rules():
    from insub_hf.evaluation.image_data import ImageEvaluationData

    good = dict(train_images=torch.rand(4, 1, 8, 8), train_labels=torch.tensor([0, 1, 0, 1]),
                test_images=torch.rand(2, 1, 8, 8), test_labels=torch.tensor([0, 1]), ood_images={},
                mean=(0.5,), std=(0.25,), num_classes=2)
    ImageEvaluationData(**good)
    with pytest.raises(ValueError, match=r"ImageEvaluationData.test_images must be float images in \[0, 1\], got "
                                         r"values in .* \(0..255 pixels: divide by 255\)"):
        ImageEvaluationData(**{**good, "test_images": good["test_images"] * 255})
    with pytest.raises(ValueError, match=r"ImageEvaluationData.ood_images\['noise'\] must be float images"):
        ImageEvaluationData(**{**good, "ood_images": {"noise": torch.rand(2, 1, 8, 8) * 2 - 1}})
    with pytest.raises(ValueError, match=r"image_std must be finite numbers, got \[inf\]"):
        ImageEvaluationData(**{**good, "std": (float("inf"),)})


def test_the_pipeline_refuses_an_image_past_pils_size_limit_naming_it(tmp_path, monkeypatch):
    from transformers import pipeline

    from insub_hf import InSubImageFeatureExtractionPipeline, InSubModel

    from .conftest import tiny_config

    model = InSubModel(tiny_config(encoder_config=dict(model_type="vit", image_size=28, patch_size=4, hidden_size=32,
                                                       num_hidden_layers=1, num_attention_heads=2,
                                                       intermediate_size=64, num_channels=1))).eval()
    extractor = pipeline("image-feature-extraction", model=model, image_processor=_processors()[0],
                         pipeline_class=InSubImageFeatureExtractionPipeline)
    Image.new("L", (100, 100)).save(tmp_path / "huge.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 2_000)  # 10,000 pixels: past twice the limit, as 400 MP is
    with pytest.raises(ValueError, match=r"image '.*huge\.png' is too large for PIL to open \(Image size \(10000 "
                                         r"pixels\) exceeds .*; downscale it"):
        extractor(str(tmp_path / "huge.png"))


def test_importing_the_package_changes_no_pipeline_of_transformers():
    code = ("from transformers.pipelines import PIPELINE_REGISTRY as r; before = {t: str(r.supported_tasks[t]['impl']) "
            "for t in r.supported_tasks}; import insub_hf, insub_hf.processing.pipelines; print(before == {t: "
            "str(r.supported_tasks[t]['impl']) for t in r.supported_tasks}); insub_hf.register_pipelines(); "
            "print(r.supported_tasks['image-feature-extraction']['impl'].__name__)")
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert printed == ["True", "InSubImageFeatureExtractionPipeline"]


def test_both_backends_crop_the_same_pixels_and_composite_transparency_onto_white():
    from transformers.image_transforms import convert_to_rgb

    from insub_hf import InSubImageProcessorPil
    from insub_hf.processing.image_processing_insub import InSubImageProcessorKwargs

    assert InSubImageProcessor.valid_kwargs is InSubImageProcessorKwargs  # found in the processor's own module
    mean, std = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)
    backends = [cls.for_images(28, 3, mean, std, do_resize=False) for cls in (InSubImageProcessor, InSubImageProcessorPil)]
    noise = Image.fromarray(np.random.default_rng(0).integers(0, 256, (33, 30, 3), dtype=np.uint8))  # odd margin 5
    processed = [p(noise, return_tensors="pt").pixel_values[0] for p in backends]
    # the pixels the evaluation transform's centre crop takes (torchvision rounds the offsets: top round(2.5) = 2,
    # left 1), for both backends to within one grey level
    pixels = torch.from_numpy(np.asarray(noise)).permute(2, 0, 1).float()[:, 2:30, 1:29] / 255
    for values in processed:
        assert ((values * 0.25 + 0.5) - pixels).abs().max() * 255 <= 1.0
    # a transparent pixel reads as white, as transformers' convert_to_rgb composites it; do_convert_rgb=True honoured
    rgba = Image.new("RGBA", (28, 28), (0, 0, 0, 0))
    for processor in backends:
        white = processor(rgba, return_tensors="pt").pixel_values
        torch.testing.assert_close(white, torch.full_like(white, (1 - 0.5) / 0.25))
        grey_alpha = Image.new("LA", (28, 28), (40, 128))
        torch.testing.assert_close(processor(grey_alpha, do_convert_rgb=True, return_tensors="pt").pixel_values,
                                   processor(convert_to_rgb(grey_alpha), return_tensors="pt").pixel_values)


@pytest.mark.parametrize("backend", [0, 1], ids=["torchvision", "pil"])
def test_a_2d_grey_array_is_one_image_and_no_image_or_no_pixels_is_refused_in_one_line(backend):
    processor = _processors()[backend]
    pixels = np.random.default_rng(0).integers(0, 256, (28, 28), dtype=np.uint8)
    as_pil = processor(Image.fromarray(pixels), return_tensors="pt").pixel_values
    for two_d in (pixels, torch.from_numpy(pixels), [pixels, pixels]):  # (H, W): one grey image, as the PIL one
        got = processor(two_d, return_tensors="pt").pixel_values
        torch.testing.assert_close(got, as_pil.expand(got.shape[0], -1, -1, -1), rtol=0, atol=0)
    for images, message in (([], "got no images; give an image"),
                            (Image.new("L", (0, 0)), r"image 0 has no pixels \(shape \(0, 0\)\)"),
                            ([pixels, np.zeros((0, 28), np.uint8)], r"image 1 has no pixels \(shape \(0, 28\)\)")):
        with pytest.raises(ValueError, match=f"InSubImageProcessor: {message}"):
            processor(images, return_tensors="pt")

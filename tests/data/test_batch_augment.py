"""The batched augmentations against independent references: torchvision's functional transforms and `colorsys`,
and the operation count that must not grow with the batch."""

import colorsys
import math

import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torchvision.transforms import RandomResizedCrop
from torchvision.transforms.v2 import functional as TF

from insub_hf.data import BatchTwoViews
from insub_hf.data.batch_augment import (
    colour_jitter, crop_boxes, gaussian_blur, random_solarize, resized_crops, shift_hue, _rgb_to_hsv,
)

from ..test_step_cost import CountOps


def test_crop_boxes_fit_the_image_and_follow_the_scale_range():
    torch.manual_seed(0)
    images = torch.rand(4000, 1, 28, 28)
    top, left, h, w = crop_boxes(images, (0.2, 1.0)).unbind(1)
    assert (top >= 0).all() and (left >= 0).all() and (top + h <= 28).all() and (left + w <= 28).all()
    area = h * w / 28**2
    assert area.min() >= 0.2 - 0.05 and area.max() <= 1.0
    ratio = w / h
    assert ratio.min() >= 3 / 4 - 0.1 and ratio.max() <= 4 / 3 + 0.1
    # torchvision's get_params on the same geometry: the same mean area and mean width to a sampling tolerance
    torch.manual_seed(1)
    reference = torch.tensor([RandomResizedCrop.get_params(images[0], (0.2, 1.0), (3 / 4, 4 / 3)) for _ in range(4000)],
                             dtype=torch.float)
    ref_area = reference[:, 2] * reference[:, 3] / 28**2
    assert abs(float(area.mean() - ref_area.mean())) < 4 * math.sqrt(2 * float(area.var()) / 4000)
    assert abs(float(w.mean() - reference[:, 3].mean())) < 4 * math.sqrt(2 * float(w.var()) / 4000)


def test_a_box_that_never_fits_falls_back_to_the_centre_crop_of_the_ratio():
    # a 4 x 40 strip: no box of area >= 0.9 with aspect 3/4..4/3 fits, so torchvision's fallback (h = 4, w = 5)
    top, left, h, w = crop_boxes(torch.rand(3, 1, 4, 40), (0.9, 1.0)).unbind(1)
    assert h.tolist() == [4.0] * 3 and w.tolist() == [5.0] * 3
    assert top.tolist() == [0.0] * 3 and left.tolist() == [17.0] * 3


def test_resized_crops_sample_what_interpolate_and_slicing_give():
    images = torch.rand(3, 3, 12, 12)
    whole = torch.tensor([[0.0, 0.0, 12.0, 12.0]] * 3)
    torch.testing.assert_close(resized_crops(images, whole, 20),
                               F.interpolate(images, size=20, mode="bilinear", align_corners=False))
    box = torch.tensor([[2.0, 3.0, 8.0, 8.0], [0.0, 4.0, 8.0, 8.0], [4.0, 0.0, 8.0, 8.0]])
    out = resized_crops(images, box, 8, flip=torch.tensor([False, True, False]))
    torch.testing.assert_close(out[0], images[0, :, 2:10, 3:11])
    torch.testing.assert_close(out[1], images[1, :, 0:8, 4:12].flip(-1))
    torch.testing.assert_close(out[2], images[2, :, 4:12, 0:8])


def test_hue_follows_colorsys():
    pixels = torch.rand(1, 3, 5, 7)
    hsv = _rgb_to_hsv(pixels)
    for y in range(5):
        for x in range(7):
            expected = colorsys.rgb_to_hsv(*pixels[0, :, y, x].tolist())
            torch.testing.assert_close(hsv[0, :, y, x], torch.tensor(expected, dtype=torch.float), atol=1e-5, rtol=0)
    shift = torch.tensor([0.1]).view(1, 1, 1, 1)
    torch.testing.assert_close(shift_hue(pixels, shift), TF.adjust_hue(pixels, 0.1), atol=1e-5, rtol=0)
    torch.testing.assert_close(shift_hue(pixels, torch.zeros(1, 1, 1, 1)), pixels, atol=1e-5, rtol=0)


def test_each_jitter_part_is_torchvisions_at_the_drawn_factor():
    # one part at a time (the others at their identity range): the factor drawn per image is recovered and the image
    # is what torchvision's adjust_* gives at that factor
    images = torch.rand(6, 3, 9, 9)
    torch.manual_seed(0)
    bright = colour_jitter(images, 0.4, 0.0, 0.0, 0.0, p=1.0)
    for i in range(6):
        factor = float((bright[i] / images[i]).median())
        assert 0.6 - 1e-4 <= factor <= 1.4 + 1e-4
        torch.testing.assert_close(bright[i], TF.adjust_brightness(images[i], factor), atol=1e-4, rtol=0)
    torch.manual_seed(0)
    applied = colour_jitter(images, 0.4, 0.4, 0.4, 0.1, p=0.0)
    assert torch.equal(applied, images)


def test_blur_and_solarize_match_torchvision():
    images = torch.rand(4, 3, 16, 16)
    torch.testing.assert_close(gaussian_blur(images, 5, (1.3, 1.3), p=1.0),
                               TF.gaussian_blur(images, [5, 5], [1.3, 1.3]), atol=1e-5, rtol=0)
    torch.testing.assert_close(random_solarize(images, 0.5, p=1.0), TF.solarize(images, 0.5))


@pytest.mark.parametrize("channels", [1, 3])
def test_the_views_run_the_same_operations_at_any_batch_size(channels):
    views = BatchTwoViews(32, (0.5,) * channels, (0.2,) * channels, num_channels=channels)
    views(torch.rand(2, channels, 32, 32))  # the one range check
    counts = {}
    for batch in (32, 256):
        with CountOps() as counter:
            views(torch.rand(batch, channels, 32, 32))
        counts[batch] = counter.ops
    assert counts[32] == counts[256]
    assert counts[32]["aten._local_scalar_dense"] == 0 and counts[32]["aten.grid_sampler_2d"] == 1  # both views in one warp


def test_dino_multi_crop_views_follow_the_per_sample_crops_and_train_dino(tmp_path):
    from transformers import set_seed

    from insub_hf import InSubConfig, InSubForPreTraining
    from insub_hf.data import IMAGE_DATASET_PRESETS, BatchMultiCropViews, DeviceImages, MultiCropViews, load_fashion_mnist
    from insub_hf.encoders.presets import named_encoder
    from insub_hf.training.trainer import InSubTrainer, InSubTrainingArguments

    from ..test_fast_path import _z_scores

    preset = IMAGE_DATASET_PRESETS["fashion_mnist"]
    rows = load_fashion_mnist("bundled", 60, 10)["train"]  # 600 real images
    images, _ = preset.to_tensors(rows)
    mean, std = preset.normalization()
    set_seed(0)
    per_sample = rows.with_transform(MultiCropViews(preset.multicrop(), 2, preset.image_column))
    slow = [per_sample[i] for i in range(len(per_sample))]
    set_seed(0)
    fast = BatchMultiCropViews(28, mean, std, num_channels=1, num_local_crops=2)(images)
    assert fast["pixel_values"].shape == (600, 1, 28, 28) and fast["local_pixel_values"].shape == (600, 2, 1, 12, 12)
    for name in ("pixel_values", "pixel_values_2"):
        z = _z_scores(fast[name], torch.stack([row[name] for row in slow]))
        assert all(abs(v) < 4 for v in z.values()), (name, z)
    local = torch.stack([row["local_pixel_values"] for row in slow]).flatten(0, 1)
    # the local crops (12 x 12) upsampled to the six-statistic test's 28 x 28 geometry
    z = _z_scores(*(F.interpolate(x, size=28, mode="nearest") for x in (fast["local_pixel_values"].flatten(0, 1), local)))
    assert all(abs(v) < 4 for v in z.values()), z
    # the same operations at any batch size, and DINO trains on them
    views = BatchMultiCropViews(28, mean, std, num_channels=1, num_local_crops=2)
    views(images[:2])
    counts = []
    for batch in (8, 64):
        with CountOps() as counter:
            views(images[:batch])
        counts.append(counter.ops)
    assert counts[0] == counts[1] and counts[0]["aten._local_scalar_dense"] == 0
    config = InSubConfig(encoder_config=named_encoder("resnet10_cifar", 28, 1, 0.125), num_heads=2,
                         head_hidden_sizes=[16], head_output_size=8, objective="dino", objective_config={"out_dim": 32})
    args = InSubTrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=8, max_steps=2, report_to=[],
                                  save_strategy="no", logging_steps=1, use_cpu=True, data_on_device=True)
    trainer = InSubTrainer(model=InSubForPreTraining(config), args=args, train_dataset=DeviceImages(images[:16]),
                           batch_views=views)
    trainer.train()
    assert all("loss" in h for h in trainer.state.log_history[:2])


@pytest.mark.slow
def test_three_channel_views_follow_the_per_sample_views_distribution():
    # colour images from the bundled Fashion-MNIST (each tinted by its own random colour), so that hue, saturation and
    # grey have something to move: the batched views against torchvision's per-sample ones, per channel too
    from datasets import Dataset
    from transformers import set_seed

    from insub_hf.data import IMAGE_DATASET_PRESETS, ImageViews, load_fashion_mnist
    from insub_hf.data.image_views import simclr_augmentation

    from ..test_fast_path import _z_scores

    preset = IMAGE_DATASET_PRESETS["fashion_mnist"]
    grey, _ = preset.to_tensors(load_fashion_mnist("bundled", 100, 10)["train"])  # (1000, 1, 28, 28)
    tint = torch.rand(len(grey), 3, 1, 1, generator=torch.Generator().manual_seed(0))
    images = (grey * tint + (1 - grey) * tint.flip(1) * 0.5).clamp(0, 1)
    pixels = (images * 255).round().byte().permute(0, 2, 3, 1).numpy()
    rows = Dataset.from_dict({"image": [Image.fromarray(p) for p in pixels]})
    mean, std = (0.5, 0.4, 0.3), (0.25, 0.25, 0.25)
    set_seed(0)
    per_sample = rows.with_transform(ImageViews(simclr_augmentation(28, mean, std, num_channels=3), "image"))
    slow = torch.stack([v for i in range(len(per_sample)) for v in
                        (per_sample[i]["pixel_values"], per_sample[i]["pixel_values_2"])])
    set_seed(0)
    same_pixels = torch.from_numpy(pixels).permute(0, 3, 1, 2).float() / 255  # what the PIL images hold
    fast = torch.cat(BatchTwoViews(28, mean, std, num_channels=3)(same_pixels))
    assert fast.shape == slow.shape == (2000, 3, 28, 28)
    z = _z_scores(fast, slow)
    for channel in range(3):  # each channel's brightness and contrast: what the hue, saturation and grey steps move
        z.update({f"c{channel}_{k}": v for k, v in _z_scores(fast[:, channel:channel + 1], slow[:, channel:channel + 1]).items()
                  if k in ("mean", "std")})
    assert all(abs(v) < 4 for v in z.values()), z

import numpy as np
import pytest
import torch
from datasets import ClassLabel, Dataset, Features, Image
from PIL import Image as PILImage

from insub_hf.data import (
    IMAGE_STATS, ImageViews, ImageWithLabel, check_dataset, eval_image_transform, load_fashion_mnist,
    load_image_dataset, simclr_augmentation,
)

CIFAR = IMAGE_STATS["cifar10"]


def rgb_images(n, size=32, seed=0):
    rng = np.random.default_rng(seed)
    return [PILImage.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)) for _ in range(n)]


def test_bundled_fashion_mnist_is_real_and_class_balanced():
    data = load_fashion_mnist("bundled")
    assert (len(data["train"]), len(data["test"])) == (5000, 1000)
    assert np.bincount(data["train"]["label"]).tolist() == [500] * 10
    image = data["train"][0]["image"]
    assert image.size == (28, 28) and image.mode == "L"
    pixels = np.asarray(image)
    assert pixels.max() > 100 and (pixels == 0).mean() > 0.2  # a garment on a black background, not noise
    small = load_fashion_mnist("bundled", train_per_class=3, test_per_class=2, seed=1)
    assert np.bincount(small["train"]["label"]).tolist() == [3] * 10 and len(small["test"]) == 20
    with pytest.raises(ValueError, match=r"source must be one of \['auto', 'bundled', 'debian'\], got 'web'"):
        load_fashion_mnist("web")


def test_simclr_views_are_independent_augmentations():
    ds = Dataset.from_dict({"image": rgb_images(4)}, features=Features({"image": Image()}))
    views = ds.with_transform(ImageViews(simclr_augmentation(32, *CIFAR), "image"))[:4]
    assert sorted(views) == ["pixel_values", "pixel_values_2"]
    a, b = torch.stack(views["pixel_values"]), torch.stack(views["pixel_values_2"])
    assert a.shape == b.shape == (4, 3, 32, 32) and a.dtype == torch.float32
    assert not torch.allclose(a, b)
    assert not torch.allclose(a[0], a[1])


def test_eval_transform_is_deterministic_and_normalised():
    image = rgb_images(1)[0]
    transform = eval_image_transform(32, *CIFAR)
    x = transform(image)
    torch.testing.assert_close(x, transform(image))
    raw = torch.from_numpy(np.array(image)).permute(2, 0, 1).float() / 255
    expected = (raw - torch.tensor(CIFAR[0])[:, None, None]) / torch.tensor(CIFAR[1])[:, None, None]
    torch.testing.assert_close(x, expected)
    row = ImageWithLabel(transform, "image", "label")({"image": [image], "label": [3]})
    assert row["labels"] == [3]


def test_grey_images_for_a_colour_model_get_a_clear_error():
    grey = PILImage.fromarray(np.zeros((32, 32), dtype=np.uint8), mode="L")
    with pytest.raises(ValueError, match="column 'img' holds 1-channel images but num_channels=3"):
        simclr_augmentation(32, *CIFAR, num_channels=3, column="img")(grey)


def cifar_like(tmp_path, n=6):
    features = Features({"img": Image(), "label": ClassLabel(names=[str(i) for i in range(10)])})
    ds = Dataset.from_dict({"img": rgb_images(n), "label": [i % 10 for i in range(n)]}, features=features)
    folder = tmp_path / "cifar10_local"
    folder.mkdir()
    ds.to_parquet(str(folder / "train.parquet"))
    ds.select(range(2)).to_parquet(str(folder / "test.parquet"))
    return folder


def test_load_dataset_path_reads_a_local_copy_in_cifar10_format(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = cifar_like(tmp_path)
    data = load_image_dataset(str(folder), preset="cifar10")
    assert sorted(data) == ["test", "train"] and len(data["train"]) == 6
    train = load_image_dataset(str(folder), split="train", preset="cifar10", label_column="label")
    views = train.with_transform(ImageViews(simclr_augmentation(32, *CIFAR), "img"))[:2]
    assert views["pixel_values"][0].shape == (3, 32, 32)


def test_missing_columns_and_empty_data_sets_are_refused(tmp_path):
    folder = cifar_like(tmp_path)
    with pytest.raises(ValueError, match=r"has no column 'image' \(image_column\); its columns are \['img', 'label'\]"):
        load_image_dataset(str(folder), split="train", image_column="image")
    with pytest.raises(ValueError, match="preset must be one of"):
        load_image_dataset(str(folder), preset="imagenet21k")
    empty = Dataset.from_dict({"image": []})
    with pytest.raises(ValueError, match=r"dataset is empty \(0 rows\)"):
        check_dataset(empty, "image", "image_column")


@pytest.mark.parametrize("batch_views", ["false", "true"])
def test_pretraining_example_runs_on_a_local_cifar10_copy(tmp_path, batch_views):
    import subprocess
    import sys
    from pathlib import Path

    folder = cifar_like(tmp_path, n=48)  # 24 in the bank, 24 to calibrate against (at least 20)
    script = Path(__file__).resolve().parents[2] / "examples" / "pretrain_simclr.py"
    out = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, str(script), "--dataset", str(folder), "--preset", "cifar10", "--output_dir", str(out),
         "--max_steps", "1", "--per_device_train_batch_size", "4", "--num_heads", "2", "--use_cpu", "true",
         "--disable_tqdm", "true", "--batch_views", batch_views],
        capture_output=True, text=True, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"}, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (out / "model" / "model.safetensors").exists()
    block = __import__("json").loads((out / "model" / "config.json").read_text())["uncertainty"]
    assert block["reading"] == "calibrated" and block["bank_size"] == 24 and block["calibration_size"][1] == 24

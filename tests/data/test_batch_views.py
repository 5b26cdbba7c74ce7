import pytest
import torch
from datasets import Dataset
from transformers import set_seed

from insub_hf.data import BatchTwoViews, image_tensor_dataset
from insub_hf.data.batch_augment import crop_boxes
from insub_hf.training.trainer import InSubTrainer, InSubTrainingArguments
from insub_hf import InSubForPreTraining

from ..conftest import tiny_config

MEAN, STD = (0.5, 0.4, 0.3), (0.2, 0.2, 0.2)


def test_two_views_differ_have_the_shape_and_are_normalised():
    views = BatchTwoViews(16, MEAN, STD, num_channels=3)
    images = torch.rand(8, 3, 20, 20)
    first, second = views(images)
    assert first.shape == second.shape == (8, 3, 16, 16)
    assert not torch.allclose(first, second)
    # normalised: pixels in [0, 1] land in [(0 - mean) / std, (1 - mean) / std] per channel
    low = ((0 - torch.tensor(MEAN)) / torch.tensor(STD)).view(1, 3, 1, 1)
    high = ((1 - torch.tensor(MEAN)) / torch.tensor(STD)).view(1, 3, 1, 1)
    assert ((first >= low - 1e-4) & (first <= high + 1e-4)).all()


def test_a_seed_reproduces_the_views():
    views = BatchTwoViews(28, (0.3,), (0.35,), num_channels=1)
    images = torch.rand(6, 1, 28, 28)
    set_seed(3)
    a = views(images)
    set_seed(3)
    b = views(images)
    set_seed(4)
    c = views(images)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_random_parameters_are_drawn_per_sample():
    # the same image repeated: identical outputs would mean one set of parameters for the whole batch
    views = BatchTwoViews(28, (0.3,), (0.35,), num_channels=1)
    image = torch.rand(1, 1, 28, 28)
    first, _ = views(image.repeat(16, 1, 1, 1))
    distinct = {tuple(row.flatten()[:50].tolist()) for row in first.round(decimals=4)}
    assert len(distinct) >= 12
    set_seed(0)
    boxes = crop_boxes(image.repeat(16, 1, 1, 1), (0.2, 1.0))  # (top, left, height, width) of each sample
    assert boxes.shape == (16, 4) and len({tuple(b.tolist()) for b in boxes}) == 16


def test_bad_inputs_name_what_is_expected():
    with pytest.raises(ValueError, match="BatchTwoViews.num_channels must be one of"):
        BatchTwoViews(16, MEAN, STD, num_channels=2)
    with pytest.raises(ValueError, match="one value per channel"):
        BatchTwoViews(16, (0.5,), (0.2,), num_channels=3)
    with pytest.raises(ValueError, match=r"shape \(batch, 3, height, width\)"):
        BatchTwoViews(16, MEAN, STD)(torch.rand(2, 1, 16, 16))


@pytest.mark.parametrize(
    "images, message",
    [
        ((torch.rand(8, 3, 32, 32) * 255).to(torch.uint8), r"got dtype torch.uint8 \(uint8 pixels: divide by 255\)"),
        (torch.rand(8, 3, 32, 32) * 255, r"got values in \[.*\] \(0..255 pixels: divide by 255\)"),
        (torch.rand(8, 3, 32, 32) * 2 - 1, r"got values in \[-.*\] \(normalised images: pass them before normalisation\)"),
    ],
)
def test_batched_views_refuse_images_outside_the_unit_range_before_training(tmp_path, images, message):
    # the per-sample path reads PIL images; the batched path must check the documented [0, 1] floats itself
    with pytest.raises(ValueError, match="image_tensor_dataset: images must be float images in \\[0, 1\\], " + message):
        image_tensor_dataset(images)
    rows = Dataset.from_dict({"pixel_values": images.numpy()}).with_format("torch")  # built by hand, unchecked
    model = InSubForPreTraining(tiny_config())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    args = InSubTrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=1, report_to=[])
    with pytest.raises(ValueError, match="InSubTrainer with batch_views: the training rows' pixel_values must be "):
        InSubTrainer(model=model, args=args, train_dataset=rows, batch_views=BatchTwoViews(32, MEAN, STD))
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items()) and not any(tmp_path.iterdir())
    if not images.is_floating_point():  # the views themselves refuse integer pixels (no device sync needed)
        with pytest.raises(ValueError, match="BatchTwoViews takes float images in \\[0, 1\\], got dtype torch.uint8"):
            BatchTwoViews(32, MEAN, STD)(images)


def test_image_tensor_dataset_round_trip():
    images = torch.rand(5, 1, 6, 6)
    data = image_tensor_dataset(images)
    assert len(data) == 5 and torch.equal(data[2]["pixel_values"], images[2])
    assert torch.equal(data[:3]["pixel_values"], images[:3])


def test_trainer_makes_the_views_per_batch(tmp_path):
    model = InSubForPreTraining(tiny_config())
    args = InSubTrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=2,
                                  report_to=[], save_strategy="no", logging_steps=1)
    views = BatchTwoViews(32, MEAN, STD)
    trainer = InSubTrainer(model=model, args=args, train_dataset=image_tensor_dataset(torch.rand(8, 3, 32, 32)),
                           batch_views=views)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer.train()
    assert any(not torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert all("ssl_loss" in h for h in trainer.state.log_history[:2])
    with pytest.raises(ValueError, match="already holds `pixel_values_2`"):
        trainer.compute_loss(model.train(), {"pixel_values": torch.rand(4, 3, 32, 32),
                                             "pixel_values_2": torch.rand(4, 3, 32, 32)})

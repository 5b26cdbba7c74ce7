"""The GPU fast path, checked on CPU: torch.compile gives the eager loss and gradients without graph breaks, bf16
autocast keeps the losses finite and close, and the batched views follow the per-sample views' distribution."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo as dynamo
from transformers import set_seed

from insub_hf import InSubConfig, InSubForPreTraining
from insub_hf.encoders.presets import named_encoder
from insub_hf.data import IMAGE_DATASET_PRESETS, BatchTwoViews, ImageViews, image_tensor_dataset, load_fashion_mnist
from insub_hf.data.image_views import simclr_augmentation
from insub_hf.training.trainer import InSubTrainer, InSubTrainingArguments, fast_path_arguments

from .conftest import TINY_VIT


def resnet_config(**overrides) -> InSubConfig:
    kwargs = dict(encoder_config=named_encoder("resnet10_cifar", 32, 3, 0.125), num_heads=3, head_hidden_sizes=[32],
                  head_output_size=16)
    return InSubConfig(**{**kwargs, **overrides})


BERT = dict(model_type="bert", vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=64)
CASES = {
    "simclr_resnet": (resnet_config, {}),
    "simclr_vit": (lambda: InSubConfig(encoder_config=dict(TINY_VIT), num_heads=3, head_hidden_sizes=[48],
                                       head_output_size=16), {}),
    "dino_resnet": (lambda: resnet_config(objective="dino", objective_config={"out_dim": 64}),
                    {"local_pixel_values": torch.randn(4, 2, 3, 16, 16)}),
    "byol_resnet": (lambda: resnet_config(objective="byol", objective_config={"predictor_hidden_size": 32}), {}),
    "vicreg_resnet": (lambda: resnet_config(objective="vicreg"), {}),
    "barlow_twins_resnet": (lambda: resnet_config(objective="barlow_twins"), {}),
    "scd_bert": (lambda: InSubConfig(encoder_config=BERT, objective="scd", num_heads=3, head_hidden_sizes=[24],
                                     head_output_size=24, normalize_heads=False, pooling="mean"), None),
}


def batch_of(name: str) -> dict[str, torch.Tensor]:
    make, extra = CASES[name]
    if extra is None:
        return {"input_ids": torch.randint(0, 1000, (4, 12)), "attention_mask": torch.ones(4, 12, dtype=torch.long)}
    return {"pixel_values": torch.randn(4, 3, 32, 32), "pixel_values_2": torch.randn(4, 3, 32, 32), **extra}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_training_forward_is_one_graph(name):
    # heads, losses, input checks and the DINO multi-crop path all trace without a break
    model = InSubForPreTraining(CASES[name][0]()).train()
    explained = dynamo.explain(model)(**batch_of(name))
    assert explained.graph_break_count == 0, [b.reason for b in explained.break_reasons]
    assert explained.graph_count == 1


@pytest.mark.slow
def test_compiled_model_gives_the_eager_loss_and_gradients():
    set_seed(0)
    model = InSubForPreTraining(resnet_config()).train()
    batch = batch_of("simclr_resnet")
    state = {k: v.clone() for k, v in model.state_dict().items()}
    eager = model(**batch)
    eager.loss.backward()
    eager_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    model.load_state_dict(state)  # the eager pass moved the BatchNorm statistics
    compiled = torch.compile(model)(**batch)  # inductor, as Trainer(torch_compile=True) uses
    compiled.loss.backward()
    torch.testing.assert_close(compiled.loss, eager.loss, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(compiled.diversity_loss, eager.diversity_loss, atol=1e-5, rtol=1e-5)
    for name, parameter in model.named_parameters():
        torch.testing.assert_close(parameter.grad, eager_grads[name], atol=1e-4, rtol=1e-3, msg=name)


def _train(tmp_path, config: InSubConfig, compile_backend: str | None, steps: int = 3, **extra_args):
    set_seed(0)
    model = InSubForPreTraining(config)
    args = InSubTrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=steps, report_to=[], save_strategy="no",
        logging_steps=1, learning_rate=1e-2, torch_compile=compile_backend is not None,
        torch_compile_backend=compile_backend, **extra_args,
    )
    views = BatchTwoViews(32, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
    trainer = InSubTrainer(model=model, args=args, train_dataset=image_tensor_dataset(torch.rand(12, 3, 32, 32)),
                           batch_views=views)
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return losses, model


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["simclr", "dino", "byol"])
def test_trainer_with_torch_compile_trains_like_eager(tmp_path, objective):
    # the whole Trainer path: batch views, channels_last, the compiled forward, and DINO's teacher and centre updates
    # (ObjectiveStepCallback through the compiled wrapper); aot_eager traces like inductor without its C++ build
    options = {"dino": {"out_dim": 64}, "byol": {"predictor_hidden_size": 32}}.get(objective, {})
    config = resnet_config(objective=objective, objective_config=options)
    eager_losses, eager = _train(tmp_path / "eager", config, None)
    compiled_losses, compiled = _train(tmp_path / "compiled", config, "aot_eager")
    assert len(eager_losses) == 3
    torch.testing.assert_close(torch.tensor(compiled_losses), torch.tensor(eager_losses), atol=1e-4, rtol=1e-4)
    for key, value in eager.state_dict().items():  # the teacher and its centre included
        torch.testing.assert_close(compiled.state_dict()[key], value, atol=1e-4, rtol=1e-4, msg=key)
    if objective == "dino":
        assert any(k.startswith("objective.teacher") for k in eager.state_dict())


@pytest.mark.parametrize("scale", [1e30, 1e37])
def test_compiled_and_eager_training_refuse_unnormalised_inputs_alike(tmp_path, scale):
    # such inputs give the compiled forward a finite loss where eager overflows; both refuse the batch with the
    # same message at the next check (a logging step, a save or the end of training).
    model = InSubForPreTraining(resnet_config())
    args = InSubTrainingArguments(output_dir=str(tmp_path), report_to=[], torch_compile=True,
                                  torch_compile_backend="aot_eager")
    trainer = InSubTrainer(model=model, args=args)
    batch = batch_of("simclr_resnet")
    batch["pixel_values"] = batch["pixel_values"] * scale
    messages = []
    for forward in (torch.compile(model, backend="aot_eager").train(), model.train()):
        trainer.compute_loss(forward, batch)
        with pytest.raises(FloatingPointError, match=r"pixel_values max \|x\| = .*e\+3\d.*must be normalised") as info:
            trainer.check_pending_batches()
        messages.append(str(info.value).split(" for inputs ")[1])
    assert messages[0] == messages[1]


def test_bf16_autocast_keeps_the_loss_finite_and_close_to_float32():
    set_seed(0)
    model = InSubForPreTraining(resnet_config()).train()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    batch = batch_of("simclr_resnet")
    full = model(**batch)
    model.load_state_dict(state)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = model(**batch)
    assert torch.isfinite(mixed.loss)
    assert mixed.head_embeddings.dtype == torch.float32  # the losses read float32 embeddings
    # bf16 keeps ~3 significant digits in the encoder; the losses themselves run in float32
    torch.testing.assert_close(mixed.ssl_loss, full.ssl_loss, atol=0, rtol=2e-2)
    torch.testing.assert_close(mixed.diversity_loss, full.diversity_loss, atol=0.05, rtol=5e-2)
    mixed.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_trainer_trains_in_bf16_with_finite_losses(tmp_path):
    losses, _ = _train(tmp_path, resnet_config(), None, bf16=True)  # on CPU with use_cpu, which transformers asks
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))


def test_fast_path_defaults_follow_the_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert fast_path_arguments() == dict(bf16=False, torch_compile=False, dataloader_num_workers=0,
                                         dataloader_pin_memory=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert fast_path_arguments() == dict(bf16=True, torch_compile=False, dataloader_num_workers=8,
                                         dataloader_pin_memory=True)
    # InSubTrainingArguments takes these defaults, and keeps what is given
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    chosen = InSubTrainingArguments(output_dir="unused", report_to=[])
    assert (chosen.bf16, chosen.dataloader_num_workers) == (False, 0)
    given = InSubTrainingArguments(output_dir="unused", report_to=[], bf16=True, dataloader_num_workers=3)
    assert (given.bf16, given.dataloader_num_workers, given.use_cpu) == (True, 3, True)
    assert fast_path_arguments(bf16=False, torch_compile=True, dataloader_num_workers=2)["bf16"] is False
    assert fast_path_arguments(dataloader_num_workers=2)["dataloader_num_workers"] == 2


def _view_statistics(views: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-view statistics `(N,)` that the augmentation's parts move: brightness and contrast (mean, std), the crop
    scale (mean absolute gradient: a smaller crop is upscaled more, so smoother), flips (left-right difference) and
    what the crop brings into a corner."""
    return {
        "mean": views.mean(dim=(1, 2, 3)),
        "std": views.std(dim=(1, 2, 3)),
        "gradient_x": (views[..., 1:] - views[..., :-1]).abs().mean(dim=(1, 2, 3)),
        "gradient_y": (views[..., 1:, :] - views[..., :-1, :]).abs().mean(dim=(1, 2, 3)),
        "left_minus_right": (views[..., :14] - views[..., 14:].flip(-1)).mean(dim=(1, 2, 3)),
        "corner": views[..., :4, :4].mean(dim=(1, 2, 3)),
    }


def _z_scores(a: torch.Tensor, b: torch.Tensor) -> dict[str, float]:
    """Two-sample z of each statistic's mean."""
    sa, sb = _view_statistics(a), _view_statistics(b)
    return {k: float((sa[k].mean() - sb[k].mean()) / (sa[k].var() / len(sa[k]) + sb[k].var() / len(sb[k])).sqrt())
            for k in sa}


@pytest.mark.slow
def test_batched_views_follow_the_per_sample_views_distribution():
    preset = IMAGE_DATASET_PRESETS["fashion_mnist"]
    rows = load_fashion_mnist("bundled", 100, 10)["train"]  # 1,000 real images
    images, _ = preset.to_tensors(rows)
    mean, std = preset.normalization()
    set_seed(0)
    per_sample = rows.with_transform(ImageViews(
        simclr_augmentation(preset.image_size, mean, std, num_channels=1, column=preset.image_column),
        preset.image_column,
    ))
    slow = torch.stack([v for i in range(len(per_sample)) for v in
                        (per_sample[i]["pixel_values"], per_sample[i]["pixel_values_2"])])
    set_seed(0)
    fast = torch.cat(BatchTwoViews(preset.image_size, mean, std, num_channels=1, crop_scale=(0.2, 1.0))(images))
    assert fast.shape == slow.shape == (2000, 1, 28, 28)
    z = _z_scores(fast, slow)
    assert all(abs(v) < 4 for v in z.values()), z
    # the statistics do tell augmentations apart: larger crops only (scale 0.8-1) change the gradient statistics
    set_seed(0)
    other = torch.cat(BatchTwoViews(preset.image_size, mean, std, num_channels=1, crop_scale=(0.8, 1.0))(images))
    assert max(abs(v) for v in _z_scores(other, slow).values()) > 6


def test_data_on_device_trains_like_the_loader(tmp_path):
    # the same sampler draws the same rows and the views are seeded per step, so keeping the set on the device (one
    # gather per batch, no collation) trains the very weights the data loader path trains
    config = resnet_config()
    plain_losses, plain = _train(tmp_path / "loader", config, None)
    device_losses, on_device = _train(tmp_path / "device", config, None, data_on_device=True)
    assert len(plain_losses) == 3
    torch.testing.assert_close(torch.tensor(device_losses), torch.tensor(plain_losses), atol=1e-6, rtol=1e-6)
    for key, value in plain.state_dict().items():
        torch.testing.assert_close(on_device.state_dict()[key], value, atol=1e-6, rtol=1e-6, msg=key)


def test_device_images_gather_batches_in_unit_range():
    from insub_hf.data import DeviceImages, collate_device_batch

    pixels = torch.randint(0, 256, (5, 1, 4, 4), dtype=torch.uint8)
    images = DeviceImages(pixels)
    batch = collate_device_batch(images.__getitems__([3, 0, 3]))
    assert batch["pixel_values"].dtype == torch.float32
    torch.testing.assert_close(batch["pixel_values"], pixels[[3, 0, 3]].float() / 255)
    torch.testing.assert_close(images[1]["pixel_values"], pixels[1].float() / 255)
    rows = image_tensor_dataset(pixels.float() / 255)
    torch.testing.assert_close(DeviceImages.from_rows(rows, "cpu").images, pixels.float() / 255)
    with pytest.raises(ValueError, match=r"DeviceImages takes uint8 \(0..255\) or float images"):
        DeviceImages(pixels.long())


def test_data_on_device_refuses_what_it_cannot_keep(tmp_path):
    with pytest.raises(ValueError, match="dataloader_num_workers=2 with data_on_device=True"):
        InSubTrainingArguments(output_dir=str(tmp_path), data_on_device=True, dataloader_num_workers=2, report_to=[])
    args = InSubTrainingArguments(output_dir=str(tmp_path), data_on_device=True, report_to=[], max_steps=1)
    assert (args.dataloader_num_workers, args.dataloader_pin_memory) == (0, False)
    with pytest.raises(ValueError, match="needs InSubTrainer\\(batch_views=...\\)"):
        InSubTrainer(model=InSubForPreTraining(resnet_config()), args=args,
                     train_dataset=image_tensor_dataset(torch.rand(8, 3, 32, 32)))

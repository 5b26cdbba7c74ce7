import pickle
import shutil
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from transformers import TrainerCallback

import insub_hf.training.trainer
from insub_hf import InSubConfig, InSubForPreTraining, named_encoder
from insub_hf.checkpointing import last_complete_checkpoint
from insub_hf.training.memory_format import channels_last_hazard
from insub_hf.training.trainer import InSubTrainer, InSubTrainingArguments

from .conftest import tiny_config


def fixed_views(n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    data = {"pixel_values": torch.randn(n, 3, 32, 32, generator=g), "pixel_values_2": torch.randn(n, 3, 32, 32, generator=g)}
    return Dataset.from_dict({k: v.numpy() for k, v in data.items()}).with_format("torch"), data


def args(tmp_path, **overrides):
    kwargs = dict(
        output_dir=str(tmp_path), per_device_train_batch_size=4, learning_rate=0.1, optim="sgd", weight_decay=0.0,
        lr_scheduler_type="constant", max_grad_norm=0.0, logging_steps=1, save_strategy="no", use_cpu=True,
        train_sampling_strategy="sequential", disable_tqdm=True, seed=0,
    )
    kwargs.update(overrides)
    return InSubTrainingArguments(**kwargs)


def test_training_steps_change_parameters_and_log_side_metrics(tmp_path):
    model = InSubForPreTraining(tiny_config(num_heads=3))
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    dataset, _ = fixed_views()
    trainer = InSubTrainer(model=model, args=args(tmp_path, max_steps=2), train_dataset=dataset)
    trainer.train()
    assert all(not torch.equal(v, before[k]) for k, v in model.named_parameters() if "heads" in k)
    logs = [row for row in trainer.state.log_history if "loss" in row]
    assert len(logs) == 2
    for row in logs:
        assert {"ssl_loss", "diversity_loss", "mean_sigma"} <= set(row)
        assert abs(row["loss"] - (row["ssl_loss"] + model.config.diversity_weight * row["diversity_loss"])) < 1e-3


def test_gradient_accumulation_follows_the_mean_of_micro_batch_gradients(tmp_path):
    config = tiny_config(num_heads=3, head_norm="none")  # no BN: each micro-batch loss is fixed by its samples
    model = InSubForPreTraining(config)
    reference = InSubForPreTraining(config)
    reference.load_state_dict(model.state_dict())
    dataset, data = fixed_views(8)
    trainer = InSubTrainer(
        model=model, args=args(tmp_path, max_steps=1, gradient_accumulation_steps=2), train_dataset=dataset
    )
    trainer.train()

    losses = []
    for part in (slice(0, 4), slice(4, 8)):
        loss = reference(data["pixel_values"][part], data["pixel_values_2"][part]).loss / 2
        loss.backward()
        losses.append(loss.item())
    with torch.no_grad():
        for p in reference.parameters():
            if p.grad is not None:
                p -= 0.1 * p.grad
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5, msg=name)
    logged = [row["loss"] for row in trainer.state.log_history if "loss" in row][0]
    assert abs(logged - sum(losses)) < 1e-3  # the logged loss is the mean over the accumulated micro-batches


@pytest.mark.skipif(channels_last_hazard() is not None, reason=f"channels_last is refused here: {channels_last_hazard()}")
def test_channels_last_trains_a_conv_encoder_like_the_default_layout_and_saves_plain_weights(tmp_path):
    config = InSubConfig(
        encoder_config=named_encoder("resnet10_cifar", 32, 3, width=0.0625), num_heads=2, head_hidden_sizes=[8],
        head_output_size=4, objective_config={"base_temperature": None},  # unscaled: at lr 0.1 the 7x-scaled loss takes steps of norm ~16,
    )  # where float32 reordering between the two layouts (what this test is about) grows past any tolerance
    dataset, _ = fixed_views(8)
    models, layouts = {}, []

    class RecordLayout(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            weight = next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d)).weight
            layouts.append((args.channels_last, weight.is_contiguous(memory_format=torch.channels_last),
                            weight.is_contiguous()))

    for layout in (False, True):
        torch.manual_seed(0)
        model = InSubForPreTraining(config)
        trainer = InSubTrainer(
            model=model, args=args(tmp_path / str(layout), max_steps=2, channels_last=layout), train_dataset=dataset,
            callbacks=[RecordLayout()],
        )
        trainer.train()
        models[layout] = model
    # during training: NHWC weights with channels_last, plain ones without; after train(): plain again
    assert layouts == [(False, False, True)] * 2 + [(True, True, False)] * 2
    assert all(p.is_contiguous() for p in models[True].parameters())
    for (name, p), q in zip(models[True].named_parameters(), models[False].parameters()):
        torch.testing.assert_close(p, q, atol=1e-4, rtol=1e-4, msg=name)
    models[True].save_pretrained(tmp_path / "saved")
    loaded = InSubForPreTraining.from_pretrained(tmp_path / "saved")
    for name, tensor in models[True].state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


def test_evaluation_loss_without_labels(tmp_path):
    model = InSubForPreTraining(tiny_config())
    dataset, _ = fixed_views()
    trainer = InSubTrainer(model=model, args=args(tmp_path, per_device_eval_batch_size=4), eval_dataset=dataset)
    metrics = trainer.evaluate()
    assert metrics["eval_loss"] > 0 and {"eval_ssl_loss", "eval_diversity_loss", "eval_mean_sigma"} <= set(metrics)


class StopAtStep2(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        control.should_training_stop = state.global_step == 2


def whole_and_cut_runs(tmp_path, config, dataset, **kwargs) -> InSubTrainer:
    """Trains 4 steps under tmp_path/full, and the same start under tmp_path/cut stopped after step 2 (checkpoint-2).
    Returns the trainer of the whole run."""
    full = InSubForPreTraining(config)
    init = {k: v.clone() for k, v in full.state_dict().items()}
    whole = InSubTrainer(model=full, args=args(tmp_path / "full", **kwargs), train_dataset=dataset)
    whole.train()
    first = InSubForPreTraining(config)
    first.load_state_dict(init)
    InSubTrainer(model=first, args=args(tmp_path / "cut", **kwargs), train_dataset=dataset,
                 callbacks=[StopAtStep2()]).train()
    return whole


def test_resumed_run_reproduces_the_uninterrupted_one(tmp_path):
    config = tiny_config(num_heads=3)
    dataset, _ = fixed_views(8)
    kwargs = dict(max_steps=4, save_strategy="steps", save_steps=2, learning_rate=1e-3, optim="adamw_torch",
                  lr_scheduler_type="cosine", warmup_steps=1)
    whole = whole_and_cut_runs(tmp_path, config, dataset, **kwargs)
    full = whole.model
    resumed = InSubForPreTraining(config)  # other random weights: everything must come from the checkpoint
    trainer = InSubTrainer(model=resumed, args=args(tmp_path / "cut", **kwargs), train_dataset=dataset)
    trainer.train(resume_from_checkpoint=str(tmp_path / "cut" / "checkpoint-2"))

    def losses(t):
        return {row["step"]: row["loss"] for row in t.state.log_history if "loss" in row}

    assert set(losses(trainer)) == {1, 2, 3, 4}  # the log of steps 1-2 comes back from the checkpoint
    for step, loss in losses(trainer).items():
        assert abs(loss - losses(whole)[step]) < 1e-6
    for name, value in full.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[name], value, rtol=0, atol=1e-6, msg=name)


class _WritesAFile:
    """A pickle payload that would create a file when unpickled without restrictions."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_resume_skips_a_half_written_checkpoint_and_never_unpickles_arbitrary_objects(tmp_path):
    config = tiny_config(num_heads=2)
    dataset, _ = fixed_views(8)
    kwargs = dict(max_steps=4, save_strategy="steps", save_steps=2, learning_rate=1e-3, optim="adamw_torch")
    full = whole_and_cut_runs(tmp_path, config, dataset, **kwargs).model

    # a later save interrupted half-way: weights cut short, trainer_state.json never written
    good, broken = tmp_path / "cut" / "checkpoint-2", tmp_path / "cut" / "checkpoint-3"
    shutil.copytree(good, broken)
    (broken / "trainer_state.json").unlink()
    weights = (broken / "model.safetensors").read_bytes()
    (broken / "model.safetensors").write_bytes(weights[: len(weights) // 2])

    resumed = InSubForPreTraining(config)
    trainer = InSubTrainer(model=resumed, args=args(tmp_path / "cut", **kwargs), train_dataset=dataset)
    with pytest.raises(ValueError, match="checkpoint-3' cannot be resumed from: trainer_state.json"):
        trainer.train(resume_from_checkpoint=str(broken))
    trainer.train(resume_from_checkpoint=True)  # takes checkpoint-2
    for name, value in full.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[name], value, rtol=0, atol=1e-6, msg=name)

    # an optimizer file carrying code: refused by the restricted (weights-only) loader, the code never runs
    marker = tmp_path / "pwned"
    shutil.rmtree(broken)
    latest = Path(last_complete_checkpoint(tmp_path / "cut"))
    assert latest.name == "checkpoint-4"
    (latest / "optimizer.pt").write_bytes(pickle.dumps(_WritesAFile(str(marker))))
    again = InSubTrainer(model=InSubForPreTraining(config), args=args(tmp_path / "cut", **kwargs), train_dataset=dataset)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        again.train(resume_from_checkpoint=True)
    assert not marker.exists()


def random_view_runs(tmp_path, views: str):
    """A 2-epoch run (16 images, batch 4: 4 steps per epoch, random order) with random SimCLR views made per sample
    (`ImageViews`) or per batch (`BatchTwoViews`), whole and resumed from mid-epoch checkpoints; returns (whole
    trainer, resumed trainer, resumed model)."""
    from PIL import Image

    from insub_hf.data import BatchTwoViews, ImageViews, image_tensor_dataset, simclr_augmentation

    g = torch.Generator().manual_seed(0)
    images = torch.rand(16, 3, 32, 32, generator=g)
    mean, std = (0.5,) * 3, (0.25,) * 3
    if views == "per_sample":
        rows = Dataset.from_dict({"image": [Image.fromarray((255 * im.permute(1, 2, 0)).byte().numpy()) for im in images]})
        dataset, batch_views = rows.with_transform(ImageViews(simclr_augmentation(32, mean, std))), None
    else:
        dataset, batch_views = image_tensor_dataset(images), BatchTwoViews(32, mean, std)
    config = InSubConfig(
        encoder_config=named_encoder("resnet10_cifar", 32, 3, width=0.0625), num_heads=3, head_hidden_sizes=[16],
        head_output_size=8,
    )
    kwargs = dict(num_train_epochs=2, save_strategy="steps", save_steps=3, learning_rate=1e-2, optim="adamw_torch",
                  lr_scheduler_type="cosine", train_sampling_strategy="random")
    torch.manual_seed(0)
    model = InSubForPreTraining(config)
    init = {k: v.clone() for k, v in model.state_dict().items()}
    whole = InSubTrainer(model=model, args=args(tmp_path / "full", **kwargs), train_dataset=dataset,
                         batch_views=batch_views)
    whole.train()
    assert whole.state.global_step == 8
    assert (tmp_path / "full" / "checkpoint-3").is_dir() and (tmp_path / "full" / "checkpoint-6").is_dir()
    resumed = InSubForPreTraining(config)
    resumed.load_state_dict(init)
    for checkpoint in ("checkpoint-3", "checkpoint-6"):  # mid-epoch 1, mid-epoch 2
        fresh = InSubForPreTraining(config)
        trainer = InSubTrainer(model=fresh, args=args(tmp_path / "resumed", **kwargs), train_dataset=dataset,
                               batch_views=batch_views)
        shutil.copytree(tmp_path / "full" / checkpoint, tmp_path / "resumed" / checkpoint, dirs_exist_ok=True)
        torch.manual_seed(123)  # the global generator's position must not matter
        trainer.train(resume_from_checkpoint=str(tmp_path / "resumed" / checkpoint))
        yield checkpoint, whole, trainer, fresh


@pytest.mark.parametrize("views", ["per_sample", "batched"])
def test_resume_mid_epoch_with_random_augmentation_reproduces_the_uninterrupted_run(tmp_path, views):
    def losses(t):
        return {row["step"]: row["loss"] for row in t.state.log_history if "loss" in row}

    for checkpoint, whole, trainer, model in random_view_runs(tmp_path, views):
        resumed_from = int(checkpoint.split("-")[1])
        after = {s: v for s, v in losses(trainer).items() if s > resumed_from}
        assert sorted(after) == list(range(resumed_from + 1, 9)), checkpoint
        for step, loss in after.items():
            assert loss == pytest.approx(losses(whole)[step], abs=1e-6), (checkpoint, step)
        for name, value in whole.model.state_dict().items():
            torch.testing.assert_close(model.state_dict()[name], value, rtol=0, atol=1e-6, msg=f"{checkpoint} {name}")


def test_views_are_random_but_not_the_global_generators(tmp_path):
    """The seeded views differ between samples, epochs and steps, and leave torch's global generator untouched."""
    from insub_hf.data.seeding import SeededSamples, mix_seed, seeded_draws

    assert len({mix_seed(0, e, i) for e in range(3) for i in range(100)}) == 300
    dataset = [None] * 4

    class Draw:
        def __getitem__(self, i):
            return torch.rand(()).item()

        def __len__(self):
            return 4

    samples = SeededSamples(Draw(), seed=0)
    state = torch.random.get_rng_state()
    first = samples.__getitems__([0, 1, 2, 3])
    assert len(set(first)) == 4 and samples.__getitems__([0, 1, 2, 3]) == first  # a function of (seed, epoch, index)
    samples.set_epoch(1)
    assert all(a != b for a, b in zip(samples.__getitems__([0, 1, 2, 3]), first))
    assert torch.equal(torch.random.get_rng_state(), state)
    with seeded_draws(5):
        a = torch.rand(3)
    with seeded_draws(5):
        assert torch.equal(torch.rand(3), a)
    assert torch.equal(torch.random.get_rng_state(), state)
    del dataset


def test_batches_are_checked_at_the_logging_step_and_before_a_save(tmp_path, monkeypatch):
    _, data = fixed_views(8)
    data["pixel_values"][5] = 2e4  # the second batch of 4 holds an unnormalised image
    rows = Dataset.from_dict({k: v.numpy() for k, v in data.items()}).with_format("torch")
    model = InSubForPreTraining(tiny_config(num_heads=2))
    trainer = InSubTrainer(model=model, args=args(tmp_path, max_steps=2, logging_steps=2), train_dataset=rows)
    assert model.check_steps_in_forward is False  # the trainer checks the batches, not the forward
    reads = []
    read = insub_hf.training.trainer.step_flags_bad
    monkeypatch.setattr(insub_hf.training.trainer, "step_flags_bad", lambda *a: reads.append(trainer.state.global_step) or read(*a))
    with pytest.raises(FloatingPointError, match=r"The pretraining loss is finite at a step in 0\.\.2 for inputs "
                                                 r"pixel_values max \|x\| = 2e\+04.*must be normalised"):
        trainer.train()
    assert reads == [2]  # the flags of both steps were read once, at the logging step
    # a save between logging steps reads them first: no checkpoint holds weights trained on the refused batch
    out = tmp_path / "saving"
    trainer = InSubTrainer(model=InSubForPreTraining(tiny_config(num_heads=2)), train_dataset=rows,
                           args=args(out, max_steps=2, logging_steps=100, save_strategy="steps", save_steps=1))
    with pytest.raises(FloatingPointError, match=r"at a step in 1\.\.2 for inputs pixel_values max \|x\| = 2e\+04"):
        trainer.train()
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1"]

import math

import pytest
import torch
from datasets import Dataset
from PIL import Image
from transformers import TrainerCallback

from insub_hf import InSubConfig, InSubForPreTraining
from insub_hf.data import IMAGE_DATASET_PRESETS, MultiCropViews, dino_augmentation
from insub_hf.objectives.dino import teacher_temperature
from insub_hf.objectives.ema import cosine_momentum, ema_update_
from insub_hf.evaluation import HarnessArguments, ImageEvaluationData, MethodEvaluator, ProbeArguments
from insub_hf.losses import DINOLoss, dino_loss
from insub_hf.training.trainer import InSubTrainer

from ..conftest import tiny_config
from ..test_trainer import args

pytestmark = pytest.mark.numeric


def dino_config(**overrides):
    options = {"out_dim": 24, **overrides.pop("objective_config", {})}
    return tiny_config(**{"objective": "dino", "objective_config": options, "head_norm": "none", **overrides})


def crops(n=8, locals_=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "pixel_values": torch.randn(n, 3, 32, 32, generator=g),
        "pixel_values_2": torch.randn(n, 3, 32, 32, generator=g),
        "local_pixel_values": torch.randn(n, locals_, 3, 16, 16, generator=g),
    }


def crop_dataset(n=8):
    return Dataset.from_dict({k: v.numpy() for k, v in crops(n).items()}).with_format("torch")


def test_loss_matches_a_hand_computed_example():
    # 2 global views + 1 local, one sample, K = 2
    student = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]], [[0.5, 0.5]]])
    teacher = torch.tensor([[[0.2, 0.0]], [[0.0, 0.4]]])
    center = torch.tensor([0.1, 0.1])
    tau_s, tau_t = 0.5, 0.1

    def softmax(xs):
        e = [math.exp(x) for x in xs]
        return [v / sum(e) for v in e]

    expected, pairs = 0.0, 0
    for g in range(2):
        p = softmax([(t - c) / tau_t for t, c in zip(teacher[g, 0].tolist(), center.tolist())])
        for v in range(3):
            if v == g:
                continue
            q = softmax([s / tau_s for s in student[v, 0].tolist()])
            expected += -sum(pi * math.log(qi) for pi, qi in zip(p, q))
            pairs += 1
    loss = dino_loss(student, teacher, center, tau_s, tau_t)
    assert loss.shape == (1,)
    assert loss.item() == pytest.approx(expected / pairs, rel=1e-6)


def test_loss_refuses_mismatched_teacher_and_student():
    with pytest.raises(ValueError, match="do not match"):
        dino_loss(torch.randn(3, 4, 8), torch.randn(2, 4, 6), torch.zeros(8))
    with pytest.raises(ValueError, match="teacher_temperature"):
        dino_loss(torch.randn(3, 4, 8), torch.randn(2, 4, 8), torch.zeros(8), teacher_temperature=0.0)


def test_ema_update_arithmetic():
    teacher, student = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    t0 = [p.detach().clone() for p in teacher.parameters()]
    ema_update_(teacher, student, 0.9)
    for t, before, s in zip(teacher.parameters(), t0, student.parameters()):
        torch.testing.assert_close(t, 0.9 * before + 0.1 * s, rtol=0, atol=1e-7)
    with pytest.raises(ValueError, match="share the architecture"):
        ema_update_(teacher, torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 2)), 0.9)


def test_centre_moves_once_per_step_with_the_mean_of_all_micro_batches():
    loss = DINOLoss(out_dim=3, center_momentum=0.9)
    loss.center.fill_(1.0)
    a, b = torch.randn(2, 4, 3), torch.randn(2, 2, 3)
    loss(torch.randn(2, 4, 3), a, 0.04)
    loss(torch.randn(2, 2, 3), b, 0.04)
    torch.testing.assert_close(loss.center, torch.ones(1, 3))  # nothing moves before the step ends
    loss.update_center()
    batch_mean = torch.cat([a.reshape(-1, 3), b.reshape(-1, 3)]).mean(0)
    torch.testing.assert_close(loss.center, (0.9 + 0.1 * batch_mean).reshape(1, 3))
    loss.update_center()  # no new teacher outputs: unchanged
    torch.testing.assert_close(loss.center, (0.9 + 0.1 * batch_mean).reshape(1, 3))
    loss.eval()
    loss(torch.randn(2, 4, 3), a, 0.04)
    assert loss._pending_count.item() == 0  # evaluation does not feed the centre


def test_schedule_values():
    assert cosine_momentum(0, 100) == pytest.approx(0.996)
    assert cosine_momentum(50, 100) == pytest.approx(0.998)
    assert cosine_momentum(100, 100) == pytest.approx(1.0)
    assert cosine_momentum(25, 100) == pytest.approx(1 - 0.004 * (math.cos(math.pi / 4) + 1) / 2)
    assert teacher_temperature(0, 30) == pytest.approx(0.04)
    assert teacher_temperature(15, 30) == pytest.approx(0.055)
    assert teacher_temperature(30, 30) == pytest.approx(0.07)
    assert teacher_temperature(99, 30) == pytest.approx(0.07)
    assert teacher_temperature(0, 0) == pytest.approx(0.07)
    with pytest.raises(ValueError, match="teacher momentum"):
        cosine_momentum(0, 10, base=1.5)


@pytest.mark.parametrize(
    "field, value",
    [("teacher_momentum", 1.5), ("center_momentum", -0.1), ("student_temperature", 0.0),
     ("warmup_teacher_temperature", -1.0), ("out_dim", 0)],
)
def test_config_refuses_bad_dino_values(field, value):
    with pytest.raises(ValueError, match=rf"DINOConfig\.{field} must be .*, got {value}"):
        dino_config(objective_config={field: value})


def test_local_crops_larger_than_global_are_refused():
    with pytest.raises(ValueError, match="local crop size 40 is larger than the global crop size 32"):
        dino_augmentation(32, (0.5,) * 3, (0.25,) * 3, local_size=40)
    model = InSubForPreTraining(dino_config())
    x = crops(2)
    with pytest.raises(ValueError, match="larger than the global crops"):
        model(x["pixel_values"], x["pixel_values_2"], local_pixel_values=torch.randn(2, 1, 3, 48, 48))


def test_multicrop_views_give_two_global_and_n_local_crops_per_image():
    preset = IMAGE_DATASET_PRESETS["cifar10"]
    images = [Image.new("RGB", (32, 32), (i * 40, 100, 200)) for i in range(3)]
    out = MultiCropViews(preset.multicrop(), num_local_crops=5, image_column="img")({"img": images})
    assert [t.shape for t in out["pixel_values"]] == [(3, 32, 32)] * 3
    assert [t.shape for t in out["local_pixel_values"]] == [(5, 3, 16, 16)] * 3
    assert not torch.equal(out["local_pixel_values"][0][0], out["local_pixel_values"][0][1])  # each crop its own draw


def test_teacher_starts_as_the_student_and_gets_no_gradient():
    model = InSubForPreTraining(dino_config(num_heads=5))
    dino = model.objective
    student = [*model.insub.named_parameters(), *dino.prototypes.named_parameters()]
    teacher = [*dino.teacher.parameters(), *dino.teacher_prototypes.parameters()]
    assert len(student) == len(teacher)
    for (name, s), t in zip(student, teacher):
        assert torch.equal(s, t) and not t.requires_grad, name
    model(**crops(4)).loss.backward()
    assert all(p.grad is None for p in teacher)
    assert all(p.grad is not None for _, p in student)


@pytest.mark.parametrize("num_heads", [1, 5])
def test_trainer_steps_move_student_teacher_and_centre(tmp_path, num_heads):
    model = InSubForPreTraining(dino_config(num_heads=num_heads, head_norm="batchnorm"))
    student0 = {k: v.detach().clone() for k, v in model.insub.named_parameters()}
    trainer = InSubTrainer(model=model, args=args(tmp_path, max_steps=3), train_dataset=crop_dataset())
    trainer.train()
    logs = [row for row in trainer.state.log_history if "loss" in row]
    assert len(logs) == 3 and all(math.isfinite(row["loss"]) for row in logs)
    assert (logs[0]["diversity_loss"] > 0) == (num_heads > 1)
    changed = [k for k, v in model.insub.named_parameters() if not torch.equal(v, student0[k])]
    assert any(k.startswith("heads") for k in changed) and any(k.startswith("encoder") for k in changed)
    teacher = dict(model.objective.teacher.named_parameters())
    assert any(not torch.equal(teacher[k], student0[k]) for k in changed)  # the EMA moved the teacher
    assert model.objective.loss.center.abs().sum() > 0
    assert model.objective.teacher_temperature == pytest.approx(teacher_temperature(2, round(0.3 * 3)))


def test_gradient_accumulation_equals_one_step_on_the_whole_batch(tmp_path):
    config = dino_config(num_heads=3)
    whole, accumulated = InSubForPreTraining(config), InSubForPreTraining(config)
    accumulated.load_state_dict(whole.state_dict())
    data = crop_dataset(8)
    InSubTrainer(model=whole, args=args(tmp_path / "a", max_steps=1, per_device_train_batch_size=8),
                 train_dataset=data).train()
    InSubTrainer(model=accumulated, args=args(tmp_path / "b", max_steps=1, gradient_accumulation_steps=2),
                 train_dataset=data).train()
    for (name, p), q in zip(whole.state_dict().items(), accumulated.state_dict().values()):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5, msg=name)  # student, teacher and centre


class StopAt(TrainerCallback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True


def test_resume_restores_teacher_and_centre_bit_exactly(tmp_path):
    saved = assert_resume_is_bit_exact(tmp_path, dino_config(num_heads=3), crop_dataset(8))
    assert saved.objective.loss.center.abs().sum() > 0


def assert_resume_is_bit_exact(tmp_path, config, data) -> InSubForPreTraining:
    """4 steps in one go equal 2 steps, a checkpoint and 2 resumed steps, bit for bit (the objective's state
    included); returns the model loaded from the step-2 checkpoint."""
    kwargs = dict(max_steps=4, save_strategy="steps", save_steps=2, learning_rate=0.05)

    full = InSubForPreTraining(config)
    init = {k: v.clone() for k, v in full.state_dict().items()}
    InSubTrainer(model=full, args=args(tmp_path / "full", **kwargs), train_dataset=data).train()

    first = InSubForPreTraining(config)
    first.load_state_dict(init)
    InSubTrainer(model=first, args=args(tmp_path / "cut", **kwargs), train_dataset=data, callbacks=[StopAt(2)]).train()
    saved = InSubForPreTraining.from_pretrained(tmp_path / "cut" / "checkpoint-2")
    for name, value in first.state_dict().items():  # what was in memory at step 2 is what comes back
        assert torch.equal(saved.state_dict()[name], value), name

    resumed = InSubForPreTraining(config)
    InSubTrainer(model=resumed, args=args(tmp_path / "cut", **kwargs), train_dataset=data).train(
        resume_from_checkpoint=str(tmp_path / "cut" / "checkpoint-2")
    )
    for name, value in full.state_dict().items():
        assert torch.equal(resumed.state_dict()[name], value), name
    return saved


def test_harness_evaluates_a_dino_checkpoint_unchanged(tmp_path):
    model = InSubForPreTraining(dino_config(num_heads=3))
    InSubTrainer(model=model, args=args(tmp_path, max_steps=1), train_dataset=crop_dataset()).train()
    model.save_pretrained(tmp_path / "model")
    loaded = InSubForPreTraining.from_pretrained(tmp_path / "model").eval()
    for name, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name
    g = torch.Generator().manual_seed(0)
    images, labels = torch.rand(40, 3, 32, 32, generator=g), torch.arange(2).repeat(20)
    data = ImageEvaluationData(
        images[:30], labels[:30], images[30:], labels[30:], {"uniform": torch.rand(10, 3, 32, 32, generator=g)},
        (0.5,) * 3, (0.25,) * 3, 2,
    )
    harness = HarnessArguments(corruption_images=4, corruptions=["fog"], label_fractions=[0.5])
    results, _ = MethodEvaluator([loaded], data, ProbeArguments(probe_epochs=2), harness).run()
    assert results.members == 1 and 0 <= results.test.accuracy <= 1
    assert math.isfinite(results.test.nll) and "head_spread" in results.ood["uniform"]


def test_starting_from_a_saved_dino_vit_copies_it_into_student_and_teacher(tmp_path):
    from transformers import ViTConfig, ViTModel

    from insub_hf.encoders import encoder_config_from_pretrained, load_encoder_weights

    backbone = ViTModel(ViTConfig(image_size=32, patch_size=4, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=64))  # with its pooler, as on the Hub
    backbone.save_pretrained(tmp_path / "dino-vit")
    config = dino_config(encoder_config=encoder_config_from_pretrained(tmp_path / "dino-vit"))
    model = InSubForPreTraining(config)
    load_encoder_weights(model, tmp_path / "dino-vit")
    reference = ViTModel.from_pretrained(tmp_path / "dino-vit").eval()
    x = torch.randn(2, 3, 32, 32)
    expected = reference(pixel_values=x).last_hidden_state[:, 0]
    for network in (model.insub, model.objective.teacher):
        torch.testing.assert_close(network.eval().get_representation(pixel_values=x), expected)

    wider = InSubForPreTraining(dino_config(encoder_config=dict(config.encoder_config.to_dict(), hidden_size=64)))
    with pytest.raises(ValueError, match="does not fit InSubConfig.encoder_config"):
        load_encoder_weights(wider, tmp_path / "dino-vit")


def test_timm_vit_trains_with_dino_local_crops():
    config = InSubConfig(
        timm_model_name="vit_tiny_patch16_224", timm_kwargs=dict(img_size=32, patch_size=4, depth=1, embed_dim=32,
                                                                 num_heads=2),
        objective="dino", num_heads=3, head_hidden_sizes=[16], head_output_size=8, objective_config={"out_dim": 16},
    )
    assert config.timm_kwargs["dynamic_img_size"] is True
    model = InSubForPreTraining(config)
    out = model(**crops(2))
    out.loss.backward()
    assert math.isfinite(out.loss.item()) and model.insub.encoder.model.patch_embed.proj.weight.grad is not None

import numpy as np
import pytest
import torch

from insub_hf import InSubForPreTraining
from insub_hf.losses import byol_loss
from insub_hf.objectives.ema import cosine_momentum
from insub_hf.training.trainer import InSubTrainer

from ..conftest import tiny_config
from ..test_trainer import args, fixed_views
from .test_dino import StopAt, assert_resume_is_bit_exact

pytestmark = pytest.mark.numeric


def byol_config(**overrides):
    return tiny_config(**{"objective": "byol", "objective_config": {"predictor_hidden_size": 32}, **overrides})


def test_loss_is_the_normalised_squared_distance():
    g = torch.Generator().manual_seed(0)
    p, t = torch.randn(5, 4, generator=g, dtype=torch.float64), torch.randn(5, 4, generator=g, dtype=torch.float64)
    pn, tn = p.numpy() / np.linalg.norm(p.numpy(), axis=1, keepdims=True), t.numpy() / np.linalg.norm(t.numpy(), axis=1, keepdims=True)
    torch.testing.assert_close(byol_loss(p, t).numpy(), np.sum((pn - tn) ** 2, axis=1), rtol=1e-12, atol=1e-12)
    t.requires_grad_(True)
    byol_loss(p.requires_grad_(True), t).sum().backward()
    assert t.grad is None and p.grad is not None  # the target gets no gradient


def test_the_objective_regresses_the_targets_other_view():
    torch.manual_seed(0)
    model = InSubForPreTraining(byol_config(num_heads=3)).train()
    x1, x2 = torch.randn(6, 3, 32, 32), torch.randn(6, 3, 32, 32)
    target = model.objective.target
    assert all(torch.equal(a, b) for a, b in zip(target.state_dict().values(), model.insub.state_dict().values()))
    out = model(x1, x2)
    assert out.ssl_loss > 0
    out.loss.backward()
    assert all(p.grad is None for p in target.parameters())
    assert all(p.grad is not None for p in model.objective.predictor.parameters())
    assert all(p.grad is not None for n, p in model.named_parameters() if n.startswith("insub."))


@pytest.mark.parametrize("accumulation", [1, 2])
def test_each_optimiser_step_moves_the_target_once_by_the_cosine_momentum(tmp_path, accumulation):
    # with gradient accumulation the target still moves once per optimiser step, after it, towards the new student
    model = InSubForPreTraining(byol_config(num_heads=3, head_norm="none"))
    dataset, _ = fixed_views(8)
    target = [{k: v.clone() for k, v in model.objective.target.named_parameters()}]
    students = []

    class Record(StopAt):
        def on_step_end(self, args, state, control, **kwargs):
            students.append({k: v.detach().clone() for k, v in model.insub.named_parameters()})
            target.append({k: v.clone() for k, v in model.objective.target.named_parameters()})

    training = args(tmp_path, max_steps=2, per_device_train_batch_size=4 // accumulation,
                    gradient_accumulation_steps=accumulation)
    trainer = InSubTrainer(model=model, args=training, train_dataset=dataset)
    trainer.add_callback(Record(-1))  # after the trainer's own ObjectiveStepCallback, which moves the target
    trainer.train()
    assert len(students) == 2
    for step in range(2):
        m = cosine_momentum(step, 2, 0.996, 1.0)
        for name, value in target[step + 1].items():
            torch.testing.assert_close(value, m * target[step][name] + (1 - m) * students[step][name], msg=name)
    assert any(not torch.equal(target[1][k], target[0][k]) for k in target[0])


def test_resume_restores_the_target_bit_exactly(tmp_path):
    saved = assert_resume_is_bit_exact(tmp_path, byol_config(num_heads=3), fixed_views(8)[0])
    assert any(k.startswith("objective.target.") for k in saved.state_dict())

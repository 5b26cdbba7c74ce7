"""`InSubTrainingArguments.capture_step`: the whole optimiser step (views, forward, backward, clipping, AdamW) as one
compiled graph with no break, trained by the Trainer's own loop. Checked on the CPU: it is one graph for every step
(the last short batch dropped, the learning rate a tensor: no recompilation), it trains as the Trainer's step does,
its views differ from step to step and repeat for one seed, it reads nothing on the host and runs as many operations
at two batch sizes. On a GPU the same graph replays as one CUDA graph (`torch_compile_mode="reduce-overhead"`)."""

from __future__ import annotations

import collections

import pytest
import torch
from torch._dynamo.utils import counters
from transformers import TrainerCallback

from insub_hf import InSubConfig, InSubForPreTraining, InSubTrainer, InSubTrainingArguments, named_encoder
from insub_hf.data import BatchTwoViews, DeviceImages, IMAGE_STATS
from insub_hf.data.seeding import seeded_draws
from insub_hf.training.captured_step import CapturedAdamW, captured_step_problem

pytestmark = pytest.mark.skipif(captured_step_problem() is not None, reason=str(captured_step_problem()))

CONFIG = dict(encoder_config=named_encoder("resnet10_cifar", 16, 3, 0.125), num_heads=3, head_hidden_sizes=[32],
              head_output_size=8)


def images(count: int = 70) -> DeviceImages:
    return DeviceImages(torch.randint(0, 256, (count, 3, 16, 16), dtype=torch.uint8,
                                      generator=torch.Generator().manual_seed(1)))


def trainer(tmp_path, capture: bool, batch: int = 16, steps: int = 6, **arguments) -> InSubTrainer:
    torch.manual_seed(0)
    if capture:  # dynamo's graph, run by AOT autograd without inductor's code generation: quick to build on a CPU
        arguments = {"torch_compile_backend": "aot_eager", **arguments}
    arguments = {"logging_steps": 1, "learning_rate": 1e-3, "warmup_steps": 2, "max_grad_norm": 1.0,
                 "save_strategy": "no", **arguments}
    args = InSubTrainingArguments(
        output_dir=str(tmp_path / f"run-{capture}-{batch}"), per_device_train_batch_size=batch, max_steps=steps,
        report_to=[], disable_tqdm=True, data_on_device=True, capture_step=capture, dataloader_drop_last=True,
        **arguments)
    return InSubTrainer(model=InSubForPreTraining(InSubConfig(**CONFIG)), args=args, train_dataset=images(),
                        batch_views=BatchTwoViews(16, *IMAGE_STATS["cifar10"], num_channels=3))


def logged(run: InSubTrainer, key: str) -> list[float]:
    return [entry[key] for entry in run.state.log_history if key in entry]


def test_the_captured_step_is_one_graph_and_trains_as_the_trainers_step(tmp_path):
    reference = trainer(tmp_path, capture=False)
    reference.train()
    counters.clear()
    captured = trainer(tmp_path, capture=True, save_strategy="steps", save_steps=3)
    captured.train()
    # one graph for all six steps: no break (fullgraph), no second graph at the epoch's end (70 images, batch 16: the
    # last 6 are dropped) nor when the learning rate changes (a tensor the scheduler fills in place)
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    assert captured.state.global_step == 6 and captured.state.epoch > 1
    # the same views (the same generator, seeded per step), forward, clipping and AdamW as the Trainer's own step
    assert logged(captured, "loss") == pytest.approx(logged(reference, "loss"), rel=1e-4)
    assert logged(captured, "grad_norm") == pytest.approx(logged(reference, "grad_norm"), rel=1e-3)
    assert logged(captured, "ssl_loss") == pytest.approx(logged(reference, "ssl_loss"), rel=1e-4)
    assert logged(captured, "learning_rate") == pytest.approx(logged(reference, "learning_rate"))
    for mine, theirs in zip(captured.model.parameters(), reference.model.parameters()):
        torch.testing.assert_close(mine, theirs, atol=2e-4, rtol=1e-3)
    optimizer = captured.optimizer.optimizer
    assert isinstance(optimizer, CapturedAdamW) and not optimizer.updated
    # the learning rate the graph read is the scheduler's, written into the same tensor
    assert optimizer.param_groups[0]["lr"].item() == pytest.approx(captured.lr_scheduler.get_last_lr()[0].item())

    # resumed from its step-3 checkpoint (weights, AdamW's state and learning rate, the schedule), it ends where the
    # run that was not interrupted ended: the views of steps 4-6 are drawn from the same seeds
    resumed = trainer(tmp_path / "resumed", capture=True)
    resumed.train(resume_from_checkpoint=str(tmp_path / "run-True-16" / "checkpoint-3"))
    assert logged(resumed, "loss")[-3:] == logged(captured, "loss")[-3:]
    for mine, theirs in zip(resumed.model.parameters(), captured.model.parameters()):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0)


def test_the_views_differ_between_steps_and_repeat_for_a_seed(tmp_path):
    run = trainer(tmp_path, capture=True, learning_rate=0.0, weight_decay=0.0, warmup_steps=0)
    run.create_optimizer_and_scheduler(num_training_steps=6)
    batch = images().images[:16].float() / 255
    model = run.model

    def loss(seed: int) -> float:  # the weights stay (learning rate 0); only the views change with the seed
        with seeded_draws(seed):
            value = run.captured_step(model, batch)[0].item()
        run.optimizer.updated = False
        for p in model.parameters():
            p.grad = None
        return value

    first, second, again = loss(1), loss(2), loss(1)
    assert first == again and first != second


def test_compiled_views_follow_the_seeded_generator():
    views = BatchTwoViews(16, *IMAGE_STATS["cifar10"], num_channels=3)
    views.compile_views(backend="inductor")  # inductor's own random numbers, as in a captured step on a GPU
    batch = images(8).images.float() / 255
    drawn = {}
    for name, seed in (("first", 1), ("second", 2), ("again", 1)):
        with seeded_draws(seed):
            drawn[name] = torch.cat(views(batch))
    torch.testing.assert_close(drawn["first"], drawn["again"], rtol=0, atol=0)
    assert (drawn["first"] - drawn["second"]).abs().amax() > 0.1


GRAPHS: list[torch.fx.GraphModule] = []


def record_graph(graph: torch.fx.GraphModule, example_inputs):
    """Keeps dynamo's graph of the step and runs it as it is."""
    GRAPHS.append(graph)
    return graph.forward


HOST_READS = ("item", "tolist", "__bool__", "__float__", "__int__")


class CountHostReads(TrainerCallback):
    """Counts the tensor-to-host reads during the third step (the graph is built at the first; the third is inside
    the first epoch at both batch sizes, whose start draws the data order on the host)."""

    def __init__(self, monkeypatch):
        self.monkeypatch, self.reads, self.counting = monkeypatch, collections.Counter(), False
        for name in HOST_READS:
            original = getattr(torch.Tensor, name)

            def counted(tensor, *args, _name=name, _original=original, **kwargs):
                if self.counting:
                    self.reads[_name] += 1
                return _original(tensor, *args, **kwargs)

            monkeypatch.setattr(torch.Tensor, name, counted)

    def on_step_begin(self, args, state, control, **kwargs):
        self.counting = self.counting or state.global_step == 2

    def on_step_end(self, args, state, control, **kwargs):
        self.counting = self.counting and state.global_step < 3


def test_a_captured_step_reads_nothing_on_the_host_and_its_graph_does_not_grow_with_the_batch(tmp_path, monkeypatch):
    operations = {}
    for batch in (8, 16):
        GRAPHS.clear()
        run = trainer(tmp_path, capture=True, batch=batch, steps=5, logging_steps=100)
        run.args.torch_compile_backend = record_graph  # torch.compile takes a backend function too
        reads = CountHostReads(monkeypatch)
        run.add_callback(reads)
        run.train()
        assert len(GRAPHS) == 1 and reads.counting is False
        assert sum(reads.reads.values()) == 0, reads.reads  # between logging steps nothing comes back to the host
        calls = [str(node.target) for node in GRAPHS[0].graph.nodes if node.op in ("call_function", "call_method")]
        assert not [c for c in calls if c in HOST_READS or "local_scalar_dense" in c]
        operations[batch] = collections.Counter(calls)
        monkeypatch.undo()
    assert operations[8] == operations[16] and sum(operations[8].values()) > 100


def test_capture_step_is_refused_where_one_graph_cannot_hold_the_step(tmp_path, monkeypatch):
    base = dict(output_dir=str(tmp_path), capture_step=True, report_to=[])
    with pytest.raises(ValueError, match=r"capture_step=True cannot capture this run's step: "
                                         r"gradient_accumulation_steps=2 \(the captured step is one micro-batch"):
        InSubTrainingArguments(**base, gradient_accumulation_steps=2)
    with pytest.raises(ValueError, match=r"optim='sgd' \(the captured step updates with AdamW: use 'adamw_torch'"):
        InSubTrainingArguments(**base, optim="sgd")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="2 processes .the captured step trains one process"):
        InSubTrainingArguments(**base)
    monkeypatch.delenv("WORLD_SIZE")
    args = InSubTrainingArguments(**base)
    assert args.dataloader_drop_last  # one shape for every step
    with pytest.raises(ValueError, match=r"capture_step=True makes the views inside the captured step: it needs "
                                         r"InSubTrainer\(batch_views=...\)"):
        InSubTrainer(model=InSubForPreTraining(InSubConfig(**CONFIG)), args=args, train_dataset=images())


def test_plain_training_arguments_train_the_trainers_own_step(tmp_path):
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=16, report_to=[],
                             save_strategy="no", use_cpu=True, remove_unused_columns=False, disable_tqdm=True)
    run = InSubTrainer(model=InSubForPreTraining(InSubConfig(**CONFIG)), args=args, train_dataset=images(),
                       batch_views=BatchTwoViews(16, *IMAGE_STATS["cifar10"], num_channels=3))
    run.train()  # no capture_step field: the Trainer's own step and optimiser
    assert run.state.global_step == 1 and not isinstance(run.optimizer.optimizer, CapturedAdamW)


def test_a_captured_run_resumes_a_checkpoint_written_without_capture(tmp_path):
    """An uncaptured run's checkpoint (torch's AdamW state, its learning rate a float) resumed with capture_step=True:
    the moments and step counters carry over, the learning rate is the schedule's, and it ends where the uncaptured
    run ends (within the captured step's float tolerance)."""
    plain = trainer(tmp_path, capture=False, save_strategy="steps", save_steps=3)
    plain.train()
    resumed = trainer(tmp_path / "resumed", capture=True)
    resumed.train(resume_from_checkpoint=str(tmp_path / "run-False-16" / "checkpoint-3"))
    assert logged(resumed, "loss")[-3:] == pytest.approx(logged(plain, "loss")[-3:], rel=1e-4)
    optimizer = resumed.optimizer.optimizer
    assert isinstance(optimizer, CapturedAdamW) and isinstance(optimizer.param_groups[0]["lr"], torch.Tensor)
    for mine, theirs in zip(resumed.model.parameters(), plain.model.parameters()):
        torch.testing.assert_close(mine, theirs, atol=2e-4, rtol=1e-3)


def test_capture_step_with_another_optimiser_or_the_stock_trainer_is_refused_naming_why(tmp_path):
    from transformers import Trainer

    model = InSubForPreTraining(InSubConfig(**CONFIG))
    args = InSubTrainingArguments(output_dir=str(tmp_path / "run"), per_device_train_batch_size=16, max_steps=2,
                                  report_to=[], capture_step=True, data_on_device=True)
    views = BatchTwoViews(16, *IMAGE_STATS["cifar10"], num_channels=3)
    with pytest.raises(ValueError, match=r"capture_step=True runs its own AdamW inside the captured step .* was given "
                                         r"a SGD \(optimizers=...\): leave the optimiser out, or set capture_step=False"):
        InSubTrainer(model=model, args=args, train_dataset=images(), batch_views=views,
                     optimizers=(torch.optim.SGD(model.parameters(), lr=0.1), None))
    with pytest.raises(ValueError, match=r"capture_step=True is run by InSubTrainer's own step; Trainer would train "
                                         r"every step uncaptured"):
        Trainer(model=model, args=args, train_dataset=images())

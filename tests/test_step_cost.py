"""What a GPU waits for, counted on the CPU: the operations of one InSubTrainer step (each a kernel launch on a GPU)
must not grow with the batch, a step that does not log must read nothing back to the host, and compiled training must
compile once (no recompilation, no graph break)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch._dynamo as dynamo
from datasets import Dataset
from transformers import TrainerCallback

from insub_hf import InSubConfig, InSubForPreTraining
from insub_hf.data import IMAGE_STATS, BatchTwoViews, DeviceImages
from insub_hf.encoders.presets import named_encoder
from insub_hf.training.trainer import InSubTrainer, InSubTrainingArguments

from .test_fast_path import BERT

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from measuring import CountOps  # noqa: E402  (the benchmarks' one op counter)


class CountStep(TrainerCallback):
    """Counts the aten calls of step `step` (from its `on_step_begin` to its `on_step_end`)."""

    def __init__(self, step: int):
        self.step, self.mode = step, CountOps()

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            self.mode.__enter__()

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step + 1:
            self.mode.__exit__(None, None, None)


def image_config(num_heads: int = 5, **overrides) -> InSubConfig:
    return InSubConfig(encoder_config=named_encoder("resnet10_cifar", 32, 3, 0.125), num_heads=num_heads,
                       head_hidden_sizes=[32], head_output_size=16, **overrides)


def training_args(tmp_path, batch: int, steps: int, **overrides) -> InSubTrainingArguments:
    return InSubTrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=batch, max_steps=steps, logging_steps=1000,
        report_to=[], save_strategy="no", disable_tqdm=True, dataloader_drop_last=True, seed=0, **overrides,
    )


def test_a_step_runs_the_same_operations_at_any_batch_and_reads_nothing_back(tmp_path):
    images = DeviceImages(torch.randint(0, 256, (256, 3, 32, 32), dtype=torch.uint8))
    counted = {}
    for batch in (32, 256):
        counter = CountStep(step=1)  # the second step: the first checks the images' range once
        trainer = InSubTrainer(
            model=InSubForPreTraining(image_config()), train_dataset=images, callbacks=[counter],
            args=training_args(tmp_path / str(batch), batch, 3, data_on_device=True),
            batch_views=BatchTwoViews(32, *IMAGE_STATS["cifar10"], num_channels=3),
        )
        trainer.train()
        counted[batch] = counter.mode.ops
    assert counted[32]["aten._local_scalar_dense"] == counted[256]["aten._local_scalar_dense"] == 0
    assert abs(sum(counted[32].values()) - sum(counted[256].values())) <= 4, (counted[32] - counted[256],
                                                                             counted[256] - counted[32])
    assert counted[32]["aten.grid_sampler_2d"] == 1  # one warp for both views of the whole batch


def _rows(name: str, n: int = 8) -> Dataset:
    g = torch.Generator().manual_seed(0)
    if name == "scd":
        data = {"input_ids": torch.randint(0, 1000, (n, 12), generator=g), "attention_mask": torch.ones(n, 12)}
    else:
        data = {"pixel_values": torch.randn(n, 3, 32, 32, generator=g),
                "pixel_values_2": torch.randn(n, 3, 32, 32, generator=g)}
        if name == "dino":
            data["local_pixel_values"] = torch.randn(n, 2, 3, 16, 16, generator=g)
    return Dataset.from_dict({k: v.numpy() for k, v in data.items()}).with_format("torch")


CONFIGS = {
    "simclr_m1": lambda: image_config(num_heads=1, diversity_weight=0.0),
    "simclr_m5": lambda: image_config(num_heads=5),
    "dino": lambda: image_config(num_heads=3, objective="dino", objective_config={"out_dim": 64}),
    "scd": lambda: InSubConfig(encoder_config=BERT, objective="scd", num_heads=3, head_hidden_sizes=[24],
                               head_output_size=24, normalize_heads=False, pooling="mean"),
}


@pytest.mark.parametrize("name", [*sorted(CONFIGS), "simclr_m5_batch_views"])
def test_compiled_training_compiles_once(tmp_path, name):
    dynamo.reset()
    dynamo.utils.counters.clear()
    args = training_args(tmp_path, 4, 4, torch_compile=True, torch_compile_backend="eager", use_cpu=True)
    if name == "simclr_m5_batch_views":  # the views compile apart from the step: two graphs, each once
        rows, views, graphs = DeviceImages(torch.rand(16, 3, 32, 32)), BatchTwoViews(32, *IMAGE_STATS["cifar10"]), 2
        args = training_args(tmp_path, 4, 4, torch_compile=True, torch_compile_backend="eager", use_cpu=True,
                             data_on_device=True)
    else:
        rows, views, graphs = _rows(name.split("_")[0]), None, 1
    trainer = InSubTrainer(model=InSubForPreTraining(CONFIGS[name.removesuffix("_batch_views")]()), train_dataset=rows, args=args,
                           batch_views=views)
    trainer.train()
    counters = dynamo.utils.counters
    breaks = dict(counters["graph_break"])
    # each graph dynamo made (a recompilation or the piece after a break is another)
    assert breaks == {} and counters["stats"]["unique_graphs"] == graphs, (breaks, dict(counters["stats"]),
                                                                            dict(counters["recompiles"]))
    dynamo.reset()


def test_a_second_compiled_model_keeps_its_graph_static(tmp_path, caplog):
    # the baseline (lambda = 0) then InSub (lambda = 1.5) in one process: without care, dynamo's recompile of the one
    # forward makes the config's loss weight a symbolic float (a slower compile and step on the GPU)
    import logging

    dynamo.reset()
    torch._logging.set_logs(dynamic=logging.INFO)
    try:
        for name, config in (("baseline", image_config(num_heads=1, diversity_weight=0.0)),
                             ("insub", image_config(num_heads=5, diversity_weight=1.5))):
            with caplog.at_level(logging.INFO):
                InSubTrainer(model=InSubForPreTraining(config), train_dataset=_rows("simclr"),
                             args=training_args(tmp_path / name, 4, 2, torch_compile=True,
                                                torch_compile_backend="eager", use_cpu=True)).train()
    finally:
        torch._logging.set_logs()
        dynamo.reset()
    symbols = [r.getMessage() for r in caplog.records if "create_symbol" in r.getMessage()]
    assert not [s for s in symbols if "diversity_weight" in s], symbols


def test_a_job_s_runs_each_compile_afresh(tmp_path):
    from insub_hf.jobs.pretraining import pretrain

    code = InSubForPreTraining.forward.__code__
    for name, heads in (("baseline", 1), ("insub", 5)):
        pretrain(image_config(num_heads=heads), _rows("simclr"),
                 training_args(tmp_path / name, 4, 2, torch_compile=True, torch_compile_backend="eager",
                               use_cpu=True))
    # the second run's forward is the only compiled one: no stale graph of the first in the recompile cache
    assert len(torch._dynamo.eval_frame._debug_get_cache_entry_list(code)) == 1
    dynamo.reset()

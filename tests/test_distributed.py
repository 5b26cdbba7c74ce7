"""Two CPU processes (torchrun, gloo) against one process on the same global batch: losses, gradients and the
updated weights agree; bad distributed input fails on every process with a message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

WORKER = Path(__file__).with_name("distributed_worker.py")


def _run(args: list[str], out: Path) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    result = subprocess.run(
        [sys.executable, *args, str(out)], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def _torchrun(scenario: str) -> list[str]:
    return ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(WORKER), scenario]


@pytest.fixture(scope="module")
def equivalence(tmp_path_factory):
    root = tmp_path_factory.mktemp("distributed")
    _run([str(WORKER), "equivalence"], root / "single")
    _run(_torchrun("equivalence"), root / "multi")
    return root


def _load(root: Path, kind: str, setting: str) -> list[dict[str, torch.Tensor]]:
    ranks = (0,) if setting == "single" else (0, 1)
    return [load_file(str(root / setting / f"{kind}_rank{r}.safetensors")) for r in ranks]


def test_two_processes_match_one_process_step_for_step(equivalence):
    (single,), multi = _load(equivalence, "trainer", "single"), _load(equivalence, "trainer", "multi")
    # each process's loss is the mean over its own anchors; their mean is the global-batch loss
    torch.testing.assert_close((multi[0]["losses"] + multi[1]["losses"]) / 2, single["losses"], atol=1e-5, rtol=0)
    assert not torch.allclose(multi[0]["losses"], multi[1]["losses"])  # the processes did see different samples
    grads = [k for k in single if k.startswith("grad.")]
    assert len(grads) > 20 and any("heads" in k for k in grads) and any("encoder" in k for k in grads)
    for rank in (0, 1):
        for key in single:
            if key != "losses":
                torch.testing.assert_close(multi[rank][key], single[key], atol=1e-5, rtol=0, msg=key)


def test_batch_level_losses_gather_with_the_right_gradient_scale(equivalence):
    """SCD and Barlow Twins (cross-correlation over the batch), VICReg (variance and covariance over the batch) and
    Self-GenomeNet (negatives from the batch): DDP averages the
    processes' gradients, so the average of the per-process input gradients (W = 2) must equal the single-process
    gradient of the global loss. The DINO centre is all-reduced."""
    (single,), multi = _load(equivalence, "losses", "single"), _load(equivalence, "losses", "multi")
    for key, value in single.items():
        if key == "dino.center":  # all-reduced: every process holds the single-process centre
            assert value.abs().sum() > 0
            for rank in (0, 1):
                torch.testing.assert_close(multi[rank][key], value, atol=1e-6, rtol=0)
        elif key.endswith(".loss"):
            torch.testing.assert_close((multi[0][key] + multi[1][key]) / 2, value, atol=1e-5, rtol=0)
        elif value.shape[0] == 8:  # per-sample inputs: each process holds half
            torch.testing.assert_close(torch.cat([multi[0][key], multi[1][key]]) / 2, value, atol=1e-6, rtol=0)
        else:  # shared weights
            torch.testing.assert_close((multi[0][key] + multi[1][key]) / 2, value, atol=1e-6, rtol=0)


def test_bad_distributed_input_fails_on_every_process(tmp_path):
    _run(_torchrun("errors"), tmp_path)
    for rank in (0, 1):
        messages = json.loads((tmp_path / f"errors_rank{rank}.json").read_text())
        assert "global_batch_size=7 must be a positive multiple of the world size (2 processes)" in messages[
            "global_batch_size"]
        assert "The model config differs across the 2 processes" in messages["config"]
        assert "num_heads: rank 0=3, rank 1=4" in messages["config"]
        assert "sync_batchnorm=True" in messages["sync_batchnorm"] and "GPU only" in messages["sync_batchnorm"]


def test_a_cpu_launch_without_flags_is_distributed_or_refused(tmp_path):
    _run(_torchrun("defaults"), tmp_path)
    for rank in (0, 1):
        found = json.loads((tmp_path / f"defaults_rank{rank}.json").read_text())
        # InSubTrainingArguments: one gloo run over both processes, with no flag given
        assert (found["parallel_mode"], found["world_size"], found["backend"]) == ("distributed", 2, "gloo")
        assert found["process_group"] == 2
        # plain TrainingArguments would train each process alone: refused before training, naming the flags
        assert "started 2 processes" in found["plain"] and "--use_cpu true --ddp_backend gloo" in found["plain"]


def test_sync_batchnorm_conversion_keeps_a_single_process_run_unchanged():
    from .conftest import tiny_config

    from insub_hf import InSubForPreTraining
    from insub_hf.distributed import convert_sync_batchnorm

    torch.manual_seed(0)
    model = InSubForPreTraining(tiny_config())
    views = dict(pixel_values=torch.randn(6, 3, 32, 32), pixel_values_2=torch.randn(6, 3, 32, 32))
    expected = model(**views).loss
    state = {k: v.clone() for k, v in model.state_dict().items()}
    converted = convert_sync_batchnorm(model)
    norms = [m for m in converted.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    assert norms and all(isinstance(m, torch.nn.SyncBatchNorm) for m in norms)
    assert set(converted.state_dict()) == set(state)  # checkpoints stay interchangeable
    model.load_state_dict(state)
    torch.testing.assert_close(converted(**views).loss, expected)
    # per-head slicing still finds the (now synchronised) BatchNorms
    heads = converted.insub.heads
    assert sum(isinstance(m, torch.nn.BatchNorm1d) for m in heads.as_modules()[0]) == 1


def test_global_batch_size_sets_the_per_process_batch_in_one_process(tmp_path):
    from insub_hf import InSubTrainingArguments

    args = InSubTrainingArguments(output_dir=str(tmp_path), global_batch_size=12, use_cpu=True, report_to="none")
    assert (args.world_size, args.per_device_train_batch_size) == (1, 12)
    with pytest.raises(ValueError, match="global_batch_size=0 must be a positive multiple"):
        InSubTrainingArguments(output_dir=str(tmp_path), global_batch_size=0, use_cpu=True, report_to="none")


@pytest.mark.parametrize("name, processes, machines", [("multi_gpu", 8, 1), ("multi_node", 16, 2)])
def test_the_example_accelerate_configs_load(name, processes, machines):
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import DistributedType

    config = load_config_from_file(str(Path(__file__).parents[1] / "examples" / "accelerate" / f"{name}.yaml"))
    assert config.distributed_type == DistributedType.MULTI_GPU and not config.use_cpu
    assert (config.num_processes, config.num_machines) == (processes, machines)
    assert config.num_processes % config.num_machines == 0

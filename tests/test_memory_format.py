"""channels_last only where it cannot hang: oneDNN's AVX2 channels_last convolution kernels hang or crash on narrow
layers, and the shapes change between torch releases, so the rule is the CPU's oneDNN ISA."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from insub_hf.training.memory_format import channels_last_hazard, resolve_channels_last
from insub_hf.training.trainer import InSubTrainingArguments

# Three InSubTrainer steps with default arguments on two narrow CIFAR ResNets: width 1/16 on grey 28x28 at 40 images
# per encoder batch (hung with torch 2.14.1: a 4 -> 8 strided 1x1 convolution) and width 1/32 on 32x32 at 96 (hung
# with torch 2.15.0: 2 -> 4), both in channels_last under ONEDNN_MAX_CPU_ISA=AVX2.
NARROW_TRAINING = """
import tempfile, torch
from datasets import Dataset
from insub_hf import InSubConfig, InSubForPreTraining, InSubTrainer, InSubTrainingArguments
from insub_hf.encoders.presets import named_encoder

for width, channels, size, batch in [(1 / 16, 1, 28, 20), (1 / 32, 3, 32, 48)]:
    torch.manual_seed(0)
    config = InSubConfig(encoder_config=named_encoder("resnet10_cifar", size, channels, width=width), num_heads=2,
                         head_hidden_sizes=[8], head_output_size=4)
    images = torch.rand(3 * batch, channels, size, size).numpy()
    data = Dataset.from_dict({"pixel_values": images, "pixel_values_2": images[::-1].copy()}).with_format("torch")
    args = InSubTrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=batch, max_steps=3,
                                  report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True)
    trainer = InSubTrainer(model=InSubForPreTraining(config), args=args, train_dataset=data)
    trainer.train()
    print("steps", trainer.state.global_step, "channels_last", args.channels_last, flush=True)
"""


@pytest.mark.parametrize(
    "capability, max_isa, safe",
    [
        ("AVX512", "", True),
        ("AVX512", "ALL", True),
        ("AVX512", "avx512_core_bf16", True),
        ("AVX512", "AVX10_1_512_AMX", True),
        ("AVX512", "AVX2", False),
        ("AVX512", "AVX2_VNNI", False),
        ("AVX512", "SSE41", False),
        ("AVX2", "", False),
        ("DEFAULT", "", False),  # not x86 (e.g. an Arm CPU): no evidence that it is safe
    ],
)
def test_channels_last_is_safe_only_with_onednn_avx512_kernels(capability, max_isa, safe):
    hazard = channels_last_hazard(capability, max_isa)
    assert (hazard is None) == safe
    if not safe:
        assert (max_isa.upper() if capability == "AVX512" else capability) in hazard


def test_the_resolved_layout(monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert resolve_channels_last(None, on_cpu=True) is False
    assert resolve_channels_last(False, on_cpu=True) is False
    with pytest.raises(ValueError, match=r"layout=True on the CPU: (ONEDNN_MAX_CPU_ISA=AVX2 caps oneDNN|this CPU runs oneDNN's \w+ kernels \(no AVX-512\)).*set it to False"):
        resolve_channels_last(True, on_cpu=True, field="layout")
    # a GPU (cuDNN) is not affected
    assert resolve_channels_last(None, on_cpu=False) is True and resolve_channels_last(True, on_cpu=False) is True
    assert resolve_channels_last(False, on_cpu=False) is False


def test_training_arguments_resolve_channels_last_at_construction(monkeypatch, tmp_path):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert InSubTrainingArguments(output_dir=str(tmp_path), use_cpu=True).channels_last is False
    with pytest.raises(ValueError, match=r"InSubTrainingArguments\.channels_last=True on the CPU"):
        InSubTrainingArguments(output_dir=str(tmp_path), use_cpu=True, channels_last=True)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "ALL")
    expected = channels_last_hazard() is None  # this CPU's own answer
    assert InSubTrainingArguments(output_dir=str(tmp_path), use_cpu=True).channels_last is expected


@pytest.mark.slow
def test_narrow_resnets_train_with_default_arguments_under_onednn_avx2():
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2")
    try:
        run = subprocess.run([sys.executable, "-c", NARROW_TRAINING], env=env, capture_output=True, text=True,
                             timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("3 training steps of a narrow CIFAR ResNet did not finish in 120 s under ONEDNN_MAX_CPU_ISA=AVX2: "
                    "the oneDNN AVX2 channels_last hang")
    assert run.returncode == 0, run.stderr[-3000:]
    assert [line for line in run.stdout.splitlines() if line.startswith("steps")] == ["steps 3 channels_last False"] * 2


UNCAPPED = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")}


@pytest.mark.slow
@pytest.mark.skipif(channels_last_hazard(max_isa="") is not None, reason="channels_last needs a CPU with AVX-512")
def test_where_onednn_runs_avx512_the_narrow_resnets_train_in_channels_last():
    """CI runs the suite with oneDNN capped at AVX2; here the channels_last path runs without the cap."""
    run = subprocess.run([sys.executable, "-c", NARROW_TRAINING], env=UNCAPPED, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert [line for line in run.stdout.splitlines() if line.startswith("steps")] == ["steps 3 channels_last True"] * 2
    test = "tests/test_trainer.py::test_channels_last_trains_a_conv_encoder_like_the_default_layout_and_saves_plain_weights"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test], env=UNCAPPED,
                         cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=240)
    assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout[-3000:]

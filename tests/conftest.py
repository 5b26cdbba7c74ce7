import faulthandler
import os
import tempfile

# remote code is cached by the commit it came from, and the tests' fake Hub repos reuse one commit: each session
# imports the code it saved, never a cached copy of an earlier session's (set before transformers reads it)
os.environ["HF_MODULES_CACHE"] = tempfile.mkdtemp(prefix="insub-hf-test-modules-")

import pytest  # noqa: E402
import torch  # noqa: E402

import insub_hf  # noqa: F401, E402  (registers the Auto classes)
from insub_hf import InSubConfig  # noqa: E402

TINY_VIT = dict(
    model_type="vit", image_size=32, patch_size=4, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
    intermediate_size=64,
)


def tiny_config(**overrides) -> InSubConfig:
    kwargs = dict(encoder_config=dict(TINY_VIT), num_heads=3, head_hidden_sizes=[48], head_output_size=16)
    kwargs.update(overrides)
    return InSubConfig(**kwargs)


def cli_error(argv: list[str], capsys) -> str:
    """Runs `insub-hf ARGV`, which must refuse its input as argparse does: exit status 2, the usage line and one
    line of error last on stderr, no traceback. Returns that line."""
    from insub_hf_cli import main

    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err[-2000:]
    lines = err.strip().splitlines()
    assert "Traceback" not in err and lines[-2].startswith(f"usage: insub-hf {argv[0]}"), err[-2000:]
    assert lines[-1].startswith(f"insub-hf {argv[0]}") and ": error: " in lines[-1], err[-2000:]
    return lines[-1]


def compare_argv(output_dir, **options) -> list[str]:
    """`insub-hf compare` arguments on the bundled data at a tiny budget (1 epoch of a CIFAR ResNet-18 at width 1/16,
    2 heads, 20 images per class); `options` add or override flags (lists for multi-value flags)."""
    options = {
        "output_dir": output_dir, "data_source": "bundled", "num_heads": 2, "num_train_epochs": 1,
        "per_device_train_batch_size": 20, "encoder": "resnet18_cifar", "width": 0.0625, "head_hidden_size": 16,
        "train_per_class": 20, "test_per_class": 10, **options,
    }
    argv = ["compare"]
    for name, value in options.items():
        argv += [f"--{name}", *map(str, value if isinstance(value, list) else [value])]
    return argv


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True, scope="session")
def _help_cache(tmp_path_factory):
    """Kept `--help` texts go to a folder of this test session, not the user's cache."""
    import os

    before = os.environ.get("INSUB_HF_CACHE")
    os.environ["INSUB_HF_CACHE"] = str(tmp_path_factory.mktemp("insub_hf_cache"))
    yield
    if before is None:
        os.environ.pop("INSUB_HF_CACHE")
    else:
        os.environ["INSUB_HF_CACHE"] = before


# A test still running at this multiple of the per-test timeout is hung where the timeout's signal cannot reach it
# (native code): the run ends there with every thread's stack, rather than at CI's limit with none
HANG_FACTOR = 3


def free_cores() -> int:
    """The cores not already busy with other work (the last minute's load average), at least 1."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this platform
        return os.cpu_count() or 1
    return max(1, min(torch.get_num_threads(), round((os.cpu_count() or 1) - load)))


def pytest_configure(config):
    """Threads for the cores really free: on a busy machine torch's OpenMP threads wait on each other at every
    parallel region while other work holds their cores, which slows a test far more than sharing the core would.
    Subprocesses (card snippets, the numeric tests' second pass) inherit the same budget; tokenizers stay serial."""
    threads = free_cores()
    if threads < torch.get_num_threads() and not os.environ.get("INSUB_OTHER_KERNELS_PASS"):  # that pass sets its own
        torch.set_num_threads(threads)
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True)
def _hang_backstop(request):
    timeout = request.config.getini("timeout")
    seconds = HANG_FACTOR * float(timeout or 0)
    if seconds:
        faulthandler.dump_traceback_later(seconds, exit=True)
    yield
    if seconds:
        faulthandler.cancel_dump_traceback_later()

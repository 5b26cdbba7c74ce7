"""How the benchmarks measure a training run on a GPU: the share of wall time its kernels run (`BusyMeter`), the host
syncs of a window of steps and where they come from (`SyncCounter`), and a window of warm-up, measured and profiled
steps (`Window`, also as a Trainer callback); and the aten calls of a block (`CountOps`: on a GPU, each is a kernel
launch). On a CPU the GPU-only parts record nothing."""

from __future__ import annotations

import collections
import time
import warnings
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import TrainerCallback


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


class BusyMeter:
    """Share of wall time the GPU runs kernels between `start` and `stop` (None on CPU): the union of the CUDA kernel
    intervals torch.profiler records, over the wall time of the window."""

    def __init__(self, device: torch.device):
        self.device, self.profiler, self.share = device, None, None

    def start(self) -> None:
        if self.device.type != "cuda":
            return
        from torch.profiler import ProfilerActivity, profile

        synchronize(self.device)
        self.profiler = profile(activities=[ProfilerActivity.CUDA])
        self.profiler.__enter__()
        self.wall = time.perf_counter()

    def stop(self) -> None:
        if self.profiler is None:
            return
        synchronize(self.device)
        wall_us = (time.perf_counter() - self.wall) * 1e6
        self.profiler.__exit__(None, None, None)
        intervals = sorted(
            (e.time_range.start, e.time_range.end) for e in self.profiler.events()
            if e.device_type == torch.autograd.DeviceType.CUDA
        )
        busy, end = 0.0, float("-inf")
        for start, stop in intervals:  # union: kernels of several streams may overlap
            if stop > end:
                busy += stop - max(start, end)
                end = stop
        self.share = min(1.0, busy / wall_us) if wall_us > 0 else None
        self.profiler = None


class SyncCounter:
    """On a GPU: the host syncs (a read that waits for the device: `.item()`, `bool(tensor)`, a copy to the host)
    between `start` and `stop`, as `torch.cuda.set_sync_debug_mode("warn")` reports them, with the places in the code
    that made them (the three most frequent)."""

    def __init__(self, device: torch.device):
        self.device, self.count, self.sites = device, None, []
        self._catch = self._records = None

    def start(self) -> None:
        if self.device.type != "cuda":
            return
        self._catch = warnings.catch_warnings(record=True)
        self._records = self._catch.__enter__()
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")

    def stop(self) -> None:
        if self._catch is None:
            return
        torch.cuda.set_sync_debug_mode("default")
        self._catch.__exit__(None, None, None)
        syncs = [w for w in self._records if "synchroniz" in str(w.message)]
        self.count = len(syncs)
        places = collections.Counter(f"{Path(w.filename).name}:{w.lineno}" for w in syncs)
        self.sites = [f"{place} x{n}" for place, n in places.most_common(3)]
        self._catch = None


class Window:
    """Counts steps; times the first `warmup` steps (from `begin`: compilation included) and steps
    `warmup .. warmup + measure` (on a GPU counting their host syncs, `syncs`), calls `at_window_end` (no argument)
    after those, and profiles the `profile` steps after them."""

    def __init__(self, device: torch.device, warmup: int, measure: int, profile: int, at_window_end=None):
        self.device, self.warmup, self.measure, self.profile = device, warmup, measure, profile
        self.busy = BusyMeter(device)
        self.syncs = SyncCounter(device)
        self.seconds = self.warmup_seconds = None
        self.at_window_end = at_window_end
        self.begin()

    def begin(self) -> None:
        """Where the warm-up starts (construction, unless called again: a Trainer's start of training)."""
        synchronize(self.device)
        self.started = time.perf_counter()

    @property
    def total(self) -> int:
        return self.warmup + self.measure + (self.profile if self.device.type == "cuda" else 0)

    def after_step(self, step: int) -> None:
        """`step`: steps finished so far."""
        if step == self.warmup:
            synchronize(self.device)
            self.start = time.perf_counter()
            self.warmup_seconds = self.start - self.started
            self.syncs.start()
        elif step == self.warmup + self.measure:
            self.syncs.stop()
            synchronize(self.device)
            self.seconds = time.perf_counter() - self.start
            if self.at_window_end is not None:
                self.at_window_end()
            self.busy.start()
        if step == self.total and self.device.type == "cuda":
            self.busy.stop()


class WindowCallback(TrainerCallback):
    def __init__(self, window: Window):
        self.window = window

    def on_train_begin(self, args, state, control, **kwargs):
        self.window.begin()

    def on_step_end(self, args, state, control, **kwargs):
        self.window.after_step(state.global_step)


class CountOps(TorchDispatchMode):
    """Counts every aten call made inside the block (on a GPU, each is a kernel launch), by op: `ops`."""

    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))

"""Random augmentation as a deterministic function of where it happens, so that a resumed run draws exactly the views
the uninterrupted run drew.

A per-sample view transform draws from torch's global generator, whose position depends on everything that ran
before it (the data loader's own draws, the order in which the Trainer fetches a batch and restores a checkpoint's
random state). Here every draw starts from a seed mixed from (run seed, epoch, sample index), or (run seed, step,
micro-batch, process) for views made per batch, and the global generator is left as it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.utils.data import Dataset as TorchDataset

_MASK = (1 << 64) - 1


def mix_seed(*parts: int) -> int:
    """A 63-bit seed from integers (splitmix64 over each part in turn): nearby inputs give unrelated seeds."""
    state = 0x9E3779B97F4A7C15
    for part in parts:
        state = (state ^ (int(part) & _MASK)) & _MASK
        state = (state + 0x9E3779B97F4A7C15) & _MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        state = z ^ (z >> 31)
    return state >> 1


@contextmanager
def seeded_draws(seed: int, device: torch.device | str | None = None) -> Iterator[None]:
    """Inside the block, torch's global generator (and `device`'s, when it is a GPU) starts from `seed`; after it,
    both continue where they were."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    gpus = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=gpus):
        torch.random.default_generator.manual_seed(seed)  # torch.manual_seed would reseed every GPU for good
        if gpus:
            with torch.cuda.device(device):
                torch.cuda.manual_seed(seed)
        yield


class SeededSamples(TorchDataset):
    """A map-style data set whose row `i` in epoch `e` is read with the generator seeded from (seed, e, i), so a
    per-sample random view transform (`ImageViews`, `DNAViews`, ...) gives the same views whenever the row is read:
    in a resumed run, in any data loader worker, in any order.

    `InSubTrainer` wraps its training set in this and sets the epoch at the start of each one.

    Args:
        dataset: rows by index (a `datasets.Dataset` with a view transform, or any map-style data set).
        seed: the run's data seed.
    """

    def __init__(self, dataset, seed: int):
        self.dataset = dataset
        self.seed = int(seed)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        with seeded_draws(mix_seed(self.seed, self.epoch, index)):
            return self.dataset[int(index)]

    def __getitems__(self, indices: list[int]) -> list:
        return [self[i] for i in indices]

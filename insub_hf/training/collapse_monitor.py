"""Collapse monitors for pretraining: RankMe of the mean head embedding and of each head, and the heads' spread,
measured on a fixed batch every N optimiser steps, logged by `InSubTrainer` with its other values, with one warning
when either falls below its threshold.

Two collapses threaten InSub: the representation's (every input mapped to a few directions: RankMe falls) and the
heads' (they agree on everything, so their spread carries no uncertainty: sigma falls; measured under the authors'
objective without the hinge, 0.073 -> 0.012, i.e. 0.15 alpha). The thresholds (also in `docs/evaluation.md`): RankMe
below 5 % of its ceiling, and a spread below 35 % of alpha, which the hinge at lambda 0.3 stays well above (about half
of alpha in the test's tiny runs) and the objective without it falls through.
"""

from __future__ import annotations

import warnings

import torch
from transformers import TrainerCallback

from ..evaluation.metrics import rankme

# RankMe of the mean embedding below this share of its ceiling min(batch, q): dimensional collapse
RANK_THRESHOLD = 0.05
# The heads' mean spread below this share of the hinge's alpha (M > 1): the heads have collapsed onto each other
SPREAD_THRESHOLD = 0.35


def collapse_measures(head_embeddings: torch.Tensor, sigma: torch.Tensor) -> dict[str, float]:
    """RankMe of the mean embedding, the lowest and mean RankMe of the heads, and the mean spread, from an
    `InSubModel` output: head_embeddings `(B, M, q)`, sigma `(B, q)`."""
    heads = [rankme(head_embeddings[:, h]) for h in range(head_embeddings.shape[1])]
    return {"rankme": rankme(head_embeddings.mean(dim=1)), "rankme_head_min": min(heads),
            "rankme_head_mean": sum(heads) / len(heads), "monitor_sigma": float(sigma.mean())}


class CollapseMonitorCallback(TrainerCallback):
    """Measures `collapse_measures` on `inputs` (a fixed batch of encoder inputs, e.g. normalised test images) at the
    first optimiser step and every `every` steps, the model in eval mode and without gradients, between steps (the
    step itself never waits for it). `InSubTrainer.log` adds the latest values to its log; `history` keeps them all.
    Warns once per run when RankMe of the mean embedding falls below `RANK_THRESHOLD` of min(batch, q), or (M > 1)
    the spread below `SPREAD_THRESHOLD` x alpha."""

    def __init__(self, inputs: dict[str, torch.Tensor], every: int = 50):
        if every < 1:
            raise ValueError(f"CollapseMonitorCallback.every must be an integer >= 1, got {every!r}.")
        self.inputs, self.every = inputs, every
        self.history: list[dict[str, float]] = []
        self.latest: dict[str, float] = {}
        self.warned = False

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if model is None or (state.global_step != 1 and state.global_step % self.every):
            return
        model = getattr(model, "module", model)
        insub = getattr(model, "insub", model)
        training = insub.training
        insub.eval()
        try:
            device = next(insub.parameters()).device
            with torch.no_grad():
                out = insub(**{k: v.to(device) for k, v in self.inputs.items()})
        finally:
            insub.train(training)
        self.latest = collapse_measures(out.head_embeddings.float(), out.sigma.float())
        self.history.append({"step": state.global_step, **self.latest})
        self._warn(insub.config, out.head_embeddings.shape)

    def _warn(self, config, shape) -> None:
        if self.warned:
            return
        batch, heads, width = shape
        ceiling = min(batch, width)
        problems = []
        if self.latest["rankme"] < RANK_THRESHOLD * ceiling:
            problems.append(f"RankMe of the mean embedding is {self.latest['rankme']:.2f} of at most {ceiling} "
                            f"(below {RANK_THRESHOLD:.0%}): the representation is collapsing onto a few directions")
        if heads > 1 and self.latest["monitor_sigma"] < SPREAD_THRESHOLD * config.diversity_alpha:
            floor = SPREAD_THRESHOLD * config.diversity_alpha
            problems.append(f"the heads' spread is {self.latest['monitor_sigma']:.4f}, below {SPREAD_THRESHOLD} x "
                            f"alpha = {floor:.4f}: the heads are collapsing onto each other and their spread no "
                            "longer carries uncertainty (raise diversity_weight)")
        if problems:
            self.warned = True
            warnings.warn("Collapse monitor: " + "; ".join(problems) + ".", stacklevel=2)

    def pop_latest(self) -> dict[str, float]:
        latest, self.latest = self.latest, {}
        return latest

"""The calibrated `uncertainty` as conformal tools read it: its conformal p-value, a model's p-values for a batch of
inputs, and which inputs of a batch are outliers with the false discovery rate controlled.

`uncertainty` u is the share of the n calibration scores strictly below an input's score, over n + 1; the conformal
p-value of the literature, p = (1 + #{calibration scores >= s}) / (n + 1), is then exactly 1 - u, read off u's
lattice (`conformal_pvalues`). For an input drawn like the calibration rows, P(p <= a) <= a. The Benjamini-Hochberg
procedure over such p-values (they share one calibration set, which makes them positively dependent, PRDS) controls
the false discovery rate among the flagged (Bates, Candes, Lei, Romano, Sesia, "Testing for outliers with conformal
p-values", Annals of Statistics 2023); `outliers_among` runs scipy's implementation of it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .fit_inputs import as_model_inputs
from .fitting import length_order
from .readings import is_calibrated


def serving_model(source) -> tuple:
    """`(InSub model, its processor or None)` behind `source`: the model itself, a pretraining model (its `insub`),
    a transformers pipeline (its model, image processor or tokenizer) or a sentence-transformers model whose first
    module holds one (its tokenizer)."""
    from transformers import Pipeline

    processor = None
    if isinstance(source, Pipeline):
        processor = source.image_processor or source.tokenizer
        source = source.model
    elif type(source).__name__ == "SentenceTransformer" and hasattr(source[0], "model"):
        processor, source = getattr(source[0], "tokenizer", None), source[0].model
    return getattr(source, "insub", source), processor


def calibration_size(source, call: str = "conformal_pvalues") -> int:
    """n, the calibration scores the `uncertainty` of `source` (a model, its config, its `uncertainty` block, or n
    itself) is ranked among; refuses a model that serves no calibrated `uncertainty`."""
    if isinstance(source, (int, np.integer)) and not isinstance(source, bool):
        if source < 1:
            raise ValueError(f"{call}(calibration={source}): the calibration scores number at least 1.")
        return int(source)
    config = getattr(serving_model(source)[0], "config", source)
    block = getattr(config, "uncertainty", config)
    if not isinstance(block, dict) or not is_calibrated(block):
        raise ValueError(f"{call}: the model serves no calibrated `uncertainty` (not fitted): fit it first with "
                         "model.fit_uncertainty(your_in_distribution_inputs).")
    return int(block["calibration_size"][1])


def conformal_pvalues(uncertainty, calibration) -> np.ndarray:
    """`(N,)` float64 conformal p-values of `uncertainty (N,)` (a tensor, array or list, as the model serves it),
    ranked among `calibration` scores (a model, its config or block, or their number n): p = (1 + #{calibration
    scores >= s}) / (n + 1), on the lattice 1/(n+1) .. 1; NaN where `uncertainty` is NaN (an input outside the
    calibrated lengths)."""
    n = calibration_size(calibration)
    u = torch.as_tensor(uncertainty).detach().double().cpu().numpy()
    if u.ndim != 1:
        raise ValueError(f"conformal_pvalues(uncertainty=...): one value per input, shape (N,); got {u.shape}.")
    served = ~np.isnan(u)
    if ((u[served] < 0) | (u[served] > n / (n + 1) + 1e-6)).any():
        raise ValueError(f"conformal_pvalues(uncertainty=...): a calibrated uncertainty ranked among {n} scores lies "
                         f"in [0, {n}/{n + 1}]; got values in [{u[served].min()}, {u[served].max()}].")
    below = np.rint(u * (n + 1))  # the count of calibration scores below, which u holds over n + 1
    return np.where(served, (n + 1 - below) / (n + 1), np.nan)


@torch.no_grad()
def model_pvalues(model, inputs, processor=None, batch_size: int = 256, call: str = "model_pvalues") -> np.ndarray:
    """`(N,)` conformal p-values of `inputs` (anything `fit_uncertainty` takes: PIL images, arrays, sentences, a
    `datasets.Dataset`, tensors) under `model` (an InSub model, a pipeline or a sentence-transformers model), in
    batches of `batch_size` (text by length); NaN for an input outside the calibrated lengths."""
    model, own_processor = serving_model(model)
    n = calibration_size(model, call)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"{call}(batch_size={batch_size!r}): an int >= 1.")
    tensors = as_model_inputs(model, inputs, "inputs", processor or own_processor, call)
    device = next(model.parameters()).device
    order, mask = length_order(tensors), tensors.get("attention_mask")
    served = []
    for start in range(0, order.shape[0], batch_size):
        index = order[start:start + batch_size]
        batch = {name: value[index] for name, value in tensors.items()}
        if mask is not None:  # padding past the batch's longest sentence changes nothing under the mask
            longest = int(batch["attention_mask"].sum(dim=1).max())
            batch = {name: value[:, :longest] if value.dim() == 2 else value for name, value in batch.items()}
        uncertainty = model.eval()(**{name: value.to(device) for name, value in batch.items()}).uncertainty
        if uncertainty is None:
            raise ValueError(f"{call}: the model's fitted `uncertainty` is stale (its weights changed since the fit) "
                             "and serves None: fit it again with model.fit_uncertainty(your_in_distribution_inputs).")
        served.append(uncertainty.float().cpu())
    return conformal_pvalues(torch.cat(served)[order.argsort()], n)


def check_fdr(fdr, call: str) -> float:
    if isinstance(fdr, bool) or not isinstance(fdr, (int, float)) or not 0 < fdr < 1:
        raise ValueError(f"{call}(fdr={fdr!r}): the false discovery rate to control, a number in (0, 1) (e.g. 0.1).")
    return float(fdr)


def outliers_among(pvalues, fdr: float = 0.1) -> np.ndarray:
    """`(N,)` bool: the rows of `pvalues (N,)` the Benjamini-Hochberg procedure flags at false discovery rate `fdr`
    (`scipy.stats.false_discovery_control`); NaN p-values (inputs not served) are left out and never flagged."""
    from scipy.stats import false_discovery_control

    fdr = check_fdr(fdr, "outliers_among")
    p = np.asarray(pvalues, dtype=np.float64)
    flagged = np.zeros(p.shape, dtype=bool)
    served = ~np.isnan(p)
    if served.any():
        flagged[served] = false_discovery_control(p[served], method="bh") <= fdr
    return flagged


@dataclass(frozen=True)
class OutlierSelection:
    """What `select_outliers` found: `flagged`, the row indices of the outliers (ascending); `pvalues (N,)`; `fdr`;
    `unserved`, the rows outside the calibrated lengths (never flagged, not tested)."""

    flagged: np.ndarray
    pvalues: np.ndarray
    fdr: float
    unserved: np.ndarray

    def __len__(self) -> int:
        return len(self.flagged)

    @classmethod
    def of(cls, pvalues: np.ndarray, fdr: float) -> OutlierSelection:
        """The selection Benjamini-Hochberg makes among `pvalues (N,)` at `fdr` (`outliers_among`)."""
        return cls(np.flatnonzero(outliers_among(pvalues, fdr)), pvalues, fdr, np.flatnonzero(np.isnan(pvalues)))


def select_outliers(model, inputs, fdr: float = 0.1, processor=None, batch_size: int = 256) -> OutlierSelection:
    """The outliers among `inputs` (anything `fit_uncertainty` takes) with the false discovery rate among them held
    at `fdr` (in expectation, for in-distribution rows drawn like the calibration rows): Benjamini-Hochberg over
    the model's conformal p-values (`model_pvalues`, `outliers_among`)."""
    fdr = check_fdr(fdr, "select_outliers")
    return OutlierSelection.of(model_pvalues(model, inputs, processor, batch_size, call="select_outliers"), fdr)

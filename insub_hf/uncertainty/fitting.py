"""Fitting a model's calibrated `uncertainty` (`InSubModel.fit_uncertainty`, the one call every job and a user
make): a k-NN bank of in-distribution representations, the heads' spread's direction fixed against outliers made
for the purpose (bank rows with their pixels, tokens or bases shuffled within each input: never a data set an
evaluation reports), and the calibrated reading's scores (`conformal.CalibrationScores`: each reading's values on
bank rows, and the combination's on held-out calibration rows), all saved with the weights."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from ..losses.diversity import head_spread
from tqdm.auto import tqdm
from transformers.utils import logging

from ..validation import check_range
from .conformal import CalibrationScores, fitted_settings
from .fit_inputs import as_model_inputs
from .knn import install_bank, knn_distance, new_bank
from .separation import bootstrap_auroc_interval, pairwise_auroc


# Calibration rows used at most, both splits together (their scores add 4 bytes a row per component to the weights)
CALIBRATION_ROWS = 2000
# The served reading's AUROC against the made outliers below which a fit warns that it cannot see outliers (0.5 is
# chance; the shuffled inputs are the easiest outliers there are)
SEES_OUTLIERS = 0.6
# Calibration rows needed at least: with n of them the largest `uncertainty` is n / (n + 1), which exceeds 0.95 (the
# threshold the package documents) only from n = 20
MIN_CALIBRATION_ROWS = 20
# Bank rows whose readings give each reading's centre and scale, at most
STANDARDISE_ROWS = 2000
# The fitting's own seed: which rows go to the bank and to each calibration split, and how the outliers are shuffled
FIT_SEED = 0


@dataclass
class FittedUncertainty:
    """What `fit_uncertainty` fitted: `components` combined ("knn", then "spread" where its direction held), the
    spread's `direction` (None: left out) with the AUROC of "high spread = outlier" on bank rows against the
    outliers made of them and its 90 % bootstrap interval, the k-NN distance's AUROC there, the bank's rows, k
    and `calibration_size`: the bank rows each reading's p-values are read on and the calibration rows ranked
    against; `auroc`: the served (combined) reading's AUROC against the made outliers, and `sees_outliers` whether
    it reaches `SEES_OUTLIERS` (else the fit warns: the reading does not tell inputs without structure from real
    ones)."""

    components: list[str]
    direction: int | None
    spread_auroc: float
    spread_interval: list[float]
    knn_auroc: float
    bank_size: int
    k: int
    calibration_size: list[int]
    auroc: float = float("nan")
    sees_outliers: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


def shuffled_within(inputs: dict[str, torch.Tensor], main: str, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Outliers made for the purpose from in-distribution `inputs` (the encoder's, batched): each input's pixels
    (`pixel_values (B, C, H, W)`, one order for all channels), bases (`dna_one_hot (B, L, 4)`) or tokens
    (`input_ids (B, T)`, between the first and the last token its `attention_mask` keeps) shuffled among its own
    positions: the same values, none of the structure."""
    x = inputs[main]
    if main == "pixel_values":
        flat = x.flatten(2)  # (B, C, HW)
        order = torch.rand(flat.shape[0], flat.shape[2], generator=generator).argsort(dim=1).to(x.device)
        return {**inputs, main: flat.gather(2, order[:, None].expand_as(flat)).reshape(x.shape)}
    if main == "dna_one_hot":
        order = torch.rand(x.shape[0], x.shape[1], generator=generator).argsort(dim=1).to(x.device)
        return {**inputs, main: x.gather(1, order[..., None].expand_as(x))}
    mask = inputs.get("attention_mask")
    mask = torch.ones_like(x) if mask is None else mask
    positions = torch.arange(x.shape[1], device=x.device).expand_as(x)
    length = mask.sum(dim=1, keepdim=True)
    movable = (positions >= 1) & (positions < length - 1)  # the first and last kept tokens ([CLS], [SEP]) stay
    far = torch.full(x.shape, float(x.shape[1]), device=x.device)
    keys = torch.where(movable, torch.rand(x.shape, generator=generator).to(x.device), far + positions)
    order = keys.argsort(dim=1, stable=True)  # movable positions in random order, then the others in place
    targets = torch.where(movable, positions.float(), far + positions).argsort(dim=1, stable=True)
    return {**inputs, main: x.clone().scatter_(1, targets, x.gather(1, order))}


def length_order(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """`(N,)`: the rows in the order they are embedded: by token count where there is an `attention_mask` (each batch
    then holds sentences of about one length and is cut to its longest, not the set's), else as given."""
    mask = inputs.get("attention_mask")
    rows = next(iter(inputs.values())).shape[0]
    return torch.arange(rows) if mask is None else mask.sum(dim=1).argsort(stable=True)


@torch.no_grad()
def representations_and_spread(model, inputs: dict[str, torch.Tensor], batch_size: int,
                               progress=None) -> tuple[torch.Tensor, torch.Tensor]:
    """`(N, d)` representations and `(N,)` heads' spreads (averaged over dimensions, not oriented) of the model's
    inputs `inputs` (tensors with N rows), in eval mode, batch by batch (text by length), on the CPU; `progress`
    (a tqdm bar) counts the rows."""
    device = next(model.parameters()).device
    names = [name for name in model.encoder.input_names if inputs.get(name) is not None]
    order = length_order(inputs)
    mask = inputs.get("attention_mask")
    representations, spreads = [], []
    for start in range(0, order.shape[0], batch_size):
        index = order[start:start + batch_size]
        batch = {name: inputs[name][index] for name in names}
        if mask is not None:  # padding past the batch's longest sentence changes nothing under the mask: cut it
            longest = int(batch["attention_mask"].sum(dim=1).max())
            batch = {name: value[:, :longest] if value.dim() == 2 else value for name, value in batch.items()}
        representation = model.get_representation(**{name: value.to(device) for name, value in batch.items()})
        sigma = head_spread(model.embed_heads(representation), model.config.diversity_eps)  # (B, q)
        spreads.append(sigma.mean(dim=-1).float().cpu())
        representations.append(representation.float().cpu())
        if progress is not None:
            progress.update(index.shape[0])
    back = order.argsort()  # to the rows' own order
    return torch.cat(representations)[back], torch.cat(spreads)[back]


def rows(inputs: dict[str, torch.Tensor], index: torch.Tensor) -> dict[str, torch.Tensor]:
    return {name: value[index] for name, value in inputs.items() if value is not None}


def rows_also_in(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """`(M,)` bool: which rows of `second (M, ...)` are also rows of `first (N, ...)`, compared whole by their bytes
    (no arithmetic on them: a projection's rounding depends on the matrix it is computed in, and missed rows)."""
    if first.flatten(1).shape[1] != second.flatten(1).shape[1]:
        return torch.zeros(second.shape[0], dtype=torch.bool)
    common = torch.promote_types(first.dtype, second.dtype)  # a float32 row and its float64 copy are one row
    a, b = (np.ascontiguousarray(t.detach().flatten(1).to(common).cpu().numpy()) for t in (first, second))
    whole = np.dtype((np.void, a.dtype.itemsize * a.shape[1]))  # one row, one opaque value
    return torch.from_numpy(np.isin(b.view(whole).ravel(), a.view(whole).ravel()))


def input_length_range(inputs: dict[str, torch.Tensor], main: str) -> list[int] | None:
    """`[low, high]` lengths of the calibration rows `inputs`: a DNA model's window (one length per batch), a text
    model's token counts (of `attention_mask`, else the padded length); None for images, which have one size."""
    if main == "dna_one_hot":
        return [inputs[main].shape[1]] * 2
    if main != "input_ids":
        return None
    mask = inputs.get("attention_mask")
    counts = mask.sum(dim=1) if mask is not None else torch.full((inputs[main].shape[0],), inputs[main].shape[1])
    return [int(counts.min()), int(counts.max())]


def checked_arguments(k, batch_size: int) -> None:
    if k is not None:
        check_range("fit_uncertainty: k", k, low=1, integer=True)
    check_range("fit_uncertainty: batch_size", batch_size, low=1, integer=True)


def fit_uncertainty(model, inputs, calibration_inputs=None, k: int | None = None, batch_size: int = 256,
                    seed: int = FIT_SEED, processor=None, show_progress: bool | None = None) -> FittedUncertainty:
    """Fits `model`'s (an `InSubModel`) calibrated `uncertainty` on in-distribution inputs, and installs it whole,
    replacing the previous fit only once every part is built and checked: a refused fit changes nothing.

    Args:
        inputs: N in-distribution rows in any form `fit_inputs.as_model_inputs` takes (a processor's output, PIL
            images, a numpy array, sentences, a `datasets.Dataset`): the k-NN bank.
        calibration_inputs: held-out in-distribution rows the model was not trained on, none of them in `inputs`,
            which the combined reading is ranked against (at least `MIN_CALIBRATION_ROWS`, at most
            `CALIBRATION_ROWS` used); None: taken from `inputs` (at most half of them), the rest being the bank.
        k: the k-NN distance's neighbour, an int >= 1 (default: the config's, capped at the bank's rows less one
            with a warning; an explicit k is never changed).
        batch_size: rows per forward, an int >= 1.
        seed: which rows go where, and the outliers' shuffles.
        processor: the model's image processor or tokenizer for raw inputs (default: the one saved beside it).
        show_progress: a progress bar over the rows (default: from 2,000 rows).
    """
    checked_arguments(k, batch_size)
    main = model.encoder.main_input_name
    inputs = as_model_inputs(model, inputs, "inputs", processor)
    if calibration_inputs is not None:
        calibration_inputs = as_model_inputs(model, calibration_inputs, "calibration_inputs", processor)
    generator = torch.Generator().manual_seed(seed)
    n = inputs[main].shape[0]
    order = torch.randperm(n, generator=generator)
    if calibration_inputs is None:
        taken = min(CALIBRATION_ROWS, n // 2)
        calibration_inputs, inputs = rows(inputs, order[:taken]), rows(inputs, order[taken:])
    else:
        shared = int(rows_also_in(inputs[main], calibration_inputs[main]).sum())
        if shared:
            raise ValueError(f"fit_uncertainty(calibration_inputs=...): {shared} of its rows are also rows of `inputs` "
                             "(the bank); calibration rows must be held out from it, or the 5 % at 0.95 does not "
                             "hold. Give other rows, or leave calibration_inputs out (then half of `inputs` is held "
                             "out).")
        held = calibration_inputs[main].shape[0]
        calibration_inputs = rows(calibration_inputs, torch.randperm(held, generator=generator)[:CALIBRATION_ROWS])
    size, bank_rows = calibration_inputs[main].shape[0], inputs[main].shape[0]
    if size < MIN_CALIBRATION_ROWS:
        raise ValueError(f"fit_uncertainty: {size} calibration rows are too few; `uncertainty > 0.95` can flag an input "
                         f"only from {MIN_CALIBRATION_ROWS} of them (hundreds for a useful reading): give more inputs "
                         "(or calibration_inputs).")
    chosen = model.config.uncertainty["k"] if k is None else k
    if chosen > bank_rows - 1:  # a bank row's own k-th neighbour other than itself places the reading
        if k is not None:
            raise ValueError(f"fit_uncertainty: k={k} needs at least {k + 1} bank rows, got {bank_rows}; give more "
                             f"inputs or a smaller k (at most {bank_rows - 1}).")
        if bank_rows < 2:
            raise ValueError(f"fit_uncertainty: {bank_rows} bank rows are too few; give at least 2 (hundreds for a "
                             "useful reading).")
        logging.get_logger(__name__).warning(f"fit_uncertainty: the config's k={chosen} needs {chosen + 1} bank rows, "
                                             f"got {bank_rows}; fitting k={bank_rows - 1} (pass k=... to choose).")
        chosen = bank_rows - 1
    k = int(chosen)
    # A: bank rows whose readings place each reading's values (each searched without itself), and of which the
    # outliers are made that fix the spread's direction; B, the calibration rows, only ranks: the guarantee needs
    # only the calibration rows unseen by every choice of the fit
    own = torch.randperm(bank_rows, generator=generator)[:STANDARDISE_ROWS]
    made = shuffled_within(rows(inputs, own), main, generator)
    total = bank_rows + size + len(own)
    progress = tqdm(total=total, desc="fit_uncertainty: embedding rows", unit="row", mininterval=10,
                    disable=(total < 2000) if show_progress is None else not show_progress)
    was_training = model.training
    model.eval()
    try:
        bank, bank_spread = representations_and_spread(model, inputs, batch_size, progress)
        calibration, spread = representations_and_spread(model, calibration_inputs, batch_size, progress)
        made_representation, made_spread = representations_and_spread(model, made, batch_size, progress)
    finally:
        model.train(was_training)
        progress.close()
    knn_bank = new_bank(model, bank, k)
    device = knn_bank.bank.device  # the features came back to the CPU; the bank is where the model is
    low, high = bootstrap_auroc_interval(bank_spread[own], made_spread)
    direction = 1 if low > 0.5 else (-1 if high < 0.5 else None)
    components = ["knn"] + (["spread"] if direction is not None else [])
    own_knn = knn_distance(torch.nn.functional.normalize(bank[own], dim=-1), knn_bank.bank.cpu(), k + 1)
    made_knn = knn_bank(made_representation.to(device), k).cpu()
    knn = knn_bank(calibration.to(device), k).cpu()
    # (C, rows) each: the readings of A, of the outliers made of A, and of the calibration rows B
    reference, made_scores, scores = (torch.stack([knn_reading] + ([direction * spread_reading] if direction else []))
                                      for knn_reading, spread_reading in ((own_knn, bank_spread[own]),
                                                                          (made_knn, made_spread), (knn, spread)))
    calibration_scores = CalibrationScores.fitted(reference, scores)
    auroc = pairwise_auroc(calibration_scores.statistic(reference), calibration_scores.statistic(made_scores))
    knn_bank.calibration = calibration_scores.to(device)
    settings = dict(reading="calibrated", k=k, direction=direction, components=components, combination="fisher",
                    calibration_size=[len(own), size], length_buckets=None,
                    length_range=input_length_range(calibration_inputs, main), made_outlier_auroc=round(auroc, 4))
    settings["fitted_with"] = fitted_settings(settings)
    fitted = FittedUncertainty(
        components, direction, pairwise_auroc(bank_spread[own], made_spread), [low, high],
        pairwise_auroc(own_knn, made_knn), bank.shape[0], k, [len(own), size], auroc, auroc >= SEES_OUTLIERS)
    if not fitted.sees_outliers:
        logging.get_logger(__name__).warning(
            f"fit_uncertainty: the fitted reading tells in-distribution rows from the same rows shuffled within "
            f"themselves (no structure left, or only local) with AUROC {100 * auroc:.1f} % (50 % is chance), so it "
            "cannot see outliers: `uncertainty` will not flag them. Fit on more data, or use another encoder "
            "(docs/usage.md, 'A reading that cannot see outliers').")
    install_bank(model, knn_bank, **settings)
    return fitted

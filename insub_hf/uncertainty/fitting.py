"""Fitting a model's calibrated `uncertainty` (`InSubModel.fit_uncertainty`, the one call every job and a user
make): a k-NN bank of in-distribution representations, the heads' spread's direction fixed against outliers made
for the purpose (the calibration inputs with their pixels, tokens or bases shuffled within each input: never a data
set an evaluation reports), and the calibration scores of two held-out splits (`conformal.CalibrationScores`), all
saved with the weights."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from ..losses.diversity import head_spread
from .conformal import CalibrationScores
from .knn import BANK, clear_bank, knn_distance, set_bank
from .separation import bootstrap_auroc_interval, pairwise_auroc

# Calibration rows used at most, both splits together (their scores add 4 bytes a row per component to the weights)
CALIBRATION_ROWS = 2000
# Bank rows whose readings give each reading's centre and scale, at most
STANDARDISE_ROWS = 2000
# The fitting's own seed: which rows go to the bank and to each calibration split, and how the outliers are shuffled
FIT_SEED = 0


@dataclass
class FittedUncertainty:
    """What `fit_uncertainty` fitted: `components` combined ("knn", then "spread" where its direction held), the
    spread's `direction` (None: left out) with the AUROC of "high spread = outlier" on the calibration inputs
    against the made outliers and its 90 % bootstrap interval, the k-NN distance's AUROC there, the bank's rows, k
    and `calibration_size`: the bank rows each reading was standardised on and the calibration rows ranked
    against."""

    components: list[str]
    direction: int | None
    spread_auroc: float
    spread_interval: list[float]
    knn_auroc: float
    bank_size: int
    k: int
    calibration_size: list[int]

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


@torch.no_grad()
def representations_and_spread(model, inputs: dict[str, torch.Tensor], batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`(N, d)` representations and `(N,)` heads' spreads (averaged over dimensions, not oriented) of the model's
    inputs `inputs` (tensors with N rows), in eval mode, batch by batch, on the CPU."""
    device = next(model.parameters()).device
    names = [name for name in model.encoder.input_names if inputs.get(name) is not None]
    rows = inputs[model.encoder.main_input_name].shape[0]
    representations, spreads = [], []
    for start in range(0, rows, batch_size):
        batch = {name: inputs[name][start:start + batch_size].to(device) for name in names}
        representation = model.get_representation(**batch)
        sigma = head_spread(model.embed_heads(representation), model.config.diversity_eps)  # (B, q)
        spreads.append(sigma.mean(dim=-1).float().cpu())
        representations.append(representation.float().cpu())
    return torch.cat(representations), torch.cat(spreads)


def rows(inputs: dict[str, torch.Tensor], index: torch.Tensor) -> dict[str, torch.Tensor]:
    return {name: value[index] for name, value in inputs.items() if value is not None}


def fit_uncertainty(model, inputs: dict[str, torch.Tensor], calibration_inputs: dict[str, torch.Tensor] | None = None,
                    k: int | None = None, batch_size: int = 256, seed: int = FIT_SEED) -> FittedUncertainty:
    """Fits `model`'s (an `InSubModel`) calibrated `uncertainty` on in-distribution inputs.

    Args:
        inputs: the encoder's inputs of N in-distribution rows (`{"pixel_values": (N, C, H, W)}`, a processor's
            output, ...): the k-NN bank.
        calibration_inputs: held-out in-distribution rows the model was not trained on, which the combined reading
            is ranked against (at most `CALIBRATION_ROWS`); None: taken from `inputs` (at most half of them), the
            rest being the bank. Rows the model was trained on read as more typical than new ones, so held-out rows
            keep the 5 % at 0.95 closest to its promise.
        k: the k-NN distance's neighbour (default: the config's; at most the bank's rows less one).
        seed: which rows go where, and the outliers' shuffles.
    """
    generator = torch.Generator().manual_seed(seed)
    main = model.encoder.main_input_name
    n = inputs[main].shape[0]
    order = torch.randperm(n, generator=generator)
    if calibration_inputs is None:
        taken = min(CALIBRATION_ROWS, n // 2)
        calibration_inputs, inputs = rows(inputs, order[:taken]), rows(inputs, order[taken:])
    else:
        held = calibration_inputs[main].shape[0]
        calibration_inputs = rows(calibration_inputs, torch.randperm(held, generator=generator)[:CALIBRATION_ROWS])
    size = calibration_inputs[main].shape[0]
    if size < 2 or inputs[main].shape[0] < 2:
        raise ValueError(f"fit_uncertainty: {inputs[main].shape[0]} bank rows and {size} calibration rows are too few; "
                         "give at least 2 of each (hundreds for a useful reading).")
    was_training = model.training
    model.eval()
    clear_bank(model)
    try:
        bank, bank_spread = representations_and_spread(model, inputs, batch_size)
        calibration, spread = representations_and_spread(model, calibration_inputs, batch_size)
        outliers = shuffled_within(calibration_inputs, main, generator)
        outlier_representation, outlier_spread = representations_and_spread(model, outliers, batch_size)
    finally:
        model.train(was_training)
    k = min(model.config.uncertainty["k"] if k is None else k, bank.shape[0] - 1)
    set_bank(model, bank, k, read=False)
    knn_bank = getattr(model, BANK)
    device = knn_bank.bank.device  # the features came back to the CPU; the bank is where the model is
    knn = knn_bank(calibration.to(device), k).cpu()
    low, high = bootstrap_auroc_interval(spread, outlier_spread)
    direction = 1 if low > 0.5 else (-1 if high < 0.5 else None)
    components = ["knn"] + (["spread"] if direction is not None else [])
    # each reading's centre and scale from bank rows (their k-th neighbour other than themselves), so that every
    # calibration row ranks the combination: the guarantee needs only the calibration rows unseen by the fit
    own = torch.randperm(bank.shape[0], generator=generator)[:STANDARDISE_ROWS]
    own_knn = knn_distance(torch.nn.functional.normalize(bank[own], dim=-1), knn_bank.bank.cpu(), k + 1)
    standardise = torch.stack([own_knn] + ([direction * bank_spread[own]] if direction is not None else []))
    scores = torch.stack([knn] + ([direction * spread] if direction is not None else []))  # (C, n_calibration)
    knn_bank.calibration = CalibrationScores.fitted(standardise, scores).to(device)
    model.config.set_uncertainty(reading="calibrated", direction=direction, components=components,
                                 calibration_size=[len(own), size])
    return FittedUncertainty(
        components, direction, pairwise_auroc(spread, outlier_spread), [low, high],
        pairwise_auroc(knn, knn_bank(outlier_representation.to(device), k).cpu()), bank.shape[0], k,
        [len(own), size])

"""The k-NN reading inside a model: a bank of L2-normalised representations of in-distribution inputs, saved with
the weights, so that `InSubModel`'s `uncertainty` can be the cosine distance to the k-th nearest of them on every path
that loads the model (`config.uncertainty['reading'] == "knn"`), and so that `InSubOODDetector` measures that one
bank; and that distance (`knn_distance`), the one every k-NN reading and measurement of the package computes."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from ..checksums import weights_fingerprint
from .conformal import CalibrationScores

def knn_distance(embeddings: torch.Tensor, bank: torch.Tensor, k: int) -> torch.Tensor:
    """`(N,)` cosine distance of each row of `embeddings (N, d)` to its k-th nearest row of `bank (n, d)` (both
    L2-normalised; a query that is itself in the bank has distance 0 to its first neighbour)."""
    if not 1 <= k <= bank.shape[0]:  # topk of fewer rows would give another neighbour, silently
        raise ValueError(f"knn_distance: k={k} must be between 1 and the bank's {bank.shape[0]} rows.")
    similarity = embeddings.float() @ bank.float().T  # (N, n)
    return 1 - similarity.topk(k, dim=1).values[:, -1]


# The bank's name in the model (its buffer is saved as `knn_bank.bank`)
BANK = "knn_bank"


class KnnBank(nn.Module):
    """`(N, d)` unit-length representations as a buffer; called on representations `(B, d)` it gives `(B,)`, the
    cosine distance of each to its k-th nearest bank row.

    It knows the weights it was embedded with (`config.uncertainty['bank_weights']`, their SHA-256). Hashing all
    their bytes on every forward would cost more than the k-NN search, so the bank keeps the model's floating tensors
    (`guarded_tensors`, as `GuardedTensors`) and their fingerprint (`values_fingerprint`: a few reductions, on the
    device); a forward compares it (`check_current`), which an optimiser step (compiled or not), a train-mode
    forward's BatchNorm statistics or an edit through `.data` (which no change counter sees) moves. Where the tensors may have been
    moved, cast or replaced (`model.to(...)`, `load_state_dict`) or were never checked (a model just loaded), the
    SHA-256 decides once. A bank of other weights is refused, never served."""

    def __init__(self, size: int, dim: int, calibration: tuple[int, int, int] | None = None):
        """`calibration`: (components, n_a, n_b, combination) of the calibrated reading's scores (`conformal.CalibrationScores`,
        the module `calibration`), which belong to the same weights as the bank; None: none."""
        super().__init__()
        self.register_buffer("bank", torch.zeros(size, dim))
        self.calibration = None if calibration is None else CalibrationScores(*calibration)
        self.tensors: GuardedTensors | None = None  # the weights checked last (None: check by SHA-256 next)
        self.register_buffer("norms", torch.zeros(0), persistent=False)  # and their `values_fingerprint`
        self.register_buffer("scale", torch.zeros(0), persistent=False)  # and its `fingerprint_scale`

    def forward(self, representation: torch.Tensor, k: int) -> torch.Tensor:
        return knn_distance(F.normalize(representation.float(), dim=-1), self.bank.float(), k)

    def remember(self, model: nn.Module) -> None:
        """Keeps `model`'s tensors and their norms as the weights the bank belongs to (they were just verified)."""
        self.tensors = GuardedTensors(guarded_tensors(model))
        self.norms = values_fingerprint(self.tensors)
        self.scale = fingerprint_scale(self.tensors, self.norms)

    def verify(self, model: nn.Module) -> None:
        """Raises unless the SHA-256 of `model`'s encoder and heads is the one the bank was embedded with, saying
        why: a bank never set, the model cast to another dtype, or other weights."""
        recorded, way_out = model.config.uncertainty["bank_weights"], (
            "model.fit_uncertainty(your_inputs) (or insub_hf.uncertainty.knn.clear_bank(model): `uncertainty` is None "
            "until then)")
        if recorded is None:
            raise ValueError(f"InSubModel: its config names a k-NN bank of {self.bank.shape[0]} rows "
                             "(config.uncertainty['bank_size']) that was never set: no fit recorded the weights it "
                             f"belongs to. Fit it: {way_out}.")
        if encoder_and_heads_fingerprint(model) != recorded:
            cast = sorted({str(t.dtype) for t in guarded_tensors(model)} - {str(torch.float32)})
            if cast and encoder_and_heads_fingerprint(model, torch.float32) == recorded:
                raise ValueError(f"InSubModel: the model was cast to {', '.join(cast)} after its `uncertainty` was "
                                 "fitted in torch.float32 (the same weights), and the fit's numbers hold only there: "
                                 f"cast it back, model.to(torch.float32), or fit it again in this dtype: {way_out}.")
            raise ValueError(
                "InSubModel: its k-NN bank (config.uncertainty['bank_size'] rows) was embedded with other weights than "
                "the model has now (trained or edited since), so its `uncertainty` would be distances to another "
                f"model's representations. Fit it again on these weights: {way_out}."
            )
        self.remember(model)

    def check_current(self, model: nn.Module) -> None:
        """Raises unless `model`'s encoder and heads are the weights the bank was embedded with (one host read)."""
        if self.tensors is None:
            self.verify(model)
        elif not torch.equal(values_fingerprint(self.tensors), self.norms):
            self.tensors = None  # the SHA-256 says what they are now, and the message is its
            self.verify(model)

    def current(self) -> torch.Tensor:
        """`()` bool on the device, no host read: whether the remembered tensors still have their norms (what a
        compiled forward reads; `remember` must have run). A compiled reduction sums in another order than the
        eager one that remembered them, so they are compared within `COMPILED_TOLERANCE` of their scale."""
        return ((values_fingerprint(self.tensors) - self.norms).abs() <= COMPILED_TOLERANCE * self.scale).all()

    def _apply(self, fn, *args, **kwargs):
        # the model's tensors may be moved or cast with it: their norms there are checked by SHA-256 once
        self.tensors = None
        return super()._apply(fn, *args, **kwargs)

    def _load_from_state_dict(self, *args, **kwargs):
        # a load_state_dict of the model reaches every child: its weights may be others (or other objects) now
        self.tensors = None
        return super()._load_from_state_dict(*args, **kwargs)


def guarded_tensors(model: nn.Module) -> list[torch.Tensor]:
    """The floating parameters and buffers of `model` (an `InSubModel`), its bank left out: the weights a fit
    belongs to."""
    return [t for name, t in [*model.named_parameters(), *model.named_buffers()]
            if t.is_floating_point() and not name.startswith(BANK + ".")]


class GuardedTensors:
    """The tensors a fit belongs to, grouped so that their fingerprint is a few kernels, not one per tensor: the
    vectors (BatchNorm's weights, biases and statistics, the layers' biases: most of the tensors and few of the
    values) read as one concatenation, the rest one by one (`values_fingerprint`)."""

    def __init__(self, tensors: list[torch.Tensor]):
        self.vectors = [t for t in tensors if t.dim() == 1]
        self.others = [t for t in tensors if t.dim() != 1]
        size = sum(t.numel() for t in self.vectors)
        device = self.vectors[0].device if self.vectors else None
        # fixed weights of the vectors' values: their weighted sum moves where a sign flip or a swap keeps the norm
        self.weights = torch.randn(size, generator=torch.Generator().manual_seed(0)).to(device)


@torch.no_grad()
def values_fingerprint(tensors: GuardedTensors) -> torch.Tensor:
    """`(T,)` float32: the L2 norm of each of `tensors.others` (one multi-tensor reduction) and of the
    concatenated `tensors.vectors`, with the vectors' weighted sum: a change of any value moves it, but for one that
    keeps every norm of the larger tensors (such as one's sign flipped whole)."""
    parts = [norm.float() for norm in torch._foreach_norm(tensors.others)] if tensors.others else []
    if tensors.vectors:
        joined = torch.cat(tensors.vectors).float()
        parts += [joined.norm(), torch.dot(joined, tensors.weights)]
    return torch.stack(parts)


# How far a compiled forward's fingerprint may lie from the eager one, relative to its `fingerprint_scale`: float32
# sums in another order differ by about 1e-7 of it; an optimiser step moves it by orders of magnitude more
COMPILED_TOLERANCE = 1e-5


@torch.no_grad()
def fingerprint_scale(tensors: GuardedTensors, norms: torch.Tensor) -> torch.Tensor:
    """`(T,)`: the size of each entry of `values_fingerprint` whose rounding bounds how far another summation order
    moves it: a norm itself; for the vectors' weighted sum, the product of the two norms (Cauchy-Schwarz)."""
    if not tensors.vectors:
        return norms.abs()
    return torch.cat([norms[:-1].abs(), (norms[-2] * tensors.weights.norm()).reshape(1)])


def encoder_and_heads_fingerprint(model: nn.Module, dtype: torch.dtype | None = None) -> str:
    """`weights_fingerprint` of the encoder and heads of `model` (an `InSubModel`, or the one inside
    `InSubForPreTraining`), its bank left out: which trained weights a bank, a detector, a results row or a card's
    numbers belong to (`dtype`: read as cast to it)."""
    model = getattr(model, "insub", model)
    return weights_fingerprint(model, leave_out=BANK + ".", dtype=dtype)


def new_bank(model: nn.Module, representations: torch.Tensor, k: int) -> KnnBank:
    """A bank of `representations (N, d)` (`model`'s own `representation` of in-distribution inputs, unit length once
    kept) on the model's device, checked and not yet installed: `install_bank` puts it in the model."""
    representations = torch.as_tensor(representations).detach()
    dim = model.encoder.output_dim
    if representations.dim() != 2 or representations.shape[1] != dim:
        raise ValueError(f"set_bank: representations must be (N, {dim}), the model's `representation` of N inputs; "
                         f"got {tuple(representations.shape)}.")
    if not 1 <= k <= representations.shape[0]:
        raise ValueError(f"set_bank: k={k} must be between 1 and the bank's {representations.shape[0]} rows; give "
                         "more inputs or a smaller k.")
    if not torch.isfinite(representations).all():
        raise ValueError("set_bank: representations hold NaN or inf values; a bank takes finite rows only.")
    zero = int((representations.float().norm(dim=-1) == 0).sum())
    if zero:  # a cosine distance needs a direction: a zero row would be at distance 1 from everything
        raise ValueError(f"set_bank: {zero} of the {representations.shape[0]} representations are all-zero rows, "
                         "which have no direction to compare by cosine; give the `representation` of real inputs.")
    device = next(model.parameters()).device
    bank = KnnBank(*representations.shape).to(device)
    bank.bank.copy_(F.normalize(representations.float(), dim=-1))
    return bank


def install_bank(model: nn.Module, bank: KnnBank, **settings) -> None:
    """Puts `bank` (with whatever it holds, e.g. calibration scores) in `model` in one step, replacing the old one
    whole, with the uncertainty `settings` it was fitted with: the settings are checked before anything changes, so
    a refused install leaves the previous fit serving."""
    block = model.config.checked_uncertainty(  # raises before the model changes
        **settings, bank_size=int(bank.bank.shape[0]), bank_weights=encoder_and_heads_fingerprint(model))
    setattr(model, BANK, bank)
    model.config.install_uncertainty(block)
    bank.remember(model)


def set_bank(model: nn.Module, representations: torch.Tensor, k: int, read: bool = True) -> None:
    """Gives `model` (an `InSubModel`) the bank `representations (N, d)` (its own `representation` of
    in-distribution inputs), recorded in its config with k and the weights it was embedded with; `read`: its
    `uncertainty` becomes the k-NN reading (else it keeps its reading, and the bank is what `InSubOODDetector`'s
    `knn` score searches)."""
    bank = new_bank(model, representations, k)
    reading = "knn" if read else model.config.uncertainty["reading"]
    if reading == "calibrated":  # its calibration scores were of the bank this one replaces
        reading = "spread"
    install_bank(model, bank, reading=reading, k=int(k), components=None, combination=None, calibration_size=None,
                 length_range=None,
                 made_outlier_auroc=None, fitted_with=None)


def holds_fit(model: nn.Module) -> bool:
    """Whether `model` (an `InSubModel`) holds anything fitted on its weights: a bank, the spread's direction or a
    text model's length buckets."""
    block = model.config.uncertainty
    return hasattr(model, BANK) or block["direction"] is not None or block["length_buckets"] is not None


def clear_bank(model: nn.Module) -> None:
    """Takes the whole fit out of `model`: the bank (with the calibration scores it holds) and every setting fitted
    on its weights (the spread's direction, length buckets), so that `uncertainty` is None until it is fitted again;
    the chosen `k` stays."""
    if hasattr(model, BANK):
        delattr(model, BANK)
    # every other value at its default: an unfitted block, whatever fields a fit fills
    model.config.install_uncertainty(model.config.checked_uncertainty(replace={"k": model.config.uncertainty["k"]}))


def stale_bank(model: nn.Module) -> bool:
    """Whether `model` holds a k-NN bank embedded with other weights than its own (trained further since)."""
    model = getattr(model, "insub", model)
    block = model.config.uncertainty
    return bool(block["bank_size"]) and block["bank_weights"] != encoder_and_heads_fingerprint(model)


def bankless_copy(student: nn.Module) -> nn.Module:
    """A copy of `student` without its k-NN bank: a teacher or target network follows the weights, not the bank."""
    follower = copy.deepcopy(student)
    if hasattr(follower, BANK):
        delattr(follower, BANK)
    return follower


def weights_only(state: dict) -> dict:
    """`state` (a state dict) without the bank's entries."""
    return {name: tensor for name, tensor in state.items() if not name.startswith(BANK + ".")}

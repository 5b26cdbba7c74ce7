"""How an `InSubModel` serves its `uncertainty`: the reading its config names, from the representation and the
oriented spread of one forward, with the bank and settings it holds."""

from __future__ import annotations

import copy

import torch

from .fitting import FIT_SEED, FittedUncertainty, fit_uncertainty
from .knn import BANK, KnnBank, bankless_copy, set_bank, weights_only
from .length import LENGTH_SETTINGS
from .readings import READINGS, KnnReading, SpreadReading


@torch.compiler.disable
def check_bank(model) -> None:
    """`KnnBank.check_current` of `model`'s bank, run eagerly (inside a compiled forward only where the bank has not
    been checked yet: a model just loaded, moved or cast)."""
    getattr(model, BANK).check_current(model)


class UncertaintyReading:
    """The reading part of `InSubModel` (a mixin: it reads `self.config` and `self.encoder`, and keeps the k-NN bank
    as the module `knn.BANK`)."""

    def attach_bank(self) -> None:
        """An empty bank of the config's size (with the calibrated reading's scores where the config has them), for
        the saved weights to fill (none where the config has none)."""
        block = self.config.uncertainty_options
        if block.bank_size:
            calibration = None if block.calibration_size is None else (
                len(block.components), *block.calibration_size, block.combination)
            setattr(self, BANK, KnnBank(block.bank_size, self.encoder.output_dim, calibration))

    def check_reading_current(self) -> torch.Tensor | None:
        """Refuses a k-NN bank embedded with other weights (`KnnBank.check_current`); call before a train-mode
        forward moves BatchNorm's statistics. A compiled forward reads nothing on the host: it returns `()` bool on
        the device (`KnnBank.current`), which `guarded` applies to the served number; eager: None."""
        if not hasattr(self, BANK):
            return None
        bank = getattr(self, BANK)
        if not torch.compiler.is_compiling() or bank.tensors is None:
            check_bank(self)
            return None
        return bank.current()

    @staticmethod
    def guarded(uncertainty: torch.Tensor | None, current: torch.Tensor | None) -> torch.Tensor | None:
        """`uncertainty (B,)`, or NaN for every row where a compiled forward found the weights changed since the fit
        (`current`, `()` bool): never a number of another model's fit."""
        if uncertainty is None or current is None:
            return uncertainty
        return torch.where(current, uncertainty, torch.full_like(uncertainty, float("nan")))

    def oriented_spread(self, spread: torch.Tensor) -> torch.Tensor:
        """`(B,)`: the heads' mean spread `(B,)` read in `config.uncertainty['direction']` (as it is where None)."""
        return (self.config.uncertainty["direction"] or 1) * spread

    def read_uncertainty(self, representation: torch.Tensor, spread: torch.Tensor, input_ids: torch.Tensor | None,
                         attention_mask: torch.Tensor | None,
                         dna_one_hot: torch.Tensor | None = None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """`(uncertainty, knn_distance)`, each `(B,)` or None: the calibrated reading (`readings.READINGS`; None
        where it is not fitted, and for a config naming a single reading, which has its own output) and the k-NN
        distance where the model holds a bank, from the representations `(B, d)` and the oriented spread `(B,)`
        (with the lengths of the batch: token counts of `attention_mask`, or of `input_ids` without one; bases of
        `dna_one_hot (B, L, 4)`)."""

        def lengths() -> torch.Tensor | int | None:
            if dna_one_hot is not None:
                return dna_one_hot.shape[1]  # one length for the batch, known without reading the device
            if input_ids is None:
                return None
            return (attention_mask.sum(dim=1) if attention_mask is not None
                    else torch.full((input_ids.shape[0],), input_ids.shape[1], device=input_ids.device))

        knn = getattr(self, BANK)(representation, self.config.uncertainty["k"]) if hasattr(self, BANK) else None
        return READINGS[self.config.uncertainty["reading"]].read(self, knn, spread, lengths), knn

    def fit_uncertainty(self, inputs, calibration_inputs=None, k: int | None = None, batch_size: int = 256,
                        seed: int = FIT_SEED, processor=None, show_progress: bool | None = None) -> FittedUncertainty:
        """Fits the calibrated `uncertainty` in [0, 1] on your in-distribution inputs (`fitting.fit_uncertainty`):
        `inputs`, what the model's processor takes (PIL images, a numpy array, sentences, a `datasets.Dataset`) or
        its output (tensors with N rows); `calibration_inputs`, held-out rows the model was not trained on, else
        taken from `inputs`. A refused fit leaves the previous one serving; `save_pretrained` keeps it."""
        return fit_uncertainty(self, inputs, calibration_inputs, k, batch_size, seed, processor, show_progress)

    def set_bank(self, representations: torch.Tensor, k: int | None = None, read: bool = True):
        """Makes `knn_distance` the cosine distance to the k-th nearest (`k`, default the config's) of
        `representations (N, d)`, this model's `representation` of your in-distribution inputs; `save_pretrained`
        keeps the bank (`knn.set_bank`; `read=False` keeps the config's reading, for `InSubOODDetector` to measure
        the bank). It replaces a calibrated fit (whose scores were of the bank it replaces): `uncertainty` is then
        None until `fit_uncertainty`."""
        set_bank(self, representations, self.config.uncertainty["k"] if k is None else k, read)
        return self

    def follower_copy(self):
        """A copy of this model without its k-NN bank: what a teacher or target network (DINO, BYOL) follows is the
        weights, not the bank."""
        return bankless_copy(self)

    def weights_state(self) -> dict:
        """`state_dict()` without the bank's entries: what a follower (`follower_copy`) loads."""
        return weights_only(self.state_dict())

    def set_length_buckets(self, settings: dict):
        """Records in a text model's config its oriented spread's token-count buckets (`settings` as
        `length.fit_length_buckets` fitted them on validation sentences, with the standardised spread's `direction`;
        other keys are ignored), for `length.standardise_by_length` to read; `uncertainty` stays the calibrated
        reading or None."""
        chosen = {key: settings[key] for key in LENGTH_SETTINGS if key in settings}
        self.config.set_uncertainty(reading="spread_by_length", length_buckets=chosen)
        return self

    def with_reading(self, settings: dict | None):
        """This model, or a copy of it holding the single reading `settings` name (`apply_reading`); the model
        itself for None and for "spread", its own."""
        if (settings or {}).get("reading", SpreadReading.name) == SpreadReading.name:
            return self
        return copy.deepcopy(self).apply_reading(settings)  # the caller's model stays as it was

    def apply_reading(self, settings: dict):
        """Gives the model the single reading `settings` name (a text release's, chosen on validation data:
        `evaluation.text_bench.uncertainty_settings`): "knn" its `bank` (and `k`: `knn_distance`), "spread_by_length"
        its buckets, "spread" as it is (`head_spread`); `uncertainty` stays the calibrated reading or None."""
        reading = settings.get("reading", SpreadReading.name)
        if reading == KnnReading.name:
            return self.set_bank(settings["bank"], settings.get("k"))
        if reading == SpreadReading.name:
            return self
        return self.set_length_buckets(settings)

"""How an `InSubModel` serves its `uncertainty`: the reading its config names, from the representation and the
oriented spread of one forward, with the bank and settings it holds."""

from __future__ import annotations

import torch

from .knn import BANK, KnnBank, set_bank
from .length import LENGTH_SETTINGS, check_length_standardisation, length_standardised

# What a model's `uncertainty` can be (`InSubConfig.uncertainty_reading`)
MODEL_READINGS = ("spread", "spread_by_length", "knn")


class UncertaintyReading:
    """The reading part of `InSubModel` (a mixin: it reads `self.config` and `self.encoder`, and keeps the k-NN bank
    as the module `knn_bank`)."""

    def attach_bank(self) -> None:
        """An empty bank of the config's size, for the saved weights to fill (none where the config has none)."""
        if self.config.knn_bank_size:
            setattr(self, BANK, KnnBank(self.config.knn_bank_size, self.encoder.output_dim))

    def check_reading_current(self) -> None:
        """Refuses a k-NN bank embedded with other weights (`KnnBank.check_current`); call before a train-mode
        forward moves BatchNorm's statistics. Compiled forwards skip it: it reads counters on the host."""
        if self.config.uncertainty_reading == "knn" and not torch.compiler.is_compiling():
            getattr(self, BANK).check_current(self)

    def read_uncertainty(self, representation: torch.Tensor, spread: torch.Tensor, input_ids: torch.Tensor | None,
                         attention_mask: torch.Tensor | None) -> torch.Tensor:
        """`(B,)`: `uncertainty` as `config.uncertainty_reading` says, from the representations `(B, d)` and the
        oriented spread `(B,)` (with the token counts of `attention_mask`, or of `input_ids` without one)."""
        reading = self.config.uncertainty_reading
        if reading == "knn":
            return getattr(self, BANK)(representation, self.config.knn_k)
        if reading == "spread_by_length":
            lengths = (attention_mask.sum(dim=1) if attention_mask is not None
                       else torch.full((input_ids.shape[0],), input_ids.shape[1], device=input_ids.device))
            settings = dict(self.config.length_standardisation)
            direction = settings.pop("direction")
            return direction * length_standardised(spread, lengths, **settings)
        return spread

    def set_bank(self, representations: torch.Tensor, k: int | None = None):
        """Makes `uncertainty` the cosine distance to the k-th nearest of `representations (N, d)`, this model's
        `representation` of your in-distribution inputs; `save_pretrained` keeps the bank (`knn.set_bank`)."""
        set_bank(self, representations, self.config.knn_k if k is None else k)
        return self

    def set_length_standardisation(self, settings: dict):
        """Makes a text model's `uncertainty` its oriented spread standardised within token-count buckets:
        `settings` as `length.fit_length_standardisation` fitted them on validation sentences, with the standardised
        spread's `direction` (other keys are ignored). Kept in the config."""
        chosen = {key: settings[key] for key in LENGTH_SETTINGS if key in settings}
        check_length_standardisation(chosen, self.config.modality)
        self.config.length_standardisation, self.config.uncertainty_reading = chosen, "spread_by_length"
        return self

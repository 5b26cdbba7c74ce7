"""Label-free OOD detection with an InSub model: `InSubOODDetector` measures the model's own uncertainty (its reading,
its oriented spread and the distance to its k-NN bank, with the k and direction of its config), and `FeatureBank`
gives the evaluation harness the same scores over a whole training set's features, with nearest-neighbour
distances (Sun et al., "Out-of-Distribution Detection with Deep Nearest Neighbors", ICML 2022) in each head's
embedding space too.

Every score is oriented the same way: higher = more likely OOD. The k-NN scores' direction is fixed by construction.
The head spread's is not: it depends on the regime the model was trained in. Under the authors' objective the NT-Xent
on the raw mean pulls the heads together on the training data and the hinge holds their spread near alpha; inputs
the training never shaped get heads that need not agree, so HIGH spread marks them when the hinge holds the
training inputs at its floor. When a weak hinge only slows the collapse, the heads agree almost everywhere and
inputs far from the data (noise) can agree even more, so there LOW spread marks them. The direction is therefore
fixed per trained model on validation data (`calibrate_spread`: the training inputs against noise images made for the
purpose, never the OOD sets to be reported) and saved in the model's config (`uncertainty['direction']`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..uncertainty.knn import knn_distance
from ..uncertainty.settings import DEFAULT_K
from ..validation import check_choice, check_range
from .features import extract_features, input_batches
from .metrics.ood import auroc_interval, ood_auroc
from .ood_sets import noise_ood_sets
from .results import HeadSpreadCalibration

BACKENDS = ("torch", "faiss", "auto")
# `auto` searches with faiss (when installed) above this many bank vectors, with torch below.
FAISS_FROM = 20000
# Images per noise kind that `calibrate_head_spread` is given by the harness, and the seed of their draw (other
# than the seeds of any reported noise set).
CALIBRATION_IMAGES = 500
CALIBRATION_SEED = 20


def calibration_noise(images: torch.Tensor) -> torch.Tensor:
    """The noise images (uniform, then Gaussian) the head spread's direction is fixed against for training images
    `(N, C, H, W)` in [0, 1]: up to `CALIBRATION_IMAGES` of each kind, seeded by `CALIBRATION_SEED`, of their shape."""
    noise = noise_ood_sets(min(CALIBRATION_IMAGES, len(images)), tuple(images.shape[1:]), seed=CALIBRATION_SEED)
    return torch.cat(list(noise.values()))


def calibrate_spread(bank_sigma: torch.Tensor, ood_sigma: torch.Tensor) -> HeadSpreadCalibration:
    """The head spread's direction from the training inputs' mean spreads `bank_sigma (N,)` against `ood_sigma
    (K,)`, those of validation OOD inputs (noise made for this, never a reported OOD set): +1 when high spread
    separates them at least as well as chance (AUROC >= 0.5), else -1, with that AUROC of "high spread = OOD" (ties
    count half; 0.5 with one head, whose sigma is 0 everywhere) and its 90 % bootstrap interval."""
    bank_sigma, ood_sigma = bank_sigma.float().cpu(), ood_sigma.float().cpu()
    auroc = ood_auroc(bank_sigma, ood_sigma, higher_is_in=False)
    return HeadSpreadCalibration(1 if auroc >= 0.5 else -1, auroc,
                                 list(auroc_interval(bank_sigma, ood_sigma, higher_is_in=False)))

def kth_neighbour_distance(
    queries: torch.Tensor, bank: torch.Tensor, k: int, backend: str = "torch", chunk_size: int = 2048,
    normalized: bool = False,
) -> torch.Tensor:
    """Cosine distance (1 - cos) of each query to its k-th nearest bank vector: the k-NN reading every insub-hf path
    serves (`uncertainty.knn.knn_distance`, which the torch backend runs chunk by chunk).

    Shapes: queries `(Q, D)`, bank `(N, D)` -> `(Q,)` on the bank's device. Both are L2-normalised here (the bank
    not when `normalized` says it already is); the torch backend searches on the bank's device.

    Args:
        k: which neighbour (1 = the nearest); at most N.
        backend: `torch` (exact, chunked matrix products) or `faiss` (exact inner-product index, `faiss-cpu`).
    """
    check_choice("backend", backend, ("torch", "faiss"))
    check_range("k", k, low=1, high=bank.shape[0], integer=True)
    q = F.normalize(queries.float().to(bank.device), dim=-1)
    b = bank.float() if normalized else F.normalize(bank.float(), dim=-1)
    if backend == "faiss":
        try:
            import faiss
        except ImportError as error:
            raise ImportError(
                "backend='faiss' needs faiss: pip install \"insub-hf[ood]\" (or backend='torch')."
            ) from error
        index = faiss.IndexFlatIP(b.shape[1])
        index.add(b.cpu().numpy())
        similarity, _ = index.search(q.cpu().numpy(), k)
        return 1 - torch.from_numpy(similarity[:, k - 1])
    return torch.cat([knn_distance(part, b, k) for part in q.split(chunk_size)])


class InSubOODDetector:
    """The OOD scores of a model's own uncertainty, fitted on unlabelled training data (no probe, no labels). It
    keeps nothing of its own: `fit` puts the bank into the model (saved in its weights) and the head spread's
    direction into its config, so that the model, its pipelines, sentence-transformers and this detector read one
    bank with one k in one direction.

    Scores (`score`), each `(N,)`, higher = more likely OOD:
        `uncertainty`: the model's `uncertainty` output, as `config.uncertainty['reading']` says (absent where the
            model's reading is not fitted: `InSubModel.fit_uncertainty`).
        `head_spread`: the heads' mean spread read in `config.uncertainty['direction']` (as it is where None).
        `knn`: the cosine distance of the representation to its k-th nearest bank row (`config.uncertainty['k']`),
            where the model has a bank.

    Args:
        model: an `InSubModel` or `InSubForPreTraining`.
        calibration: how `fit` fixed the head spread's direction (None: not fixed here).
    """

    def __init__(self, model, calibration: HeadSpreadCalibration | None = None):
        self.model = getattr(model, "insub", model)
        self.calibration = calibration

    @classmethod
    def fit(cls, model, train_inputs, k: int | None = None, batch_size: int = 256, calibration_inputs=None):
        """Makes the representations of `train_inputs` (tensors `{"pixel_values": ...}` or a data set whose rows hold
        the encoder's inputs) the model's bank, searched at its k-th neighbour (`k`, default the config's); with
        `calibration_inputs` (validation OOD inputs such as noise images, prepared like the training inputs), fixes
        the head spread's direction on them (`calibrate_spread`) and records it in the config where it holds across
        resamples (else None). The model's reading stays what it was."""
        inner = getattr(model, "insub", model)
        features = extract_features(inner, train_inputs, batch_size)
        inner.set_bank(features.representations.mean(dim=1), k, read=False)
        calibration = None
        if calibration_inputs is not None:
            calibration = calibrate_spread(features.head_sigma,
                                           extract_features(inner, calibration_inputs, batch_size).head_sigma)
            inner.config.set_uncertainty(direction=calibration.usable_direction)
        return cls(inner, calibration)

    @property
    def bank_size(self) -> int:
        return self.model.config.uncertainty["bank_size"]

    @property
    def k(self) -> int:
        return self.model.config.uncertainty["k"]

    @property
    def direction(self) -> int | None:
        return self.model.config.uncertainty["direction"]

    @torch.no_grad()
    def score(self, inputs, batch_size: int = 256) -> dict[str, torch.Tensor]:
        """The scores of `inputs` (as for `fit`), on the CPU: one forward of the model per batch."""
        model = self.model
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        parts: dict[str, list[torch.Tensor]] = {"uncertainty": [], "head_spread": [], "knn": []}
        try:
            for batch, _ in input_batches(inputs, batch_size, model.encoder.input_names):
                out = model(**{name: value.to(device) for name, value in batch.items()})
                if out.uncertainty is not None:  # None: the model's reading is not fitted
                    parts["uncertainty"].append(out.uncertainty.float().cpu())
                parts["head_spread"].append(out.head_spread.float().cpu())
                if out.knn_distance is not None:  # the model's bank searched at its own k, by its forward
                    parts["knn"].append(out.knn_distance.cpu())
        finally:
            model.train(was_training)
        return {name: torch.cat(values) for name, values in parts.items() if values}


class FeatureBank:
    """The evaluation harness's label-free scores over one model's training features: the `knn` distance of
    `InSubOODDetector` with the whole training set as the bank, the same in each head's embedding space, and the
    head spread in the direction `calibrate` fixes.

    Scores (`score_features`), each `(N,)`, higher = more likely OOD:
        `knn`: k-th neighbour distance of the normalised representation to the training bank.
        `knn_heads`: the same in each head's normalised embedding space, averaged over the M heads.
        `knn_heads_spread`: the standard deviation of those M distances (heads that disagree about how unusual an
            input is); 0 for M = 1.
        `head_spread`: the heads' mean per-dimension spread sigma times the calibrated direction (only once
            `calibrate` fixed it).

    Args:
        representation_bank: training representations `(N, d)`.
        head_banks: training head embeddings `(N, M, q)`.
        k: the neighbour whose distance is the score.
        backend: `torch`, `faiss`, or `auto` (faiss for banks above `FAISS_FROM` vectors when installed).
        bank_sigma: the training inputs' mean head spread `(N,)` (what `calibrate` compares with).
        device: where the torch backend searches (default: the CPU): the banks are copied there once, normalised;
            scores come back to the CPU.
    """

    def __init__(self, representation_bank: torch.Tensor, head_banks: torch.Tensor, k: int = DEFAULT_K,
                 backend: str = "auto", bank_sigma: torch.Tensor | None = None,
                 device: torch.device | str | None = None):
        check_choice("FeatureBank.backend", backend, BACKENDS)
        if representation_bank.dim() != 2 or representation_bank.shape[0] == 0:
            raise ValueError(
                "FeatureBank: representation_bank must be (N, d) with N >= 1 training inputs, got "
                f"{tuple(representation_bank.shape)} (fit it on a non-empty training set)."
            )
        check_range("FeatureBank.k", k, low=1, high=representation_bank.shape[0], integer=True)
        if head_banks.dim() != 3 or head_banks.shape[0] != representation_bank.shape[0]:
            raise ValueError(
                f"head_banks must be (N={representation_bank.shape[0]}, M, q), got {tuple(head_banks.shape)}."
            )
        _check_finite("representation_bank", representation_bank)
        _check_finite("head_banks", head_banks)
        self.representation_bank = representation_bank.float().cpu()
        self.head_banks = head_banks.float().cpu()
        self.k = k
        self.backend = backend
        self.bank_sigma = None if bank_sigma is None else bank_sigma.float().cpu()
        self.calibration: HeadSpreadCalibration | None = None
        self.device = torch.device(device or "cpu")
        self._searched: dict[tuple[str, int], torch.Tensor] = {}  # normalised banks on `device`, by (name, head)

    def calibrate(self, ood_sigma: torch.Tensor) -> HeadSpreadCalibration:
        """Fixes the head spread's direction from the bank's spreads against `ood_sigma (K,)` (`calibrate_spread`)."""
        if self.bank_sigma is None:
            raise ValueError("FeatureBank.calibrate needs the training inputs' head spreads: pass bank_sigma.")
        self.calibration = calibrate_spread(self.bank_sigma, ood_sigma)
        return self.calibration

    def _search(self, queries: torch.Tensor, bank: torch.Tensor, name: tuple[str, int]) -> torch.Tensor:
        """`kth_neighbour_distance` of `queries` to `bank` (the bank `name`: which and which head), `(Q,)` on the
        CPU."""
        backend = self.backend
        if backend == "auto":
            try:
                import faiss  # noqa: F401
            except ImportError:
                backend = "torch"
            else:
                backend = "faiss" if bank.shape[0] > FAISS_FROM and self.device.type == "cpu" else "torch"
        if backend == "faiss":
            return kth_neighbour_distance(queries, bank, self.k, backend)
        if name not in self._searched:
            self._searched[name] = F.normalize(bank.float().to(self.device), dim=-1)
        return kth_neighbour_distance(queries, self._searched[name], self.k, backend, normalized=True).cpu()

    def score_features(self, representations: torch.Tensor, head_embeddings: torch.Tensor | None,
                       head_sigma: torch.Tensor) -> dict[str, torch.Tensor]:
        """Scores of precomputed features: representations `(N, d)`, head embeddings `(N, M, q)`, sigma `(N,)`.
        Without head embeddings (None) the per-head scores are skipped (M searches fewer)."""
        d, (m, q) = self.representation_bank.shape[1], self.head_banks.shape[1:]
        if representations.dim() != 2 or representations.shape[1] != d:
            raise ValueError(f"FeatureBank: representations must be (N, {d}) like the bank, got "
                             f"{tuple(representations.shape)}.")
        if head_embeddings is not None and tuple(head_embeddings.shape[1:]) != (m, q):
            raise ValueError(f"FeatureBank: head_embeddings must be (N, M={m}, q={q}) like the bank, got "
                             f"{tuple(head_embeddings.shape)}.")
        _check_finite("representations", representations)
        if head_embeddings is not None:
            _check_finite("head_embeddings", head_embeddings)
        scores = {"knn": self._search(representations, self.representation_bank, ("representation", 0))}
        if self.calibration is not None:
            scores["head_spread"] = self.calibration.direction * head_sigma.float().cpu()
        if head_embeddings is not None:
            per_head = torch.stack(
                [self._search(head_embeddings[:, m], self.head_banks[:, m], ("head", m))
                 for m in range(head_embeddings.shape[1])],
                dim=1,
            )  # (N, M)
            scores["knn_heads"] = per_head.mean(dim=1)
            scores["knn_heads_spread"] = (
                per_head.std(dim=1) if per_head.shape[1] > 1 else torch.zeros(per_head.shape[0])
            )
        return scores


def _check_finite(name: str, tensor: torch.Tensor) -> None:
    """Raises naming the rows of `tensor` `(N, ...)` that hold NaN or inf (a NaN bank row would be every query's
    nearest neighbour)."""
    bad = (~torch.isfinite(tensor.reshape(tensor.shape[0], -1))).any(dim=1).nonzero().flatten()
    if bad.numel():
        raise ValueError(
            f"FeatureBank: {name} has NaN or inf values in {bad.numel()} of {tensor.shape[0]} rows (first: "
            f"{bad[:5].tolist()}); score and fit only finite features."
        )

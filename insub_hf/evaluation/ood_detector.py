"""Label-free OOD scores straight from a pretrained InSub model: nearest-neighbour distances to the training data
(Sun et al., "Out-of-Distribution Detection with Deep Nearest Neighbors", ICML 2022) in the representation space and
in each head's embedding space, and the heads' spread sigma.

Every score is oriented the same way: higher = more likely OOD. The k-NN scores' direction is fixed by construction.
The head spread's is not: it depends on the regime the model was trained in. Under the authors' objective the NT-Xent
on the raw mean pulls the heads together on the training data and the hinge holds their spread near alpha; inputs
the training never shaped get heads that need not agree, so HIGH spread marks them when the hinge holds the
training inputs at its floor. When a weak hinge only slows the collapse, the heads agree almost everywhere and
inputs far from the data (noise) can agree even more, so there LOW spread marks them. The direction is therefore
fixed per trained model on validation data (`calibrate_head_spread`: the training inputs against noise images made
for the purpose, never the OOD sets to be reported) and saved with the detector.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from ..checkpointing import write_json
from ..checksums import METADATA_KEY, checksum_metadata, read_verified
from ..uncertainty.knn import encoder_and_heads_fingerprint
from ..uncertainty.knn import knn_distance
from ..validation import check_choice, check_range, looks_like_a_path
from .features import extract_features
from .metrics.ood import auroc_interval, ood_auroc
from .ood_sets import noise_ood_sets

BACKENDS = ("torch", "faiss", "auto")
# Sun et al. use k = 50 on CIFAR-10's 50,000 training images.
DEFAULT_K = 50
# `auto` searches with faiss (when installed) above this many bank vectors, with torch below.
FAISS_FROM = 20000
# Images per noise kind that `calibrate_head_spread` is given by the harness, and the seed of their draw (other
# than the seeds of any reported noise set).
CALIBRATION_IMAGES = 500
CALIBRATION_SEED = 20
WEIGHTS_NAME = "ood_detector.safetensors"
CONFIG_NAME = "ood_detector.json"



def calibration_noise(images: torch.Tensor) -> torch.Tensor:
    """The noise images (uniform, then Gaussian) the head spread's direction is fixed against for training images
    `(N, C, H, W)` in [0, 1]: up to `CALIBRATION_IMAGES` of each kind, seeded by `CALIBRATION_SEED`, of their shape."""
    noise = noise_ood_sets(min(CALIBRATION_IMAGES, len(images)), tuple(images.shape[1:]), seed=CALIBRATION_SEED)
    return torch.cat(list(noise.values()))

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
    """OOD scores of any InSub checkpoint, fitted on unlabelled training data (no probe, no labels).

    Scores (`score`), each `(N,)`, higher = more likely OOD:
        `knn`: k-th neighbour distance of the normalised representation to the training bank.
        `knn_heads`: the same in each head's normalised embedding space, averaged over the M heads.
        `knn_heads_spread`: the standard deviation of those M distances (heads that disagree about how unusual an
            input is); 0 for M = 1.
        `head_spread`: the heads' mean per-dimension spread sigma times `spread_direction` (+1: high spread = OOD,
            -1: low spread = OOD); only once the direction is fixed (`calibrate_head_spread`; see the module note).

    Args:
        representation_bank: training representations `(N, d)`.
        head_banks: training head embeddings `(N, M, q)`.
        k: the neighbour whose distance is the score.
        backend: `torch`, `faiss`, or `auto` (faiss for banks above `FAISS_FROM` vectors when installed).
        bank_sigma: the training inputs' mean head spread `(N,)` (what `calibrate_head_spread` compares with).
        spread_direction: +1, -1, or None (not calibrated: no `head_spread` score).
        spread_validation_auroc: the AUROC of "high spread = OOD" on the calibration data (saved with the direction).
        model_fingerprint: `weights_fingerprint` of the model the banks come from (set by `fit`); `score` refuses
            another model. None: not checked.
        spread_interval: the 90 % bootstrap interval of that AUROC (`spread_holds`).
        device: where the torch backend searches (default: the CPU): the banks are copied there once, normalised;
            scores come back to the CPU.
    """

    def __init__(self, representation_bank: torch.Tensor, head_banks: torch.Tensor, k: int = DEFAULT_K,
                 backend: str = "auto", bank_sigma: torch.Tensor | None = None, spread_direction: int | None = None,
                 spread_validation_auroc: float | None = None, model_fingerprint: str | None = None,
                 spread_interval: tuple[float, float] | None = None, device: torch.device | str | None = None):
        check_choice("InSubOODDetector.backend", backend, BACKENDS)
        check_choice("InSubOODDetector.spread_direction", spread_direction, (1, -1, None))
        if representation_bank.dim() != 2 or representation_bank.shape[0] == 0:
            raise ValueError(
                "InSubOODDetector: representation_bank must be (N, d) with N >= 1 training inputs, got "
                f"{tuple(representation_bank.shape)} (fit it on a non-empty training set)."
            )
        check_range("InSubOODDetector.k", k, low=1, high=representation_bank.shape[0], integer=True)
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
        self.spread_direction = spread_direction
        self.spread_validation_auroc = spread_validation_auroc
        self.model_fingerprint = model_fingerprint
        self.spread_interval = None if spread_interval is None else tuple(spread_interval)
        self.device = torch.device(device or "cpu")
        self._searched: dict[tuple[str, int], torch.Tensor] = {}  # normalised banks on `device`, by (name, head)

    @classmethod
    def fit(cls, model, train_inputs, k: int = DEFAULT_K, backend: str = "auto", batch_size: int = 256,
            calibration_inputs=None):
        """Keeps the representations and head embeddings of `train_inputs` (tensors `{"pixel_values": ...}` or a data
        set whose rows hold the encoder's inputs) as the bank of an `InSubModel` / `InSubForPreTraining`; with
        `calibration_inputs` (validation OOD inputs such as noise images, normalised like the training inputs), fixes
        the head spread's direction on them (`calibrate_head_spread`)."""
        features = extract_features(model, train_inputs, batch_size, keep_heads=True)
        detector = cls(features.representations.mean(dim=1), features.head_embeddings, k, backend, features.head_sigma,
                       model_fingerprint=encoder_and_heads_fingerprint(model))
        if calibration_inputs is not None:
            detector.calibrate_head_spread(extract_features(model, calibration_inputs, batch_size).head_sigma)
        return detector

    def calibrate_head_spread(self, ood_sigma: torch.Tensor) -> float:
        """Fixes `spread_direction` from the training inputs' spreads (the bank) against `ood_sigma` `(K,)`, the mean
        head spread of validation OOD inputs (noise images made for this, never a reported OOD set): +1 when high
        spread separates them at least as well as chance (AUROC >= 0.5), else -1. Returns that AUROC of "high spread
        = OOD" (0.5 with one head: sigma is 0 everywhere)."""
        if self.bank_sigma is None:
            raise ValueError(
                "InSubOODDetector.calibrate_head_spread needs the training inputs' head spreads (bank_sigma); build "
                "the detector with `fit` or pass bank_sigma."
            )
        ood_sigma = ood_sigma.float().cpu()
        auroc = ood_auroc(self.bank_sigma, ood_sigma, higher_is_in=False)  # ties count half
        self.spread_direction = 1 if auroc >= 0.5 else -1
        self.spread_validation_auroc = auroc
        self.spread_interval = auroc_interval(self.bank_sigma, ood_sigma, higher_is_in=False)
        return auroc

    @property
    def spread_holds(self) -> bool | None:
        """Whether the head spread's direction holds across resamples of the calibration data (its AUROC's 90 %
        bootstrap interval `spread_interval` leaves out 0.5): only then is the spread a usable uncertainty of the
        model. None where it was not measured."""
        if self.spread_interval is None:
            return None
        low, high = self.spread_interval
        return low > 0.5 or high < 0.5

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
            raise ValueError(f"InSubOODDetector: representations must be (N, {d}) like the bank, got "
                             f"{tuple(representations.shape)}.")
        if head_embeddings is not None and tuple(head_embeddings.shape[1:]) != (m, q):
            raise ValueError(f"InSubOODDetector: head_embeddings must be (N, M={m}, q={q}) like the bank, got "
                             f"{tuple(head_embeddings.shape)}.")
        _check_finite("representations", representations)
        if head_embeddings is not None:
            _check_finite("head_embeddings", head_embeddings)
        scores = {"knn": self._search(representations, self.representation_bank, ("representation", 0))}
        if self.spread_direction is not None:
            scores["head_spread"] = self.spread_direction * head_sigma.float().cpu()
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

    def score(self, model, inputs, batch_size: int = 256) -> dict[str, torch.Tensor]:
        """Scores of `inputs` (as for `fit`) under `model`, which must be the one the detector was fitted with."""
        if self.model_fingerprint is not None:
            found = encoder_and_heads_fingerprint(model)
            if found != self.model_fingerprint:
                raise ValueError(
                    f"InSubOODDetector: this detector was fitted on another model (weights fingerprint "
                    f"{self.model_fingerprint[:12]}, this model {found[:12]}); its banks do not describe this model's "
                    "features. Fit a detector on this model (InSubOODDetector.fit)."
                )
        features = extract_features(model, inputs, batch_size, keep_heads=True)
        return self.score_features(features.representations.mean(dim=1), features.head_embeddings, features.head_sigma)

    def save_pretrained(self, folder: str | Path) -> Path:
        """Writes the banks to `folder/ood_detector.safetensors`, then k, the head spread's direction and the banks'
        checksum to `ood_detector.json` (beside a model's own files, e.g. its `save_pretrained` folder); each file
        through a temporary sibling. A save killed between the two leaves settings that name other banks, which
        `from_pretrained` refuses."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {"representation_bank": self.representation_bank, "head_banks": self.head_banks.contiguous()}
        if self.bank_sigma is not None:
            tensors["bank_sigma"] = self.bank_sigma
        tmp = folder / f".{WEIGHTS_NAME}.tmp"
        save_file(tensors, str(tmp), metadata=checksum_metadata(tensors))
        os.replace(tmp, folder / WEIGHTS_NAME)
        options = {"k": self.k, "backend": self.backend, "spread_direction": self.spread_direction,
                   "spread_validation_auroc": self.spread_validation_auroc, "spread_interval": self.spread_interval,
                   "model_fingerprint": self.model_fingerprint,
                   "banks_checksum": banks_checksum(tensors)}
        write_json(folder / CONFIG_NAME, options)
        return folder

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path, **hub) -> "InSubOODDetector":
        """The detector saved in a local folder or a Hub repo (`name_or_path`); a repo's files are resolved through
        huggingface_hub (the local cache is used, and `HF_HUB_OFFLINE=1` honoured). `hub`: `hf_hub_download`'s
        `revision`, `cache_dir`, `token`, `local_files_only`."""
        weights, settings = (_resolve(name_or_path, name, hub) for name in (WEIGHTS_NAME, CONFIG_NAME))
        tensors, _ = read_verified(weights)  # names the file when it is unreadable or its bytes changed
        missing = {"representation_bank", "head_banks"} - set(tensors)
        if missing:
            raise ValueError(f"{weights} lacks {sorted(missing)}; it is not an InSubOODDetector file.")
        try:
            options = json.loads(Path(settings).read_text())
            k, backend, checksum = options["k"], options["backend"], options["banks_checksum"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ValueError(
                f"{settings} is missing or damaged ({type(error).__name__}: {error}); it must hold the detector's k, "
                "backend and banks_checksum as written by InSubOODDetector.save_pretrained."
            ) from None
        if checksum != banks_checksum(tensors):
            raise ValueError(
                f"{settings} belongs to other banks than {weights} (a save interrupted between the two files, or "
                "files of two detectors): save the detector again (InSubOODDetector.save_pretrained)."
            )
        return cls(
            tensors["representation_bank"], tensors["head_banks"], k, backend,
            tensors.get("bank_sigma"), options.get("spread_direction"), options.get("spread_validation_auroc"),
            options.get("model_fingerprint"), options.get("spread_interval"),
        )


def banks_checksum(tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 over the checksums of a detector's bank tensors: which banks a settings file belongs to."""
    return hashlib.sha256(checksum_metadata(tensors)[METADATA_KEY].encode()).hexdigest()


def _resolve(name_or_path: str | Path, filename: str, hub: dict) -> Path:
    """The local path of `filename` in a folder, or in a Hub repo's snapshot (downloaded or from the cache)."""
    name = str(name_or_path)
    local = Path(name).expanduser()
    if local.is_dir():
        if not (local / filename).is_file():
            raise FileNotFoundError(f"{local} holds no {filename}: fit a detector and save_pretrained it there.")
        return local / filename
    if looks_like_a_path(name):
        raise FileNotFoundError(f"InSubOODDetector.from_pretrained({name!r}): no such local folder (and not a Hub repo "
                                "id of the form 'namespace/name').")
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    try:
        return Path(hf_hub_download(name, filename, **hub))
    except LocalEntryNotFoundError as error:  # offline (or unreachable) and not in the cache
        raise OSError(f"InSubOODDetector.from_pretrained({name!r}): {filename} is not in the Hugging Face cache and "
                      f"the Hub cannot be reached ({error}). Download the repo once with network access "
                      f"(`hf download {name}`), or pass a local folder.") from None
    except EntryNotFoundError:
        raise FileNotFoundError(f"The Hub repo {name!r} holds no {filename}: it was pushed without a detector.") \
            from None


def _check_finite(name: str, tensor: torch.Tensor) -> None:
    """Raises naming the rows of `tensor` `(N, ...)` that hold NaN or inf (a NaN bank row would be every query's
    nearest neighbour)."""
    bad = (~torch.isfinite(tensor.reshape(tensor.shape[0], -1))).any(dim=1).nonzero().flatten()
    if bad.numel():
        raise ValueError(
            f"InSubOODDetector: {name} has NaN or inf values in {bad.numel()} of {tensor.shape[0]} rows (first: "
            f"{bad[:5].tolist()}); score and fit only finite features."
        )

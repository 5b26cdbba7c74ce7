"""Label-free OOD scores straight from a pretrained InSub model: nearest-neighbour distances to the training data
(Sun et al., "Out-of-Distribution Detection with Deep Nearest Neighbors", ICML 2022) in the representation space and
in each head's embedding space, and the heads' spread read as "low spread = more likely OOD".

Every score is oriented the same way, fixed here and never chosen on test data: higher = more likely OOD.

Why low spread: the diversity hinge pushes the heads apart on the training distribution only; inputs the heads were
never pushed apart on fall back towards agreement, so their spread is lower than on in-distribution data.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from ..validation import check_choice, check_range
from .features import extract_features

BACKENDS = ("torch", "faiss", "auto")
# Sun et al. use k = 50 on CIFAR-10's 50,000 training images.
DEFAULT_K = 50
# `auto` searches with faiss (when installed) above this many bank vectors, with torch below.
FAISS_FROM = 20000
WEIGHTS_NAME = "ood_detector.safetensors"
CONFIG_NAME = "ood_detector.json"


def kth_neighbour_distance(
    queries: torch.Tensor, bank: torch.Tensor, k: int, backend: str = "torch", chunk_size: int = 2048
) -> torch.Tensor:
    """Euclidean distance of each L2-normalised query to its k-th nearest L2-normalised bank vector.

    Shapes: queries `(Q, D)`, bank `(N, D)` -> `(Q,)`. Both are normalised here; for unit vectors the distance is
    sqrt(2 - 2 cos), so the k-th neighbour is the one with the k-th largest cosine similarity.

    Args:
        k: which neighbour (1 = the nearest); at most N.
        backend: `torch` (exact, chunked matrix products) or `faiss` (exact inner-product index, `faiss-cpu`).
    """
    check_choice("backend", backend, ("torch", "faiss"))
    check_range("k", k, low=1, high=bank.shape[0], integer=True)
    q = F.normalize(queries.float(), dim=-1)
    b = F.normalize(bank.float(), dim=-1)
    if backend == "faiss":
        try:
            import faiss
        except ImportError as error:
            raise ImportError("backend='faiss' needs faiss: pip install faiss-cpu (or backend='torch').") from error
        index = faiss.IndexFlatIP(b.shape[1])
        index.add(b.numpy())
        similarity, _ = index.search(q.numpy(), k)
        kth = torch.from_numpy(similarity[:, k - 1])
    else:
        kth = torch.cat([(part @ b.T).topk(k, dim=1).values[:, k - 1] for part in q.split(chunk_size)])
    return (2 - 2 * kth).clamp_min(0).sqrt()


class InSubOODDetector:
    """OOD scores of any InSub checkpoint, fitted on unlabelled training data (no probe, no labels).

    Scores (`score`), each `(N,)`, higher = more likely OOD:
        `knn`: k-th neighbour distance of the normalised representation to the training bank.
        `knn_heads`: the same in each head's normalised embedding space, averaged over the M heads.
        `knn_heads_spread`: the standard deviation of those M distances (heads that disagree about how unusual an
            input is); 0 for M = 1.
        `low_head_spread`: minus the heads' mean per-dimension spread sigma (see the module note).

    Args:
        representation_bank: training representations `(N, d)`.
        head_banks: training head embeddings `(N, M, q)`.
        k: the neighbour whose distance is the score.
        backend: `torch`, `faiss`, or `auto` (faiss for banks above `FAISS_FROM` vectors when installed).
    """

    def __init__(self, representation_bank: torch.Tensor, head_banks: torch.Tensor, k: int = DEFAULT_K,
                 backend: str = "auto"):
        check_choice("InSubOODDetector.backend", backend, BACKENDS)
        check_range("InSubOODDetector.k", k, low=1, high=representation_bank.shape[0], integer=True)
        if head_banks.dim() != 3 or head_banks.shape[0] != representation_bank.shape[0]:
            raise ValueError(
                f"head_banks must be (N={representation_bank.shape[0]}, M, q), got {tuple(head_banks.shape)}."
            )
        self.representation_bank = representation_bank.float().cpu()
        self.head_banks = head_banks.float().cpu()
        self.k = k
        self.backend = backend

    @classmethod
    def fit(cls, model, train_inputs, k: int = DEFAULT_K, backend: str = "auto", batch_size: int = 256):
        """Keeps the representations and head embeddings of `train_inputs` (tensors `{"pixel_values": ...}` or a data
        set whose rows hold the encoder's inputs) as the bank of an `InSubModel` / `InSubForPreTraining`."""
        features = extract_features(model, train_inputs, batch_size, keep_heads=True)
        return cls(features.representations.mean(dim=1), features.head_embeddings, k, backend)

    def _search(self, queries: torch.Tensor, bank: torch.Tensor) -> torch.Tensor:
        backend = self.backend
        if backend == "auto":
            try:
                import faiss  # noqa: F401
            except ImportError:
                backend = "torch"
            else:
                backend = "faiss" if bank.shape[0] > FAISS_FROM else "torch"
        return kth_neighbour_distance(queries, bank, self.k, backend)

    def score_features(self, representations: torch.Tensor, head_embeddings: torch.Tensor | None,
                       head_sigma: torch.Tensor) -> dict[str, torch.Tensor]:
        """Scores of precomputed features: representations `(N, d)`, head embeddings `(N, M, q)`, sigma `(N,)`.
        Without head embeddings (None) the per-head scores are skipped (M searches fewer)."""
        scores = {
            "knn": self._search(representations, self.representation_bank),
            "low_head_spread": -head_sigma.float().cpu(),
        }
        if head_embeddings is not None:
            per_head = torch.stack(
                [self._search(head_embeddings[:, m], self.head_banks[:, m]) for m in range(head_embeddings.shape[1])],
                dim=1,
            )  # (N, M)
            scores["knn_heads"] = per_head.mean(dim=1)
            scores["knn_heads_spread"] = (
                per_head.std(dim=1) if per_head.shape[1] > 1 else torch.zeros(per_head.shape[0])
            )
        return scores

    def score(self, model, inputs, batch_size: int = 256) -> dict[str, torch.Tensor]:
        """Scores of `inputs` (as for `fit`) under `model` (the one the detector was fitted with)."""
        features = extract_features(model, inputs, batch_size, keep_heads=True)
        return self.score_features(features.representations.mean(dim=1), features.head_embeddings, features.head_sigma)

    def save_pretrained(self, folder: str | Path) -> Path:
        """Writes the banks to `folder/ood_detector.safetensors` and k to `ood_detector.json` (beside a model's own
        files, e.g. its `save_pretrained` folder)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_file({"representation_bank": self.representation_bank, "head_banks": self.head_banks.contiguous()},
                  str(folder / WEIGHTS_NAME))
        (folder / CONFIG_NAME).write_text(json.dumps({"k": self.k, "backend": self.backend}, indent=2))
        return folder

    @classmethod
    def from_pretrained(cls, folder: str | Path) -> "InSubOODDetector":
        folder = Path(folder)
        if not (folder / WEIGHTS_NAME).is_file():
            raise FileNotFoundError(f"{folder} holds no {WEIGHTS_NAME}: fit a detector and save_pretrained it there.")
        tensors = load_file(str(folder / WEIGHTS_NAME))
        options = json.loads((folder / CONFIG_NAME).read_text())
        return cls(tensors["representation_bank"], tensors["head_banks"], options["k"], options["backend"])

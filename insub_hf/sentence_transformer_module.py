"""A sentence-transformers module serving an InSub text model: `SentenceTransformer(folder, trust_remote_code=True)`
embeds with `encode(...)` and gives each sentence's uncertainty with `encode(..., output_value="uncertainty")`.

This file and `text_uncertainty.py` are copied into the saved folder and loaded from there, so they import only torch,
transformers and sentence-transformers (the InSub model itself loads through its remote code beside them). Save a
folder with `insub_hf.InSubSentenceEncoder.save_sentence_transformer`.

A folder may end with `InSubUncertainty`, which replaces the heads' spread by the uncertainty chosen for the model on
validation data (`text_uncertainty.UNCERTAINTY_READINGS`, the one implementation of each reading, which the job that
chose it uses too: `insub-hf text-candidates`). Its k-NN distance is relative to its bank; `set_bank` makes it the
distance to your own in-distribution sentences.
"""

from __future__ import annotations

import hashlib
import json
import os

import torch
import torch.nn.functional as F
from safetensors import safe_open
from sentence_transformers.base.modules import InputModule, Module
from transformers import AutoModel, AutoTokenizer

from .text_uncertainty import UNCERTAINTY_READINGS, knn_distance, length_standardised

# The safetensors metadata key under which insub-hf records each weight file's tensor checksums
# (`insub_hf.checksums.METADATA_KEY`; this file imports nothing of insub-hf, a test holds the two equal)
CHECKSUM_KEY = "insub_hf_sha256"


def weights_digest(path_of) -> str | None:
    """SHA-256 of the tensor checksums insub-hf recorded in a folder's weight files: which weights the folder holds.
    `path_of(name)` gives a file's local path, or None where the folder lacks it (a local folder or a Hub repo's
    cache). None for a folder without such weights."""
    files = [path_of("model.safetensors")]
    if files[0] is None:
        index = path_of("model.safetensors.index.json")
        if index is None:
            return None
        with open(index, encoding="utf-8") as handle:
            files = [path_of(shard) for shard in sorted(set(json.load(handle)["weight_map"].values()))]
    digest = hashlib.sha256()
    for file in files:
        with safe_open(file, framework="pt") as handle:
            digest.update((handle.metadata() or {}).get(CHECKSUM_KEY, "").encode() + b";")
    return digest.hexdigest()


def tensor_digest(tensor: torch.Tensor) -> str:
    """SHA-256 of a tensor's float32 bytes."""
    return hashlib.sha256(tensor.detach().float().cpu().contiguous().numpy().tobytes()).hexdigest()


class InSubSentenceTransformer(InputModule):
    """Tokeniser and InSub text model as one sentence-transformers input module.

    `forward` adds to the features: `sentence_embedding (B, d)` (the encoder's representation, what `encode` returns),
    `head_embeddings (B, M, q)`, `mean_embedding (B, q)` and `uncertainty (B,)` (the model's oriented uncertainty: the
    heads' spread averaged over dimensions, read in `config.uncertainty_direction`).

    Args:
        model_name_or_path: a folder holding the InSub model (with its remote code) and its tokenizer.
        max_seq_length: tokens per sentence (saved in the module's config; default: the tokenizer's
            `model_max_length`).
        model, tokenizer: already loaded ones instead of `model_name_or_path`.
    """

    config_file_name = "insub_sentence_config.json"
    config_keys = ["max_seq_length"]
    save_in_root = True

    def __init__(self, model_name_or_path: str | None = None, max_seq_length: int | None = None, model=None,
                 tokenizer=None, trust_remote_code: bool = True):
        super().__init__()
        if model is None:
            model = AutoModel.from_pretrained(model_name_or_path, trust_remote_code=trust_remote_code)
        self.model = model.eval()
        self.tokenizer = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(
            model_name_or_path, trust_remote_code=trust_remote_code  # its config.json names the remote code
        )
        self.max_seq_length = max_seq_length or self.tokenizer.model_max_length

    def preprocess(self, inputs, prompt: str | None = None, **kwargs) -> dict[str, torch.Tensor]:
        texts = [prompt + text for text in inputs] if prompt else list(inputs)
        return dict(self.tokenizer(texts, max_length=self.max_seq_length, truncation=True, padding=True,
                                   return_tensors="pt"))

    def forward(self, features: dict[str, torch.Tensor], **kwargs) -> dict[str, torch.Tensor]:
        inputs = {k: features[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in features}
        out = self.model(**inputs)
        features.update(sentence_embedding=out.representation, head_embeddings=out.head_embeddings,
                        mean_embedding=out.mean_embedding, uncertainty=out.uncertainty, head_spread=out.head_spread)
        return features

    def get_sentence_embedding_dimension(self) -> int:
        return self.model.encoder.output_dim

    def get_max_seq_length(self) -> int:
        return self.max_seq_length

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        self.model.save_pretrained(output_path, remote_code=True)
        self.save_tokenizer(output_path)
        self.save_config(output_path)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", token=None, cache_folder=None, revision=None,
             local_files_only: bool = False, trust_remote_code: bool = False, **kwargs) -> InSubSentenceTransformer:
        hub = dict(token=token, cache_folder=cache_folder, revision=revision, local_files_only=local_files_only)
        config = cls.load_config(model_name_or_path, subfolder=subfolder, **hub)
        folder = cls.load_dir_path(model_name_or_path, subfolder=subfolder, **hub)
        return cls(folder, trust_remote_code=trust_remote_code, **config)


class InSubUncertainty(Module):
    """The last module of a text model's folder: `uncertainty (B,)` becomes the reading chosen for this model on
    validation data (higher = more likely out of distribution), and the heads' spread stays as `head_spread (B,)`.

    Args:
        reading: one of `UNCERTAINTY_READINGS`: `"spread"` (the model's own `uncertainty`, as it gives it: its
            oriented spread, or its bank's k-NN reading when it holds one),
            `"spread_by_length"` (standardised per token-count bucket: `length_edges/mean/std`, then read in
            `direction`), `"knn"` (cosine distance of the normalised embedding to the k-th nearest of `bank_size`
            training sentences, stored in the module's `model.safetensors`).
        k, bank_size, embedding_size: the k-NN reading's neighbour and bank (N, d).
        length_edges, length_mean, length_std: the length buckets (`fit_length_standardisation`).
        direction: +1 or -1, how the standardised spread is read (fixed on validation data).
        weights_sha256: `weights_digest` of the folder's weights the bank was embedded with; a load refuses the bank
            beside other weights (a bank copied from another model, weights saved again after retraining).
        bank_sha256: `tensor_digest` of the bank as saved; a load refuses a bank whose bytes changed.
    """

    config_keys = ["reading", "k", "bank_size", "embedding_size", "length_edges", "length_mean", "length_std",
                   "direction", "weights_sha256", "bank_sha256"]

    def __init__(self, reading: str = "spread", k: int = 10, bank_size: int = 0, embedding_size: int = 0,
                 length_edges: list | None = None, length_mean: list | None = None, length_std: list | None = None,
                 direction: int = 1, bank: torch.Tensor | None = None, weights_sha256: str | None = None,
                 bank_sha256: str | None = None):
        super().__init__()
        if reading not in UNCERTAINTY_READINGS:
            raise ValueError(f"InSubUncertainty: reading must be one of {UNCERTAINTY_READINGS}, got {reading!r}.")
        if bank is not None:
            bank_size, embedding_size = bank.shape
        if reading == "knn" and not 1 <= k <= bank_size:
            raise ValueError(f"InSubUncertainty: k={k} must be between 1 and the bank's {bank_size} sentences.")
        self.reading, self.k, self.direction = reading, k, direction
        self.bank_size, self.embedding_size = bank_size, embedding_size
        self.length_edges, self.length_mean, self.length_std = length_edges, length_mean, length_std
        self.weights_sha256 = weights_sha256
        self.register_buffer("bank", F.normalize(bank.float(), dim=1) if bank is not None
                             else torch.zeros(bank_size, embedding_size))
        self.bank_sha256 = tensor_digest(self.bank) if bank is not None else bank_sha256

    def forward(self, features: dict[str, torch.Tensor], **kwargs) -> dict[str, torch.Tensor]:
        spread = features["head_spread"]
        if self.reading == "knn":
            embedding = F.normalize(features["sentence_embedding"], dim=-1)
            features["uncertainty"] = knn_distance(embedding, self.bank.to(embedding.device), self.k)
        elif self.reading == "spread_by_length":
            lengths = features["attention_mask"].sum(dim=1)
            features["uncertainty"] = self.direction * length_standardised(
                spread, lengths, self.length_edges, self.length_mean, self.length_std)
        return features

    def set_bank(self, embeddings: torch.Tensor, k: int | None = None) -> InSubUncertainty:
        """Makes `uncertainty` the distance to your own in-distribution data: the k-NN reading over `embeddings
        (N, d)`, e.g. `model[-1].set_bank(model.encode(my_sentences, convert_to_tensor=True))`; `model.save(folder)`
        keeps it, tied to the folder's weights. `k`: the neighbour (default: this module's, at most N)."""
        embeddings = torch.as_tensor(embeddings).detach().float().cpu()
        k = self.k if k is None else k
        if embeddings.dim() != 2 or (self.embedding_size and embeddings.shape[1] != self.embedding_size):
            raise ValueError(f"InSubUncertainty.set_bank: embeddings must be (N, {self.embedding_size or 'd'}), as "
                             f"model.encode(sentences) gives them; got {tuple(embeddings.shape)}.")
        if not 1 <= k <= embeddings.shape[0]:
            raise ValueError(f"InSubUncertainty.set_bank: k={k} must be between 1 and the bank's "
                             f"{embeddings.shape[0]} sentences; give more sentences or a smaller k.")
        self.reading, self.k = "knn", k
        self.bank_size, self.embedding_size = embeddings.shape
        self.bank = F.normalize(embeddings, dim=1)
        self.bank_sha256 = tensor_digest(self.bank)
        return self

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        if self.reading == "knn":  # the folder's weights, saved before this module (sentence-transformers' order)
            root = os.path.dirname(os.path.normpath(output_path))
            found = weights_digest(lambda name: os.path.join(root, name)
                                   if os.path.isfile(os.path.join(root, name)) else None)
            self.weights_sha256 = found or self.weights_sha256
        self.save_config(output_path)
        if self.reading == "knn":
            self.save_torch_weights(output_path, safe_serialization=safe_serialization)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", token=None, cache_folder=None, revision=None,
             local_files_only: bool = False, **kwargs) -> InSubUncertainty:
        hub = dict(subfolder=subfolder, token=token, cache_folder=cache_folder, revision=revision,
                   local_files_only=local_files_only)
        module = cls(**cls.load_config(model_name_or_path, **hub))
        if module.reading == "knn":
            module = cls.load_torch_weights(model_name_or_path=model_name_or_path, model=module, **hub)
            module.check_bank(model_name_or_path, subfolder, dict(hub, subfolder=""))
        return module

    def check_bank(self, folder: str, subfolder: str, hub: dict) -> None:
        """Refuses a k-NN bank whose bytes changed since it was saved, or that was embedded by other weights than the
        folder's, naming the files to rebuild (`InSubSentenceEncoder.save_sentence_transformer`)."""
        where = f"{folder}/{subfolder}" if subfolder else folder
        if self.bank_sha256 is not None and tensor_digest(self.bank) != self.bank_sha256:
            raise ValueError(
                f"InSubUncertainty: the k-NN bank in {where} does not match the checksum saved with it (the file "
                "changed); rebuild the folder with save_sentence_transformer(..., uncertainty=...)."
            )
        if self.weights_sha256 is not None:
            found = weights_digest(lambda name: self.load_file_path(folder, name, **hub))
            if found != self.weights_sha256:
                raise ValueError(
                    f"InSubUncertainty: the k-NN bank in {where} was embedded by other weights than {folder} holds "
                    f"(bank made with {self.weights_sha256[:12]}, weights now {str(found)[:12]}): its distances would "
                    "belong to another model. Rebuild it with save_sentence_transformer(..., uncertainty=...)."
                )

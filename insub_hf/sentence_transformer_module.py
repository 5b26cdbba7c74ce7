"""A sentence-transformers module serving an InSub text model: `SentenceTransformer(folder, trust_remote_code=True)`
embeds with `encode(...)` and gives each sentence's uncertainty with `encode(..., output_value="uncertainty")`.

This file and `text_uncertainty.py` are copied into the saved folder and loaded from there, so they import only torch,
transformers and sentence-transformers (the InSub model itself loads through its remote code beside them). Save a
folder with `insub_hf.InSubSentenceEncoder.save_sentence_transformer`.

`uncertainty` is the model's own (`config.uncertainty_reading`: its oriented spread, or the k-NN distance to the bank
stored with its weights), as `AutoModel` gives it; `model[0].set_bank(model.encode(sentences, convert_to_tensor=True))`
makes that bank your own in-distribution sentences. A folder may end with `InSubUncertainty`, which reads the spread
standardised per sentence-length bucket instead (`text_uncertainty`, the one implementation the job that chose it uses
too: `insub-hf text-candidates`).
"""

from __future__ import annotations


import torch
from sentence_transformers.base.modules import InputModule, Module
from transformers import AutoModel, AutoTokenizer

from .text_uncertainty import length_standardised

# What `InSubUncertainty` reads instead of the model's own `uncertainty`
MODULE_READINGS = ("spread_by_length",)


class InSubSentenceTransformer(InputModule):
    """Tokeniser and InSub text model as one sentence-transformers input module.

    `forward` adds to the features: `sentence_embedding (B, d)` (the encoder's representation, what `encode` returns),
    `head_embeddings (B, M, q)`, `mean_embedding (B, q)`, `uncertainty (B,)` (the model's own, as
    `config.uncertainty_reading` says) and `head_spread (B,)` (the oriented spread).

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

    def set_bank(self, embeddings: torch.Tensor, k: int | None = None) -> InSubSentenceTransformer:
        """Makes `uncertainty` the cosine distance to the k-th nearest of `embeddings (N, d)`, as
        `model.encode(your_sentences, convert_to_tensor=True)` gives them: the model's bank (`InSubModel.set_bank`),
        so `model.save(folder)` keeps it with the weights and `AutoModel` serves the same number."""
        self.model.set_bank(torch.as_tensor(embeddings).detach().float().cpu(), k)
        return self

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
    """A last module that makes `uncertainty (B,)` the heads' spread standardised per token-count bucket (fitted on
    validation sentences), read in `direction`; the model's own stays as `head_spread (B,)`.

    Args:
        reading: one of `MODULE_READINGS`.
        length_edges, length_mean, length_std: the length buckets (`text_uncertainty.fit_length_standardisation`).
        direction: +1 or -1, how the standardised spread is read (fixed on validation data).
    """

    config_keys = ["reading", "length_edges", "length_mean", "length_std", "direction"]

    def __init__(self, reading: str = "spread_by_length", length_edges: list | None = None,
                 length_mean: list | None = None, length_std: list | None = None, direction: int = 1):
        super().__init__()
        if reading not in MODULE_READINGS:
            raise ValueError(f"InSubUncertainty: reading must be one of {MODULE_READINGS}, got {reading!r} (the "
                             "model's own spread or k-NN bank needs no module: InSubModel.set_bank).")
        self.reading, self.direction = reading, direction
        self.length_edges, self.length_mean, self.length_std = length_edges, length_mean, length_std

    def forward(self, features: dict[str, torch.Tensor], **kwargs) -> dict[str, torch.Tensor]:
        lengths = features["attention_mask"].sum(dim=1)
        features["uncertainty"] = self.direction * length_standardised(
            features["head_spread"], lengths, self.length_edges, self.length_mean, self.length_std)
        return features

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        self.save_config(output_path)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", token=None, cache_folder=None, revision=None,
             local_files_only: bool = False, **kwargs) -> InSubUncertainty:
        return cls(**cls.load_config(model_name_or_path, subfolder=subfolder, token=token, cache_folder=cache_folder,
                                     revision=revision, local_files_only=local_files_only))

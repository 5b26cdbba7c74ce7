"""A sentence-transformers module serving an InSub text model: `SentenceTransformer(folder, trust_remote_code=True)`
embeds with `encode(...)` and gives each sentence's uncertainty with `encode(..., output_value="uncertainty")`.

This file is copied into the saved folder and loaded from there, so it imports only torch, transformers and
sentence-transformers (the InSub model itself loads through its remote code beside it). Save a folder with
`insub_hf.InSubSentenceEncoder.save_sentence_transformer`.

`uncertainty` is the model's calibrated one (`model[0].fit_uncertainty(your_sentences)`), as `AutoModel` gives it;
`head_spread` the heads' oriented spread and, where the model holds a bank, `knn_distance` the cosine distance to
it (`model[0].set_bank(model.encode(sentences, convert_to_tensor=True))` makes that bank your own in-distribution
sentences).
"""

from __future__ import annotations

import torch
from sentence_transformers.base.modules import InputModule
from transformers import AutoModel, AutoTokenizer


class SentenceFeatures(dict):
    """The features this module returns: a dict whose missing keys are answered in words (`encode(...,
    output_value=NAME)` reads one): the uncertainty of a model not fitted yet says how to fit it, another name lists
    the outputs there are."""

    def __missing__(self, key):
        if key == "uncertainty":
            raise KeyError("output_value='uncertainty': this model's uncertainty is not fitted yet; fit it on a few "
                           "thousand of your in-distribution sentences first: model[0].fit_uncertainty(your_sentences)")
        raise KeyError(f"output_value={key!r} is not an output of this model; it gives {sorted(self)} (and "
                       "output_value=None for all of them)")


class InSubSentenceTransformer(InputModule):
    """Tokeniser and InSub text model as one sentence-transformers input module.

    `forward` adds to the features: `sentence_embedding (B, d)` (the encoder's representation, what `encode` returns),
    `head_embeddings (B, M, q)`, `mean_embedding (B, q)`, `uncertainty (B,)` (the calibrated one, once fitted),
    `head_spread (B,)` (the oriented spread) and `knn_distance (B,)` (where the model holds a bank).

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
        if max_seq_length is not None and (isinstance(max_seq_length, bool) or not isinstance(max_seq_length, int)
                                           or max_seq_length < 2):  # [CLS] and [SEP] take two tokens
            raise ValueError(f"InSubSentenceTransformer: max_seq_length={max_seq_length!r} (insub_sentence_config.json "
                             "of the folder) must be an integer >= 2, the tokens a sentence keeps with [CLS] and "
                             "[SEP]; fix it there or save the folder again.")
        self.max_seq_length = max_seq_length or self.tokenizer.model_max_length

    def preprocess(self, inputs, prompt: str | None = None, **kwargs) -> dict[str, torch.Tensor]:
        texts = [prompt + text for text in inputs] if prompt else list(inputs)
        return dict(self.tokenizer(texts, max_length=self.max_seq_length, truncation=True, padding=True,
                                   return_tensors="pt"))

    def forward(self, features: dict[str, torch.Tensor], **kwargs) -> dict[str, torch.Tensor]:
        inputs = {k: features[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in features}
        out = self.model(**inputs)
        features.update(sentence_embedding=out.representation, head_embeddings=out.head_embeddings,
                        mean_embedding=out.mean_embedding, head_spread=out.head_spread)
        if out.uncertainty is not None:  # None until fitted (`fit_uncertainty`): never a number nobody oriented
            features["uncertainty"] = out.uncertainty
        if getattr(out, "knn_distance", None) is not None:
            features["knn_distance"] = out.knn_distance
        return SentenceFeatures(features)

    def fit_uncertainty(self, sentences: list[str], batch_size: int = 256):
        """Fits the model's calibrated `uncertainty` in [0, 1] on your in-distribution `sentences` (hundreds or
        more: a bank, and held-out ones to rank against; `InSubModel.fit_uncertainty`); `model.save(folder)` keeps
        it, and `AutoModel` serves the same number."""
        return self.model.fit_uncertainty(self.preprocess(sentences), batch_size=batch_size)

    def get_sentence_embedding_dimension(self) -> int:
        return self.model.encoder.output_dim

    def set_bank(self, embeddings: torch.Tensor, k: int | None = None) -> InSubSentenceTransformer:
        """Makes `knn_distance` the cosine distance to the k-th nearest of `embeddings (N, d)`, as
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

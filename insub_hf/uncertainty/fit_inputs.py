"""What `fit_uncertainty` takes, turned into the encoder's inputs as tensors with N rows, checked before any forward:
a dict of tensors or arrays (a processor's output), what the model's processor takes (PIL images, numpy images, a
bare image tensor, sentences, DNA strings) or a `datasets.Dataset` holding one of them. Sentences are tokenised
without padding to the longest of the set: `fitting.embedded` batches them by length."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

# Columns a `datasets.Dataset` is read from, by what the model reads (the main input itself is tried first)
DATASET_COLUMNS = {"pixel_values": ("image", "img", "pixel_values"),
                   "input_ids": ("text", "sentence", "sentences"),
                   "dna_one_hot": ("sequence", "seq", "dna")}
# What each kind of model takes, as said when an input is refused
TAKES = {"pixel_values": "a dict with `pixel_values (N, C, H, W)`, a float tensor or array of that shape, a list of PIL "
                         "images or numpy images, or a datasets.Dataset with an image column",
         "input_ids": "a dict with `input_ids (N, T)` (and `attention_mask`), a list of sentences, or a "
                      "datasets.Dataset with a text column",
         "dna_one_hot": "a dict with `dna_one_hot (N, L, 4)`, a float tensor of that shape, a list of DNA strings, "
                        "or a datasets.Dataset with a sequence column"}


def refuse(argument: str, main: str, got: str, call: str = "fit_uncertainty") -> ValueError:
    return ValueError(f"{call}({argument}=...): this model reads `{main}`; it takes {TAKES[main]}; got {got}.")


def find_processor(model, processor, argument: str, main: str, call: str = "fit_uncertainty"):
    """`processor` as given, else the one saved beside the model (`name_or_path`), else a refusal naming `processor=`."""
    if processor is not None:
        return processor
    source = getattr(model, "name_or_path", "") or ""
    if source:
        from transformers import AutoImageProcessor, AutoTokenizer

        loader = AutoImageProcessor if main == "pixel_values" else AutoTokenizer
        try:
            return loader.from_pretrained(source)
        except (OSError, ValueError):
            pass
    kind = "image processor" if main == "pixel_values" else "tokenizer"
    raise ValueError(f"{call}({argument}=...): raw inputs need the model's {kind}, and none is saved beside "
                     f"it ({source or 'a model built in memory'}): pass processor=your_{kind.replace(' ', '_')}.")


def from_dataset(dataset, argument: str, main: str, call: str = "fit_uncertainty"):
    """The column of `dataset` (a `datasets.Dataset`) the model reads, as a list or a tensor."""
    for column in (main, *DATASET_COLUMNS[main]):
        if column in dataset.column_names:
            values = dataset[column]
            return values if isinstance(values, (list, torch.Tensor, np.ndarray)) else list(values)
    raise ValueError(f"{call}({argument}=...): the dataset has columns {dataset.column_names}; this model "
                     f"reads `{main}`: give a dataset with one of the columns {[main, *DATASET_COLUMNS[main]]} (or "
                     f"dataset.rename_column(...)).")


def from_raw(model, values, argument: str, main: str, processor, call: str = "fit_uncertainty"):
    """The encoder's inputs of a list of raw inputs (PIL or numpy images, sentences, DNA strings)."""
    if main == "dna_one_hot":
        from ..encoders.dna_encoding import one_hot_dna

        if not all(isinstance(v, str) for v in values):
            raise refuse(argument, main, "a list that is not all DNA strings", call)
        lengths = {len(v) for v in values}
        if len(lengths) != 1:
            raise ValueError(f"{call}({argument}=...): the DNA strings have {len(lengths)} lengths "
                             f"({sorted(lengths)[:5]}...); give windows of one length.")
        return {main: torch.stack([one_hot_dna(v, name=f"{argument}[{i}]") for i, v in enumerate(values)])}
    texts = all(isinstance(v, str) for v in values)
    if (main == "input_ids") != texts:
        what = "sentences" if texts else f"a list of {type(values[0]).__name__}"
        raise refuse(argument, main, what, call)
    processor = find_processor(model, processor, argument, main, call)
    if main == "pixel_values":
        return dict(processor(images=list(values), return_tensors="pt"))
    limit = model.config.text_max_length(processor)
    encoded = processor(list(values), truncation=True, max_length=limit, padding=True, return_tensors="pt")
    return dict(encoded)


def from_array(array, argument: str, main: str, call: str = "fit_uncertainty"):
    """A bare tensor or array: the main input where it has that layout (floats), numpy images as integers
    `(N, H, W[, C])` for the processor, or token ids `(N, T)`."""
    floating = array.is_floating_point() if isinstance(array, torch.Tensor) else array.dtype.kind == "f"
    layout = {"pixel_values": 4, "dna_one_hot": 3, "input_ids": 2}[main]
    if main == "pixel_values" and not floating and array.ndim in (3, 4):
        return list(np.asarray(array))  # 8-bit images: the processor rescales and normalises them
    if floating == (main != "input_ids") and array.ndim == layout:
        return {main: torch.as_tensor(array)}
    kind = "float" if floating else "integer"
    raise refuse(argument, main, f"a {kind} array of shape {tuple(array.shape)}", call)


def as_model_inputs(model, inputs, argument: str = "inputs", processor=None,
                    call: str = "fit_uncertainty") -> dict[str, torch.Tensor]:
    """`inputs` (any form of the module note) as the encoder's inputs: tensors with N rows each, the main input
    finite, or a refusal in one line naming `call` (the function taking them), `argument`, what this model takes and
    what it got."""
    main = model.encoder.main_input_name
    if type(inputs).__name__ == "Dataset" and hasattr(inputs, "column_names"):
        inputs = from_dataset(inputs, argument, main, call)
    if isinstance(inputs, np.ndarray) and inputs.dtype.kind in "OUS":  # strings
        inputs = inputs.tolist()
    if isinstance(inputs, (torch.Tensor, np.ndarray)):
        inputs = from_array(inputs, argument, main, call)
    if isinstance(inputs, str):
        raise refuse(argument, main, "one string (give a list of them)", call)
    if isinstance(inputs, Sequence) and not isinstance(inputs, Mapping):
        if len(inputs) == 0:
            raise refuse(argument, main, "an empty list", call)
        inputs = from_raw(model, inputs, argument, main, processor, call)
    if not isinstance(inputs, Mapping):
        raise refuse(argument, main, f"a {type(inputs).__name__}", call)
    if main not in inputs or inputs[main] is None:
        raise refuse(argument, main, f"a dict with keys {sorted(inputs)}", call)
    tensors = {name: torch.as_tensor(inputs[name]) for name in model.encoder.input_names
               if inputs.get(name) is not None}
    rows = {name: value.shape[0] if value.dim() else 0 for name, value in tensors.items()}
    if len(set(rows.values())) != 1 or rows[main] == 0:
        raise ValueError(f"{call}({argument}=...): its tensors must hold the same number (>= 1) of rows; "
                         f"got {rows}.")
    if tensors[main].is_floating_point() and not torch.isfinite(tensors[main]).all():
        bad = int((~torch.isfinite(tensors[main].flatten(1))).any(dim=1).sum())
        raise ValueError(f"{call}({argument}=...): {bad} of its {rows[main]} rows hold NaN or inf values in "
                         f"`{main}`; give finite inputs.")
    return tensors

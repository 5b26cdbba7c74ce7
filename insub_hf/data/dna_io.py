"""DNA files: streaming FASTA (plain or gzip) and the bundled real sets, as `datasets.Dataset`s."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pandas as pd
from datasets import ClassLabel, Dataset
from datasets.exceptions import DatasetGenerationError

from .columns import check_dataset

SPLICE_LABELS = ["ei", "ie", "n"]


def _open_text(path: str | Path):
    path = Path(path)
    with open(path, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rt") if gzipped else open(path)


def read_fasta(path: str | Path, skip_empty: bool = False) -> Iterator[tuple[str, str]]:
    """Yields `(name, sequence)` per record, reading line by line (gzip detected from the file's magic bytes).

    Only one record is held in memory at a time; for a whole chromosome use `fasta_windows`. Case is kept (one-hot
    encoding ignores it). An empty record (a header without sequence) raises ValueError naming it, unless
    `skip_empty`; text before the first header is refused.
    """
    name, parts = None, []

    def finish():
        if not parts and not skip_empty:
            raise ValueError(f"{path}: FASTA record {name!r} has no sequence (empty record).")
        return (name, "".join(parts)) if parts else None

    with _open_text(path) as f:
        for number, line in enumerate(f, start=1):
            line = line.strip()
            if not line:
                continue
            if line.startswith(">"):
                if name is not None and (record := finish()) is not None:
                    yield record
                name, parts = line[1:].strip() or f"record_at_line_{number}", []
            elif name is None:
                raise ValueError(f"{path}: line {number} holds sequence before any '>' header; not a FASTA file.")
            else:
                parts.append(line)
    if name is not None and (record := finish()) is not None:
        yield record


def fasta_windows(path: str | Path, length: int, stride: int | None = None) -> Iterator[tuple[str, str]]:
    """Yields `(name:start, window)` of `length` nt every `stride` nt (default: `length`) through every record,
    streaming: memory holds about one window per record, never a whole chromosome."""
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length}.")
    stride = stride or length
    name, buffer, offset = None, "", 0
    with _open_text(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith(">"):
                name, buffer, offset = line[1:].strip(), "", 0
                continue
            buffer += line
            while len(buffer) >= length:
                yield f"{name}:{offset}", buffer[:length]
                buffer, offset = buffer[stride:], offset + stride


def load_fasta_dataset(path: str | Path, label_from_header: bool = False, skip_empty: bool = False) -> Dataset:
    """A FASTA file as a Dataset with `name`, `sequence` (and `label` taken after the last `|` of each header
    when `label_from_header`). Built with `Dataset.from_generator`, so the records stream to the Arrow cache."""

    def rows():
        for name, sequence in read_fasta(path, skip_empty):
            row = {"name": name, "sequence": sequence}
            if label_from_header:
                if "|" not in name:
                    raise ValueError(f"{path}: header {name!r} has no '|label' suffix (label_from_header=True).")
                row["label"] = name.rsplit("|", 1)[1]
            yield row

    if not any(True for _ in read_fasta(path, skip_empty=True)):
        raise ValueError(f"{path}: no FASTA records (an empty file, or no line starting with '>').")
    try:
        return Dataset.from_generator(rows, gen_kwargs={}, cache_dir=None, keep_in_memory=False)
    except DatasetGenerationError as error:  # datasets wraps the generator's own message; give it back
        cause = error.__cause__
        if isinstance(cause, ValueError):
            raise ValueError(str(cause)) from None
        raise


def load_labelled_sequences(path: str | Path, sequence_column: str = "sequence", label_column: str = "label") -> Dataset:
    """Labelled sequences from a CSV (`sequence_column`, `label_column`) or a FASTA with `>name|label` headers; the
    labels become a `ClassLabel` (sorted names)."""
    if Path(path).suffix.lower() in (".csv", ".tsv") or str(path).endswith((".csv.gz", ".tsv.gz")):
        frame = pd.read_csv(path, sep="\t" if ".tsv" in str(path) else ",")
        data = Dataset.from_pandas(frame, preserve_index=False)
    else:
        data = load_fasta_dataset(path, label_from_header=True)
    check_dataset(data, sequence_column, "sequence_column", name=str(path))
    check_dataset(data, label_column, "label_column", name=str(path))
    if "name" not in data.column_names:  # what an error names: the record as the file has it, not a split's row
        data = data.add_column("name", [f"{Path(path).name} row {i + 1}" for i in range(len(data))])
    if sequence_column != "sequence":
        data = data.rename_column(sequence_column, "sequence")
    if label_column != "label":
        data = data.rename_column(label_column, "label")
    names = sorted({str(v) for v in data["label"]})
    return data.map(lambda row: {"label": names.index(str(row["label"]))}).cast_column("label", ClassLabel(names=names))


def load_splice_junctions() -> Dataset:
    """The bundled StatLog splice-junction set: 3,186 x 60 nt, labels ei / ie / n."""
    with resources.files("insub_hf.data").joinpath("bundled/splice_junctions.csv.gz").open("rb") as f:
        frame = pd.read_csv(f, compression="gzip")
    data = Dataset.from_dict({"sequence": frame["sequence"].tolist(),
                              "label": [SPLICE_LABELS.index(v) for v in frame["label"]]})
    return data.cast_column("label", ClassLabel(names=SPLICE_LABELS))


def bundled_upstream_path() -> Path:
    """The bundled Drosophila upstream regions (1,500 x 1,000 nt, FASTA.gz)."""
    return Path(str(resources.files("insub_hf.data").joinpath("bundled/dm3_upstream1000_subset.fa.gz")))

"""SentEval-style transfer: frozen sentence embeddings -> logistic regression, per task; STS Spearman.

Protocols follow SentEval (Conneau & Kiela 2018): MR, CR, SUBJ, MPQA (and the bundled tweets) use 10-fold
cross-validation with the L2 penalty tuned by an inner cross-validation on each training part; SST-2, TREC and MRPC
use their train/test splits, the penalty tuned on a dev split when there is one, else by inner cross-validation.
MRPC pairs are featurised as `[|u - v|, u * v]`. Each test sentence is predicted once, so accuracy, ECE and NLL
are computed on the pooled out-of-fold probabilities.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits
from tqdm.auto import tqdm
import torch
from datasets import Dataset, DatasetDict, concatenate_datasets, load_dataset
from scipy.stats import spearmanr
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold

from ..data.columns import check_dataset
from ..validation import check_choice
from . import metrics

PENALTIES = tuple(2.0**t for t in range(-2, 4))  # SentEval's grid of inverse L2 penalties


@dataclass(frozen=True)
class SentEvalTask:
    """Where a task lives on the Hub and how it is read.

    Attributes:
        hub_id, config_name: what `load_dataset` gets.
        text_columns: one column, or two for sentence pairs.
        label_column: integer class labels.
        protocol: `"cv"` (all rows, k-fold) or `"splits"` (train / test, optional dev).
        train_split, test_split, dev_split: split names for `"splits"`.
    """

    hub_id: str
    text_columns: tuple[str, ...]
    label_column: str = "label"
    protocol: str = "cv"
    config_name: str | None = None
    train_split: str = "train"
    test_split: str = "test"
    dev_split: str | None = None


SENTEVAL_TASKS: dict[str, SentEvalTask] = {
    "MR": SentEvalTask("cornell-movie-review-data/rotten_tomatoes", ("text",)),
    "CR": SentEvalTask("SetFit/SentEval-CR", ("text",)),
    "SUBJ": SentEvalTask("SetFit/subj", ("text",)),
    "MPQA": SentEvalTask("jxm/mpqa", ("sentence",)),
    # GLUE's SST-2 test labels are hidden: its validation split is the test set, as in many SentEval ports
    "SST2": SentEvalTask("stanfordnlp/sst2", ("sentence",), protocol="splits", test_split="validation"),
    "TREC": SentEvalTask("CogComp/trec", ("text",), label_column="coarse_label", protocol="splits"),
    "MRPC": SentEvalTask("nyu-mll/glue", ("sentence1", "sentence2"), protocol="splits", config_name="mrpc",
                         dev_split="validation"),
}
STS_TASKS = {"STSB": SentEvalTask("sentence-transformers/stsb", ("sentence1", "sentence2"), label_column="score",
                                  protocol="splits")}


def load_senteval_task(name: str, path: str | None = None) -> DatasetDict:
    """Loads a SentEval task with `load_dataset` (its Hub id, or `path`: a local copy in the same format).

    Returns the splits the task's protocol reads, each checked to hold the text and label columns; `"cv"` tasks
    come back as one `"all"` split (every row, as SentEval pools them).
    """
    check_choice("task", name, sorted(SENTEVAL_TASKS) + sorted(STS_TASKS))
    task = {**SENTEVAL_TASKS, **STS_TASKS}[name]
    loaded = load_dataset(path) if path else load_dataset(task.hub_id, task.config_name)
    if task.protocol == "cv":
        loaded = DatasetDict({"all": concatenate_datasets(list(loaded.values()))})
    else:
        wanted = [task.train_split, task.test_split] + ([task.dev_split] if task.dev_split else [])
        missing = [s for s in wanted if s not in loaded]
        if missing:
            raise ValueError(f"task {name}: splits {missing} are missing; the data has {sorted(loaded)}.")
        loaded = DatasetDict({s: loaded[s] for s in wanted})
    for split, part in loaded.items():
        for column in (*task.text_columns, task.label_column):
            check_dataset(part, column, "text/label column", name=f"task {name} [{split}]")
    return loaded


# Fitted classifiers by what they were fitted on. The text recipe's encoder is frozen, so its base, baseline and
# InSub models give the same embeddings, and every fit of their protocols would repeat; each is made once per
# process instead. Callers only predict with them.
_FITTED: dict[str, LogisticRegression] = {}
MAX_FITTED = 4096


def _fit(features: np.ndarray, labels: np.ndarray, penalty: float, seed: int) -> LogisticRegression:
    features, labels = np.ascontiguousarray(features), np.ascontiguousarray(labels)
    key = hashlib.sha256(features.tobytes() + b"|" + labels.tobytes() + b"|" + repr(
        (features.shape, str(features.dtype), labels.dtype.str, penalty, seed)).encode()).hexdigest()
    if key not in _FITTED:
        if len(_FITTED) >= MAX_FITTED:  # bounded: one long process's jobs
            _FITTED.clear()
        _FITTED[key] = LogisticRegression(C=penalty, max_iter=1000, random_state=seed).fit(features, labels)
    return _FITTED[key]


def _tune(features: np.ndarray, labels: np.ndarray, inner_folds: int, seed: int) -> float:
    """The penalty with the best inner cross-validated accuracy."""
    folds = StratifiedKFold(inner_folds, shuffle=True, random_state=seed)
    scores = []
    for penalty in PENALTIES:
        hits = [
            (_fit(features[tr], labels[tr], penalty, seed).predict(features[va]) == labels[va]).mean()
            for tr, va in folds.split(features, labels)
        ]
        scores.append(np.mean(hits))
    return PENALTIES[int(np.argmax(scores))]


def _summary(probs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    p, y = torch.as_tensor(probs, dtype=torch.float64), torch.as_tensor(labels)
    return {
        "accuracy": metrics.accuracy(p, y),
        "ece": metrics.expected_calibration_error(p, y),
        "nll": metrics.nll(p, y),
        "n": int(len(labels)),
    }


def classify_cv(
    features: np.ndarray, labels: np.ndarray, folds: int = 10, inner_folds: int = 5, seed: int = 0
) -> dict[str, float]:
    """k-fold logistic regression on frozen features `(N, d)`; accuracy, ECE, NLL on pooled out-of-fold predictions."""
    labels = np.asarray(labels)
    classes = np.unique(labels)
    if len(classes) < 2:
        raise ValueError(f"classify_cv: the labels hold {len(classes)} class; at least 2 are needed.")
    probs = np.zeros((len(labels), int(classes.max()) + 1))
    splits = StratifiedKFold(folds, shuffle=True, random_state=seed).split(features, labels)
    # single-threaded fits: lbfgs on a few thousand rows spends more on BLAS's threads than they gain (a tenth of
    # the time on 2 cores, benchmarks/transfer_folds.py)
    with threadpool_limits(1):
        for train, test in tqdm(splits, total=folds, desc=f"{folds}-fold transfer", leave=False):
            penalty = _tune(features[train], labels[train], inner_folds, seed)
            model = _fit(features[train], labels[train], penalty, seed)
            probs[np.ix_(test, model.classes_)] = model.predict_proba(features[test])
    return _summary(probs, labels)


def classify_splits(
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    dev: tuple[np.ndarray, np.ndarray] | None = None,
    inner_folds: int = 5,
    seed: int = 0,
) -> dict[str, float]:
    """Logistic regression trained on `train`, penalty tuned on `dev` (else inner CV), evaluated on `test`."""
    (_, y), (xt, yt) = train, test
    model = fit_classifier(train, dev, inner_folds, seed)
    probs = np.zeros((len(yt), int(max(y.max(), yt.max())) + 1))
    probs[:, model.classes_] = model.predict_proba(xt)
    return _summary(probs, yt)


def fit_classifier(
    train: tuple[np.ndarray, np.ndarray], dev: tuple[np.ndarray, np.ndarray] | None = None, inner_folds: int = 5,
    seed: int = 0,
) -> LogisticRegression:
    """Logistic regression on `train` (features `(N, d)`, labels `(N,)`), its penalty the best of `PENALTIES` on
    `dev` (else by inner cross-validation)."""
    x, y = train
    if dev is not None:
        scores = [(_fit(x, y, c, seed).predict(dev[0]) == dev[1]).mean() for c in PENALTIES]
        penalty = PENALTIES[int(np.argmax(scores))]
    else:
        penalty = _tune(x, y, inner_folds, seed)
    return _fit(x, y, penalty, seed)


def sts_spearman(u: torch.Tensor, v: torch.Tensor, scores) -> float:
    """Spearman correlation (x100) between cosine similarities of paired embeddings `(N, d)` and gold scores."""
    similarity = torch.nn.functional.cosine_similarity(u.double(), v.double(), dim=-1).numpy()
    return float(100 * spearmanr(similarity, np.asarray(scores)).statistic)


def evaluate_task(embed, name: str, data: DatasetDict | Dataset, folds: int = 10, seed: int = 0) -> dict[str, float]:
    """Runs one task's protocol.

    Args:
        embed: a function `list[str] -> (N, d) tensor` (e.g. `lambda s: encoder.encode(s).embeddings`).
        name: a key of `SENTEVAL_TASKS` / `STS_TASKS`, or `"TWEETS"` (the bundled tweets, 10-fold CV).
        data: what `load_senteval_task` returns (or, for TWEETS, `load_tweet_sentiment()`).
    """
    task = {**SENTEVAL_TASKS, **STS_TASKS, "TWEETS": SentEvalTask("bundled", ("text",))}.get(name)
    if task is None:
        check_choice("task", name, sorted(SENTEVAL_TASKS) + sorted(STS_TASKS) + ["TWEETS"])
    if isinstance(data, Dataset):
        data = DatasetDict({"all": data})

    def featurise(part: Dataset) -> np.ndarray:
        columns = [embed(list(part[c])) for c in task.text_columns]
        if len(columns) == 1:
            return columns[0].numpy()
        u, v = columns
        return torch.cat([(u - v).abs(), u * v], dim=1).numpy()

    if name in STS_TASKS:
        part = data[task.test_split]
        return {"spearman": sts_spearman(embed(list(part["sentence1"])), embed(list(part["sentence2"])),
                                         part[task.label_column]), "n": len(part)}
    if task.protocol == "cv":
        part = data["all"]
        return classify_cv(featurise(part), np.asarray(part[task.label_column]), folds=folds, seed=seed)
    parts = {s: (featurise(data[s]), np.asarray(data[s][task.label_column])) for s in data}
    dev = parts.get(task.dev_split) if task.dev_split else None
    return classify_splits(parts[task.train_split], parts[task.test_split], dev, seed=seed)

"""The harness's results as types: what one method measured (`MethodResults`) and its parts. `to_dict` gives the
JSON form results.json and the evaluation cache hold; `from_dict` reads it back.

OOD scores have one name and one direction everywhere: higher = more likely OOD (`OOD_SCORES`). Their AUROCs
(`MethodResults.ood`) are those of telling the test images from an OOD set by that score."""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field, fields

from ..validation import check_range

# name -> what the score is (each: higher = more likely OOD). The probe's scores need labels, the others do not.
OOD_SCORES = {
    "msp": "the negative max softmax probability of the probe",
    "entropy": "the predictive entropy of the probe",
    "mutual_information": "the mutual information between the prediction and the members (K > 1)",
    "knn": "the k-th nearest-neighbour distance to the training representations (label-free)",
    "knn_heads": "the k-th neighbour distance in each head's space, averaged over heads (label-free; M > 1)",
    "knn_heads_spread": "the spread of the per-head k-th neighbour distances (label-free; M > 1)",
    "head_spread": "the heads' spread, read in the direction fixed per model on validation noise (label-free; M > 1)",
    "uncertainty": "the model's own `uncertainty` as its config reads it: the calibrated rank of the k-NN distance "
                   "and the oriented spread where fitted (label-free)",
}


def checked_number(field: str, value, high: float | None = 1.0, optional: bool = False) -> float | None:
    """`value` as a plain float (numpy and torch scalars too), refused naming `field` unless finite and in
    [0, high] (None allowed when `optional`): a NaN or a fraction above 1 is a bug upstream, never a result."""
    if value is None and optional:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = value
    check_range(field, number, low=0.0, high=high)
    return number


def check_record_keys(cls, values, where: str) -> None:
    """Refuses, naming `where` and the keys, a value read back from JSON for the results dataclass `cls` that is not a
    mapping, lacks a required key or holds a key `cls` does not have (a record cut or edited)."""
    if not isinstance(values, dict):
        raise ValueError(f"{where} must be a mapping of {cls.__name__}'s fields, got {type(values).__name__}.")
    names = [f.name for f in fields(cls)]
    missing = [f.name for f in fields(cls)
               if f.default is MISSING and f.default_factory is MISSING and f.name not in values]
    unknown = sorted(set(values) - set(names))
    if missing or unknown:
        said = "; ".join(part for part in (missing and f"lacks {missing}", unknown and f"has unknown keys {unknown}")
                         if part)
        raise ValueError(f"{where} {said}" + (f" ({cls.__name__} has {names})." if unknown else "."))


def typed(cls, values, where: str):
    """`cls(**values)` for a results dataclass read back from JSON, its keys checked first (`check_record_keys`)."""
    check_record_keys(cls, values, where)
    return cls(**values)


def _check_fields(result, highs: dict[str, float | None], optional: tuple[str, ...] = ()) -> None:
    for name, high in highs.items():
        value = checked_number(f"{type(result).__name__}.{name}", getattr(result, name), high, name in optional)
        setattr(result, name, value)


@dataclass
class Metrics:
    """Accuracy and calibration of the averaged member probabilities: fractions in [0, 1], the Brier score in
    [0, 2], NLL and the normalised disagreement finite and >= 0 (each checked when built). With a temperature (fitted
    by NLL on held-out data, `metrics.fit_temperature`): the ECE and NLL of the prediction scaled by it."""

    accuracy: float
    nll: float
    ece: float
    tace: float
    brier: float
    disagreement_over_error: float | None = None  # with K > 1 members
    temperature: float | None = None
    ece_scaled: float | None = None
    nll_scaled: float | None = None

    def __post_init__(self) -> None:
        _check_fields(self, {"accuracy": 1.0, "nll": None, "ece": 1.0, "tace": 1.0, "brier": 2.0,
                             "disagreement_over_error": None, "temperature": None, "ece_scaled": 1.0,
                             "nll_scaled": None},
                      optional=("disagreement_over_error", "temperature", "ece_scaled", "nll_scaled"))


@dataclass
class CorruptionMetrics:
    """One corruption at one severity (or their mean): accuracy and calibration on the corrupted test images, and the
    AUROC of telling them from their clean versions by the probe's max probability, the label-free k-NN distance and
    (M > 1) the head spread."""

    accuracy: float
    ece: float
    tace: float
    auroc_msp: float
    auroc_knn: float
    auroc_head_spread: float | None = None

    def __post_init__(self) -> None:
        _check_fields(self, dict.fromkeys(("accuracy", "ece", "tace", "auroc_msp", "auroc_knn", "auroc_head_spread"),
                                          1.0), optional=("auroc_head_spread",))


@dataclass
class HeadSpreadCalibration:
    """How one model's head spread is read: `direction` +1 (high = OOD) or -1, fixed on training images against
    validation noise, where that reading has AUROC `validation_auroc` (of the +1 reading) with the 90 % bootstrap
    interval `interval` (None: not measured)."""

    direction: int
    validation_auroc: float | None
    interval: list[float] | None = None

    @property
    def usable_direction(self) -> int | None:
        """`direction` where it holds across resamples (the interval leaves out 0.5), else None: the spread is then
        no usable uncertainty of the model. Calibrations recorded without an interval keep their direction."""
        if self.interval is None or self.interval[0] > 0.5 or self.interval[1] < 0.5:
            return self.direction
        return None


@dataclass
class TrainingRecord:
    """What the pretraining log says of a run: the final ssl loss, how much it still fell over the last fifth of the
    steps, and the mean share of head spreads below alpha (None without heads)."""

    ssl_loss_final: float | None
    ssl_loss_late_drop: float | None
    hinge_active_mean: float | None


@dataclass
class Cost:
    """What a method cost (summed over the models an ensemble pretrains)."""

    parameters: int
    seconds_per_step: float
    peak_memory_mb: float
    pretrained_models: int
    pretraining_seconds: float
    evaluation_seconds: float | None = None


@dataclass
class MethodResults:
    """Everything the harness measured for one method.

    Attributes:
        members: K, the probability vectors averaged per prediction (models x probes x dropout passes).
        test: metrics on the clean test set.
        knn_accuracy: the k-NN classifier's test accuracy on the (first model's) frozen representation.
        ood: OOD set -> score name (`OOD_SCORES`) -> AUROC.
        semi_supervised: label fraction ("1%") -> test metrics of probes fit on that share of the labels.
        corruptions: corruption -> severity ("1".."5") -> metrics; corruption_mean: severity -> mean over types.
        head_spread_calibration: per model with heads, how its spread is read.
        ood_fpr95: OOD set -> score name -> FPR at 95 % TPR (lower is better).
        selective: "aurc" and "augrc" of the probe's max probability on the test set (lower is better).
        retrieval: score name -> R-AUROC: how well the score (higher = less certain) of a test input predicts that
            its nearest training representation (cosine) has another class; None where no retrieval was wrong.
        crop: score name -> {"spearman": rank correlation of crop fraction and score (negative: smaller crops are
            less certain, as they should be), "smaller_crop_higher": share of images whose smallest crop scores
            higher than the whole image}.
        training, cost: the pretraining record and cost (set by the protocol, None from the harness alone).
        fingerprints: `weights_fingerprint` of each evaluated model's encoder and heads, and modality what they read
            ("image"): which model these numbers are of (`insub-hf hub` refuses them for another).
        flag_rate: the share of test inputs whose calibrated `uncertainty` is above 0.95 (about 0.05 by
            construction); None where the models serve no calibrated reading.
    """

    members: int
    test: Metrics
    knn_accuracy: float | None = None
    ood: dict[str, dict[str, float]] = field(default_factory=dict)
    semi_supervised: dict[str, Metrics] = field(default_factory=dict)
    corruptions: dict[str, dict[str, CorruptionMetrics]] = field(default_factory=dict)
    corruption_mean: dict[str, CorruptionMetrics] = field(default_factory=dict)
    head_spread_calibration: list[HeadSpreadCalibration] = field(default_factory=list)
    ood_fpr95: dict[str, dict[str, float]] = field(default_factory=dict)
    selective: dict[str, float] = field(default_factory=dict)
    retrieval: dict[str, float | None] = field(default_factory=dict)
    crop: dict[str, dict[str, float | None]] = field(default_factory=dict)
    training: TrainingRecord | None = None
    cost: Cost | None = None
    fingerprints: list[str] = field(default_factory=list)
    modality: str | None = None
    flag_rate: float | None = None

    def __post_init__(self) -> None:
        check_range("MethodResults.members", self.members, low=1, integer=True)
        self.knn_accuracy = checked_number("MethodResults.knn_accuracy", self.knn_accuracy, optional=True)
        self.flag_rate = checked_number("MethodResults.flag_rate", self.flag_rate, optional=True)
        self.ood = {name: {score: checked_number(f"MethodResults.ood[{name!r}][{score!r}] (an AUROC)", value)
                           for score, value in scores.items()} for name, scores in self.ood.items()}
        self.ood_fpr95 = {name: {score: checked_number(f"MethodResults.ood_fpr95[{name!r}][{score!r}]", value)
                                 for score, value in scores.items()} for name, scores in self.ood_fpr95.items()}
        self.selective = {key: checked_number(f"MethodResults.selective[{key!r}]", value)
                          for key, value in self.selective.items()}
        self.retrieval = {key: checked_number(f"MethodResults.retrieval[{key!r}] (an R-AUROC)", value, optional=True)
                          for key, value in self.retrieval.items()}
        for score, test in self.crop.items():
            spearman = test.get("spearman")
            if spearman is not None:
                check_range(f"MethodResults.crop[{score!r}]['spearman']", spearman, low=-1.0, high=1.0)
            test["smaller_crop_higher"] = checked_number(f"MethodResults.crop[{score!r}]['smaller_crop_higher']",
                                                         test.get("smaller_crop_higher"))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> MethodResults:
        """The inverse of `to_dict`; a key missing or unknown at any level, and OOD score names outside
        `OOD_SCORES`, are refused naming where (`check_record_keys`)."""
        scores = sorted({score for per_set in (data.get("ood") or {}).values() for score in per_set} - set(OOD_SCORES))
        if scores:
            raise ValueError(
                f"MethodResults.from_dict: unknown OOD scores {scores[:3]} (known: {sorted(OOD_SCORES)}, each higher = "
                "more likely OOD)."
            )
        check_record_keys(cls, data, "results")  # its own keys, before its parts are read
        d = dict(data)
        d["test"] = typed(Metrics, d["test"], "test")
        d["semi_supervised"] = {k: typed(Metrics, v, f"semi_supervised[{k!r}]")
                                for k, v in d.get("semi_supervised", {}).items()}
        d["corruptions"] = {name: {s: typed(CorruptionMetrics, m, f"corruptions[{name!r}][{s!r}]") for s, m in per.items()}
                            for name, per in d.get("corruptions", {}).items()}
        d["corruption_mean"] = {s: typed(CorruptionMetrics, m, f"corruption_mean[{s!r}]")
                                for s, m in d.get("corruption_mean", {}).items()}
        d["head_spread_calibration"] = [typed(HeadSpreadCalibration, c, f"head_spread_calibration[{i}]")
                                        for i, c in enumerate(d.get("head_spread_calibration", []))]
        if d.get("training") is not None:
            d["training"] = typed(TrainingRecord, d["training"], "training")
        if d.get("cost") is not None:
            d["cost"] = typed(Cost, d["cost"], "cost")
        return cls(**d)


@dataclass
class ComparisonRow:
    """One line of a comparison: a method at one M and seed, and what it measured. `to_dict` is the row of
    results.json (the identity, then the results' fields)."""

    name: str
    method: str
    num_heads: int | None
    seed: int
    results: MethodResults

    def to_dict(self) -> dict:
        return {"name": self.name, "method": self.method, "num_heads": self.num_heads, "seed": self.seed,
                **self.results.to_dict()}

    @classmethod
    def from_dict(cls, data: dict) -> ComparisonRow:
        identity = ("name", "method", "num_heads", "seed")
        missing = [k for k in identity if k not in data]
        if missing:
            raise ValueError(f"a comparison row lacks {missing} (a row has {list(identity)} and its results).")
        return cls(*(data[k] for k in identity),
                   MethodResults.from_dict({k: v for k, v in data.items() if k not in identity}))

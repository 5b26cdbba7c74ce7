"""The compared methods, declared once: how each pretrains (the architecture and, for a deep ensemble, its members)
and how it is evaluated (MC-dropout passes, one probe per head). The comparison, the ablation and the mechanism job
build their models from here."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..model.configuration_insub import InSubConfig
from ..data import IMAGE_DATASET_PRESETS
from .arguments import ProtocolArguments

# The control: InSub as this package trained it before the authors' objective became the default (2026-11-23):
# cosine of the mean, unscaled NT-Xent, hinge summed over views, with that protocol's alpha 0.12 and lambda 1.5.
COSINE_CONTROL = dict(diversity_reduction="sum", diversity_alpha=0.12, diversity_weight=1.5)
COSINE_CONTROL_SIMCLR = {"normalize_mean": True, "base_temperature": None}


@dataclass(frozen=True)
class Method:
    """One compared method.

    Attributes:
        name: its key (`--methods`).
        label: its table name, formatted with `m` (M) and `passes` (T).
        uses_heads: it has M heads and InSub's hinge (else one head and lambda 0).
        uses_m: M applies to it (heads, members or BatchEnsemble size).
        deep_ensemble: M baselines from M seeds (member 0 is the baseline of the same seed).
        batch_ensemble: the encoder is a BatchEnsemble of M members.
        dropout: encoder dropout in pretraining and `mc_dropout_passes` sampled masks at test.
        probe_per_head: M probes per model (Finetune-InSub), else one.
        loss: replaces InSub's hinge settings (the cosine control).
        objective_overrides: merged into the objective's settings (the cosine control; SimCLR only).
    """

    name: str
    label: str
    uses_heads: bool = False
    uses_m: bool = False
    deep_ensemble: bool = False
    batch_ensemble: bool = False
    dropout: bool = False
    probe_per_head: bool = False
    loss: dict = field(default_factory=dict)
    objective_overrides: dict = field(default_factory=dict)

    def row_name(self, m: int | None, passes: int) -> str:
        return self.label.format(m=m, passes=passes)


METHODS: dict[str, Method] = {method.name: method for method in (
    Method("baseline", "Baseline"),
    Method("ssl_ensemble", "SSL-Ensemble (M={m})", uses_m=True, deep_ensemble=True),
    Method("mc_dropout", "MC Dropout (T={passes})", dropout=True),
    Method("batch_ensemble", "BatchEnsemble (M={m})", uses_m=True, batch_ensemble=True),
    Method("insub", "InSub (M={m})", uses_heads=True, uses_m=True),
    Method("insub_cosine", "InSub cosine control (M={m})", uses_heads=True, uses_m=True, loss=COSINE_CONTROL,
           objective_overrides=COSINE_CONTROL_SIMCLR),
    Method("finetune_insub", "Finetune-InSub (M={m})", uses_heads=True, uses_m=True, probe_per_head=True),
)}


def method_config(args: ProtocolArguments, method: str, m: int | None) -> InSubConfig:
    """The architecture `method` pretrains with the recipe `args` on `args.dataset` (all share the encoder; only what
    makes the method differs). `m` is the method's M: InSub's heads (Finetune-InSub: one probe per head),
    BatchEnsemble's members; None where M does not apply."""
    spec = METHODS[method]
    if spec.objective_overrides and args.objective != "simclr":
        raise ValueError(
            f"method={method!r} changes SimCLR's mean (the cosine control); ImageRecipeArguments.objective must be "
            f"'simclr' for it, got {args.objective!r}."
        )
    preset = IMAGE_DATASET_PRESETS[args.dataset]
    encoder = args.encoder_config(preset.image_size, preset.num_channels)
    if spec.dropout:
        encoder["hidden_dropout_prob"] = args.dropout
        if encoder["model_type"] == "vit":
            encoder["attention_probs_dropout_prob"] = args.dropout
    # alpha only where the hinge is on, so a baseline run is the same (and cached once) whatever alpha is chosen
    loss = {"diversity_alpha": args.diversity_alpha, "diversity_weight": args.diversity_weight} if spec.uses_heads \
        else {"diversity_weight": 0.0}
    return InSubConfig.for_images(
        **(spec.loss or loss), encoder_config=encoder, num_heads=m if spec.uses_heads else 1,
        head_hidden_sizes=[args.head_hidden_size], objective=args.objective,
        objective_config={**args.objective_config(), **spec.objective_overrides},
        batch_ensemble_size=m if spec.batch_ensemble else 1,
    )


def method_members(args: ProtocolArguments, method: str, m: int | None, seed: int) -> list[tuple[InSubConfig, int]]:
    """`(config, seed)` of every model `method` pretrains for one table cell: `m` seeds of the baseline for a deep
    ensemble (its M members; member 0 is the baseline of this seed, the others use further seeds), else one model."""
    if METHODS[method].deep_ensemble:
        return [(method_config(args, "baseline", None), seed + 1000 * i) for i in range(m)]
    return [(method_config(args, method, m), seed)]

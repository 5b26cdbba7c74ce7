"""One recipe per modality: the InSub settings that `InSubConfig.for_images / for_text / for_dna`, the jobs and the
examples of that modality start from. Nothing else states a default for them.

- images: alpha, lambda and M as `insub-hf ablation` chose them on validation data (docs/evidence.md: 2026-11-23,
  full Fashion-MNIST, seed 0); heads Linear(d, 512) -> BN -> ReLU -> Linear(512, 128), L2-normalised.
- text: the paper's NLP setting (M 3, alpha 0.1, lambda 0.01) with SCD's unnormalised 3-layer projector at width
  512 (paper: 4096); not chosen on validation data here.
- dna: M 5, alpha 0.08, lambda 1.5 (the paper's CIFAR-10 hinge), heads one Linear to 64 (paper: 256); not chosen on
  validation data here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Recipe:
    """The `InSubConfig` fields one modality's InSub models start from (`InSubConfig.for_*` takes overrides)."""

    objective: str
    num_heads: int
    diversity_alpha: float
    diversity_weight: float
    head_hidden_sizes: tuple[int, ...]
    head_output_size: int
    normalize_heads: bool = True
    head_norm: str = "batchnorm"

    def config_fields(self) -> dict:
        """The recipe as `InSubConfig` keyword arguments."""
        return {**asdict(self), "head_hidden_sizes": list(self.head_hidden_sizes)}


IMAGE = Recipe("simclr", num_heads=5, diversity_alpha=0.08, diversity_weight=0.3, head_hidden_sizes=(512,),
               head_output_size=128)
TEXT = Recipe("scd", num_heads=3, diversity_alpha=0.1, diversity_weight=0.01, head_hidden_sizes=(512, 512),
              head_output_size=512, normalize_heads=False)
DNA = Recipe("genomenet", num_heads=5, diversity_alpha=0.08, diversity_weight=1.5, head_hidden_sizes=(),
             head_output_size=64, normalize_heads=False, head_norm="none")
RECIPES: dict[str, Recipe] = {"image": IMAGE, "text": TEXT, "dna": DNA}

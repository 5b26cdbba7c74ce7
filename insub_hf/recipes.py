"""One recipe per modality: the InSub settings that `InSubConfig.for_images / for_text / for_dna`, the jobs and the
examples of that modality start from, and how that modality pretrains (the `InSubTrainingArguments` defaults of its
jobs: epochs, batch, learning rate; `PRETRAINING` for what every modality shares). Nothing else states a default for
them.

- images: alpha, lambda and M as `insub-hf ablation` chose them on validation data (docs/evidence.md: 2026-11-23,
  full Fashion-MNIST, seed 0); heads Linear(d, 512) -> BN -> ReLU -> Linear(512, 128), L2-normalised.
- text: the paper's NLP setting (M 3, alpha 0.1, lambda 0.01) with SCD's unnormalised 3-layer projector at width
  512 (paper: 4096), on a frozen encoder, the heads trained at 1e-3: `insub-hf text-candidates` chose the frozen
  encoder on validation data (docs/text_candidates.md: tuning MiniLM by SCD cost 5-7 points of transfer and made its
  cosines another model's); alpha, lambda and M were not tuned here.
- dna: M 5, alpha 0.08, lambda 1.5 (the paper's CIFAR-10 hinge), heads one Linear to 64 (paper: 256); not chosen on
  validation data here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

# The Trainer settings every pretraining job starts from (`InSubTrainingArguments` fields; a flag overrides them):
# seed 0, AdamW with weight decay 1e-4, 5% linear warm-up then cosine decay, a checkpoint per epoch (the last kept), whole
# batches only (a contrastive batch of 3 has too few negatives).
PRETRAINING = dict(
    seed=0, weight_decay=1e-4, warmup_steps=0.05, lr_scheduler_type="cosine", save_strategy="epoch", save_total_limit=1,
    dataloader_drop_last=True,
)


@dataclass(frozen=True)
class Recipe:
    """The `InSubConfig` fields one modality's InSub models start from (`InSubConfig.for_*` takes overrides), and
    `training`: the `InSubTrainingArguments` fields its pretraining jobs start from (beside `PRETRAINING`)."""

    objective: str
    num_heads: int
    diversity_alpha: float
    diversity_weight: float
    head_hidden_sizes: tuple[int, ...]
    head_output_size: int
    normalize_heads: bool = True
    head_norm: str = "batchnorm"
    freeze_encoder: bool = False
    training: dict = field(default_factory=dict, compare=False)

    def config_fields(self) -> dict:
        """The recipe as `InSubConfig` keyword arguments."""
        fields = {**asdict(self), "head_hidden_sizes": list(self.head_hidden_sizes)}
        fields.pop("training")
        return fields

    def training_arguments(self, **overrides) -> dict:
        """`InSubTrainingArguments` keyword arguments of this modality's pretraining: `PRETRAINING`, `training`,
        then `overrides`."""
        return {**PRETRAINING, **self.training, **overrides}


# images: 3 epochs of batch 240 at 3e-3 (the CPU protocol: every baseline probe over 85% on the full Fashion-MNIST)
IMAGE = Recipe("simclr", num_heads=5, diversity_alpha=0.08, diversity_weight=0.3, head_hidden_sizes=(512,),
               head_output_size=128,
               training=dict(num_train_epochs=3, per_device_train_batch_size=240, learning_rate=3e-3, logging_steps=5))
# text: 1 epoch of batch 64 (paper: 192); the heads at 1e-3 over the frozen base model (the paper tunes it all at 3e-5)
TEXT = Recipe("scd", num_heads=3, diversity_alpha=0.1, diversity_weight=0.01, head_hidden_sizes=(512, 512),
              head_output_size=512, normalize_heads=False, freeze_encoder=True,
              training=dict(num_train_epochs=1, per_device_train_batch_size=64, learning_rate=1e-3,
                            logging_strategy="epoch"))
# dna: 4 epochs of batch 64 at 1e-3 (paper: Adam 1e-4)
DNA = Recipe("genomenet", num_heads=5, diversity_alpha=0.08, diversity_weight=1.5, head_hidden_sizes=(),
             head_output_size=64, normalize_heads=False, head_norm="none",
             training=dict(num_train_epochs=4, per_device_train_batch_size=64, learning_rate=1e-3,
                           logging_strategy="epoch"))
# the encoder the DNA recipe builds on unless one is given (`GenomicEncoderConfig`, by its model type)
DNA_ENCODER = {"model_type": "insub_genomic"}
RECIPES: dict[str, Recipe] = {"image": IMAGE, "text": TEXT, "dna": DNA}

"""One recipe per modality: InSubConfig.for_*, the jobs' defaults, the configs they build and the examples all give
the recipe's settings."""

import importlib.util
import sys
from pathlib import Path

import pytest

from insub_hf import InSubConfig
from insub_hf.encoders import GenomicEncoderConfig
from insub_hf.jobs.compare import ComparisonArguments
from insub_hf.jobs.demo import DemoArguments, demo_config
from insub_hf.jobs.arguments import GenomicsArguments, genomics_config
from insub_hf.jobs.mechanism import MechanismArguments
from insub_hf.jobs.arguments import TextArguments, text_config
from insub_hf.objectives import OBJECTIVES
from insub_hf.jobs.methods import method_config
from insub_hf.recipes import DNA, IMAGE, RECIPES, TEXT

from .objectives.test_scd import tiny_bert_config

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def recipe_of(config: InSubConfig) -> dict:
    fields = ("objective", "num_heads", "diversity_alpha", "diversity_weight", "head_hidden_sizes", "head_output_size",
              "normalize_heads", "head_norm", "freeze_encoder")
    return {name: getattr(config, name) for name in fields}


def example_arguments(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module.ModelArguments()


@pytest.mark.parametrize("modality", sorted(RECIPES))
def test_each_recipe_trains_an_objective_of_its_modality(modality):
    assert OBJECTIVES[RECIPES[modality].objective].modality == modality


def test_the_config_classmethods_give_the_recipes_and_take_overrides():
    assert recipe_of(InSubConfig.for_images()) == IMAGE.config_fields()
    text_encoder = tiny_bert_config().encoder_config
    assert recipe_of(InSubConfig.for_text(text_encoder)) == TEXT.config_fields()
    assert InSubConfig.for_text(text_encoder).pooling == "mean"
    assert recipe_of(InSubConfig.for_dna()) == DNA.config_fields()
    assert type(InSubConfig.for_dna().encoder_config) is GenomicEncoderConfig  # recipes.DNA_ENCODER names it
    assert InSubConfig.for_images(num_heads=3, diversity_weight=0.0).num_heads == 3


def test_the_image_jobs_and_examples_default_to_the_image_recipe():
    demo, compare = DemoArguments(), ComparisonArguments()
    assert (demo.num_heads, MechanismArguments().num_heads, compare.num_heads) == (
        IMAGE.num_heads, IMAGE.num_heads, [IMAGE.num_heads])
    for args in (demo, compare):
        assert (args.diversity_alpha, args.diversity_weight, args.head_hidden_size) == (
            IMAGE.diversity_alpha, IMAGE.diversity_weight, IMAGE.head_hidden_sizes[0])
    assert recipe_of(demo_config(demo, demo.num_heads, demo.diversity_weight)) == IMAGE.config_fields()
    assert recipe_of(method_config(compare, "insub", compare.num_heads[0])) == IMAGE.config_fields()
    for name in ("pretrain_simclr", "pretrain_dino"):
        args = example_arguments(name)
        assert (args.num_heads, args.diversity_alpha, args.diversity_weight) == (
            IMAGE.num_heads, IMAGE.diversity_alpha, IMAGE.diversity_weight), name


def test_the_text_and_dna_jobs_default_to_their_recipes():
    text = TextArguments()
    config = text_config(text, tiny_bert_config().encoder_config, text.num_heads, text.diversity_weight)
    assert recipe_of(config) == TEXT.config_fields()
    dna = GenomicsArguments()
    assert recipe_of(genomics_config(dna, dna.num_heads, dna.diversity_weight)) == DNA.config_fields()


def test_each_jobs_training_starts_from_its_modalitys_recipe():
    from insub_hf.jobs import ablation, compare, demo, genomics, mechanism, text
    from insub_hf.recipes import PRETRAINING

    for job, recipe in ((demo, IMAGE), (compare, IMAGE), (ablation, IMAGE), (mechanism, IMAGE), (text, TEXT),
                        (genomics, DNA)):
        defaults = job.TRAINING_DEFAULTS
        assert {k: defaults[k] for k in PRETRAINING} == PRETRAINING, job.__name__
        for name in ("per_device_train_batch_size", "learning_rate"):  # budgets differ (the demo: 8 epochs)
            assert defaults[name] == recipe.training[name], (job.__name__, name)
    assert compare.TRAINING_DEFAULTS == ablation.TRAINING_DEFAULTS | {"output_dir": "runs/compare"}  # one run cache

import pytest
from transformers import AutoConfig, BertConfig, ResNetConfig, ViTConfig

from insub_hf import GenomicEncoderConfig, InSubConfig
from insub_hf.objectives import SimCLRConfig


def test_defaults_are_the_image_recipe_on_the_authors_objective():
    config = InSubConfig()
    assert isinstance(config.encoder_config, ViTConfig)
    assert (config.encoder_config.image_size, config.encoder_config.patch_size) == (32, 4)
    assert config.head_hidden_sizes == [512] and config.head_output_size == 128  # recipes.IMAGE (the authors: 2048)
    # the hinge summed over batch, views and dims / 2B (their code) at the recipe's lambda 0.3 (their lambda1: 1)
    assert (config.diversity_eps, config.diversity_alpha, config.diversity_weight) == (1e-4, 0.08, 0.3)
    assert config.objective_options == SimCLRConfig(temperature=0.5, base_temperature=0.07, normalize_mean=False)
    assert config.head_norm == "batchnorm" and config.objective == "simclr"


@pytest.mark.parametrize(
    "encoder",
    [ResNetConfig(hidden_sizes=[8, 16], depths=[1, 1], embedding_size=8), BertConfig(hidden_size=32, num_attention_heads=4),
     GenomicEncoderConfig(conv_filters=8)],
)
def test_nested_encoder_config_round_trips_through_json(tmp_path, encoder):
    config = InSubConfig(encoder_config=encoder, num_heads=7, head_hidden_sizes=[], diversity_alpha=0.15)
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(loaded, InSubConfig)
    assert type(loaded.encoder_config) is type(encoder)
    assert loaded.encoder_config.to_dict() == encoder.to_dict()
    assert (loaded.num_heads, loaded.head_hidden_sizes, loaded.diversity_alpha) == (7, [], 0.15)


def test_timm_encoder_config():
    config = InSubConfig(timm_model_name="resnet18", timm_kwargs={"in_chans": 1})
    assert config.encoder_config is None and config.timm_kwargs == {"in_chans": 1}
    assert InSubConfig.from_dict(config.to_dict()).timm_model_name == "resnet18"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_heads=0), "InSubConfig.num_heads must be an integer >= 1, got 0"),
        (dict(num_heads=2.5), "InSubConfig.num_heads must be an integer >= 1, got 2.5"),
        (dict(head_norm="layernorm"), "InSubConfig.head_norm must be one of ['batchnorm', 'none'], got 'layernorm'"),
        (dict(objective="mocov3"), "InSubConfig.objective must be one of ['simclr', 'dino', 'scd', 'genomenet', 'byol', 'vicreg', 'barlow_twins'], got 'mocov3'"),
        (dict(pooling="max"), "InSubConfig.pooling must be one of ['cls', 'mean'], got 'max'"),
        (dict(diversity_alpha=-0.1), "InSubConfig.diversity_alpha must be a number >= 0.0 and <= 10.0, got -0.1"),
        (dict(diversity_weight=float("nan")), "InSubConfig.diversity_weight must be a number >= 0.0 and <= 10000.0, got nan"),
        (dict(diversity_eps=0.0), "InSubConfig.diversity_eps must be a number > 0.0, got 0.0"),
        (dict(objective_config={"temperature": 0}), "SimCLRConfig.temperature must be a number > 0.0, got 0"),
        (dict(objective_config={"tau": 0.1}), "InSubConfig.objective_config: ['tau'] are not settings of objective='simclr' (SimCLRConfig); allowed: ['temperature', 'base_temperature', 'normalize_mean']"),
        (dict(temperature=0.2), "InSubConfig got temperature=0.2, a setting of objective='simclr': set it in objective_config (objective='simclr', objective_config={'temperature': 0.2})"),
        (dict(objective="dino", objective_config=SimCLRConfig()), "InSubConfig.objective_config is a SimCLRConfig; objective='dino' takes a DINOConfig"),
        (dict(objective_config=[0.5]), "InSubConfig.objective_config must be a dict of SimCLRConfig fields or a SimCLRConfig, got [0.5]"),
        (dict(head_hidden_sizes=[64, 0]), "InSubConfig.head_hidden_sizes[1] must be an integer >= 1, got 0"),
        (dict(head_output_size=True), "InSubConfig.head_output_size must be an integer >= 1, got True"),
        (dict(encoder_config={"hidden_size": 8}), "encoder_config: a dict needs a `model_type`"),
        (dict(encoder_config=BertConfig(), timm_model_name="resnet18"), "set only one of `encoder_config`"),
    ],
)
def test_bad_values_name_the_field_and_what_is_allowed(kwargs, message):
    with pytest.raises(ValueError) as err:
        InSubConfig(**kwargs)
    assert message in str(err.value)


def test_genomic_config_validates():
    with pytest.raises(ValueError, match=r"GenomicEncoderConfig.stride must be an integer >= 1, got 0"):
        GenomicEncoderConfig(stride=0)


def test_a_saved_config_states_its_heads_and_hinge_so_a_new_default_changes_no_saved_model(tmp_path):
    import json

    InSubConfig().save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert {k: saved[k] for k in ("num_heads", "head_hidden_sizes", "head_output_size", "diversity_alpha",
                                  "diversity_weight")} == {"num_heads": 5, "head_hidden_sizes": [512],
                                                           "head_output_size": 128, "diversity_alpha": 0.08,
                                                           "diversity_weight": 0.3}


def test_names_moved_to_their_own_modules_stay_importable_where_code_imported_them():
    from insub_hf.processing import image_range
    from insub_hf.model.configuration_insub import named_encoder
    from insub_hf.encoders import presets
    from insub_hf.processing.image_processing_insub import check_processor_fields, normalize_images, to_channels
    from insub_hf.processing.image_processing_pil_insub import to_channels as pil_to_channels

    assert named_encoder is presets.named_encoder
    assert (check_processor_fields, normalize_images) == (image_range.check_processor_fields, image_range.normalize_images)
    assert to_channels is pil_to_channels

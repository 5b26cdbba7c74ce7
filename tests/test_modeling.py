import warnings

import pytest
import torch
from transformers import AutoModel, AutoModelForPreTraining, BertConfig

from insub_hf import (
    GenomicEncoderConfig, InSubConfig, InSubForPreTraining, InSubModel, diversity_hinge, head_spread, nt_xent_loss,
)

from .conftest import tiny_config


def views(b=4):
    return torch.randn(b, 3, 32, 32), torch.randn(b, 3, 32, 32)


def test_model_outputs_have_the_documented_shapes():
    model = InSubModel(tiny_config(num_heads=3))
    out = model(pixel_values=torch.randn(4, 3, 32, 32))
    assert out.representation.shape == (4, 32)
    assert out.head_embeddings.shape == (4, 3, 16)
    torch.testing.assert_close(out.head_embeddings.norm(dim=-1), torch.ones(4, 3))  # normalize_heads
    torch.testing.assert_close(out.mean_embedding, out.head_embeddings.mean(1))
    torch.testing.assert_close(out.sigma, head_spread(out.head_embeddings, 1e-4))


def test_pretraining_loss_is_ssl_plus_lambda_diversity():
    model = InSubForPreTraining(tiny_config(num_heads=3, diversity_weight=1.7, diversity_alpha=0.3))
    out = model(*views())
    z1, z2 = out.head_embeddings
    # the default: dot product of the raw mean, scaled by tau / 0.07; the hinge averaged over both views
    ssl = 0.5 / 0.07 * nt_xent_loss(z1.mean(1), z2.mean(1), temperature=0.5, normalize=False).mean()
    div = (diversity_hinge(z1, 0.3, 1e-4) + diversity_hinge(z2, 0.3, 1e-4)).mean() / 2
    torch.testing.assert_close(out.ssl_loss, ssl)
    torch.testing.assert_close(out.diversity_loss, div)
    torch.testing.assert_close(out.loss, ssl + 1.7 * div)
    assert div > 0
    sigma = head_spread(torch.cat([z1, z2]), 1e-4).mean()
    torch.testing.assert_close(out.mean_sigma, sigma)


def test_single_head_model_trains_without_nan():
    model = InSubForPreTraining(tiny_config(num_heads=1, diversity_weight=0.0))
    out = model(*views())
    assert out.diversity_loss.item() == 0.0 and out.mean_sigma.item() == 0.0
    out.loss.backward()
    assert torch.isfinite(out.loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_a_training_step_changes_encoder_and_every_head():
    model = InSubForPreTraining(tiny_config(num_heads=3))
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    torch.optim.SGD(model.parameters(), lr=0.1).zero_grad()
    model(*views()).loss.backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    changed = {k for k, v in model.named_parameters() if not torch.equal(v, before[k])}
    assert "insub.heads.weights.0" in changed and "insub.heads.weights.1" in changed
    assert any(k.startswith("insub.encoder.") for k in changed)
    w = model.insub.heads.weights[0]
    assert all(not torch.equal(w[:, m], before["insub.heads.weights.0"][:, m]) for m in range(3))


def test_save_and_load_give_bit_identical_outputs(tmp_path):
    model = InSubForPreTraining(tiny_config(num_heads=3))
    model(*views(8)).loss.backward()  # populate BN running stats
    model.eval()
    model.save_pretrained(tmp_path)
    # an image model's folder also names its own pipelines (`remote_code.write_pipelines`)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors", "pipeline_insub.py"]
    x1, x2 = views()
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        expected = model(x1, x2)
        pre = AutoModelForPreTraining.from_pretrained(tmp_path).eval()
        assert isinstance(pre, InSubForPreTraining)
        # the folder's own entries (custom_pipelines) are known to the config: no "not one of its fields" warning
        assert not [w for w in caught if "not one of its fields" in str(w.message)]
        got = pre(x1, x2)
        assert torch.equal(got.loss, expected.loss) and torch.equal(got.head_embeddings, expected.head_embeddings)
        base = AutoModel.from_pretrained(tmp_path).eval()
        assert isinstance(base, InSubModel)
        assert torch.equal(base(pixel_values=x1).head_embeddings, model.insub(pixel_values=x1).head_embeddings)
        again = InSubForPreTraining.from_pretrained(tmp_path).eval()
        assert torch.equal(again(x1, x2).loss, expected.loss)


def test_bad_inputs_get_clear_errors():
    model = InSubForPreTraining(tiny_config())
    x1, x2 = views()
    with pytest.raises(ValueError, match="pixel_values has 1 channels but the encoder expects num_channels=3"):
        model(x1[:, :1], x2[:, :1])
    bad = x1.clone()
    bad[0, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="pixel_values contains NaN or inf"):
        model(bad, x2)
    with pytest.raises(ValueError, match="`pixel_values_2`, the second augmented view, is required"):
        model(pixel_values=x1)
    with pytest.raises(ValueError, match="encoder reads `pixel_values`, got inputs \\['input_ids'\\]"):
        model(input_ids=torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="`pixel_values` holds an empty batch"):
        model(x1[:0], x2[:0])


def test_text_and_dna_models_pretrain():
    bert = BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    text = InSubForPreTraining(tiny_config(encoder_config=bert, pooling="mean")).train()
    ids = torch.randint(1, 30, (4, 6))
    out = text(input_ids=ids, attention_mask=torch.ones_like(ids))
    assert torch.isfinite(out.loss)
    assert not torch.equal(out.representation[0], out.representation[1])  # two dropout passes differ
    dna = InSubForPreTraining(tiny_config(encoder_config=GenomicEncoderConfig(conv_filters=8, kernel_size=8, stride=4),
                                          objective="simclr"))  # two DNA views (DNAViews); by default Self-GenomeNet
    x = torch.nn.functional.one_hot(torch.randint(0, 4, (4, 40)), 4).float()
    assert torch.isfinite(dna(dna_one_hot=x, dna_one_hot_2=x.flip(1, 2)).loss)


def test_saving_prints_no_shard_progress_bar_and_keeps_the_user_setting(tmp_path, capfd):
    from transformers.utils import logging as hf_logging

    model = InSubModel(tiny_config())
    hf_logging.enable_progress_bar()
    model.save_pretrained(tmp_path / "a")
    assert "Writing model shards" not in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled()  # other bars (training, downloads) stay as they were
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(tmp_path / "b")
        assert not hf_logging.is_progress_bar_enabled()
    finally:
        hf_logging.enable_progress_bar()


def test_member_representations_are_the_ensemble_members_the_representation_averages():
    from insub_hf.encoders.presets import named_encoder

    x = torch.randn(4, 1, 16, 16)
    encoder = dict(named_encoder("resnet10_cifar", 16, 1, 0.0625), hidden_dropout_prob=0.5)
    ensemble = InSubModel(InSubConfig(encoder_config=encoder, num_heads=2, head_hidden_sizes=[8], head_output_size=4,
                                      batch_ensemble_size=3)).eval()
    with torch.no_grad():
        members = ensemble.member_representations(pixel_values=x)  # (B, M, d)
        assert members.shape == (4, 3, ensemble.encoder.output_dim)
        assert not torch.allclose(members[:, 0], members[:, 1])  # the members differ
        torch.testing.assert_close(members.mean(dim=1), ensemble.get_representation(pixel_values=x))
    model = InSubModel(InSubConfig(encoder_config=encoder, num_heads=2, head_hidden_sizes=[8], head_output_size=4)).eval()
    with torch.no_grad():
        passes = model.member_representations(4, pixel_values=x)  # (B, T, d): dropout sampled per pass
        assert passes.shape[1] == 4 and not torch.allclose(passes[:, 0], passes[:, 1])
        assert not any(m.training for m in model.modules())  # dropout off again afterwards
        single = model.member_representations(pixel_values=x)
    torch.testing.assert_close(single[:, 0], model.get_representation(pixel_values=x))


@pytest.mark.parametrize("direction, sign", [(None, 1.0), (1, 1.0), (-1, -1.0)])
def test_head_spread_is_read_in_the_models_stored_direction_and_never_served_as_uncertainty(direction, sign):
    model = InSubModel(tiny_config(num_heads=3, uncertainty={"direction": direction})).eval()
    with torch.no_grad():
        out = model(pixel_values=torch.randn(4, 3, 32, 32))
    spread = sign * head_spread(out.head_embeddings, 1e-4).mean(dim=-1)
    torch.testing.assert_close(out.head_spread, spread)
    assert out.head_spread.shape == (4,)
    # oriented or not, the spread is a single reading: `uncertainty` is the calibrated rank alone, None unfitted
    assert out.uncertainty is None and out.knn_distance is None


def test_an_uncertainty_direction_other_than_plus_or_minus_one_is_refused():
    with pytest.raises(ValueError, match=r"InSubConfig.uncertainty\['direction'\] must be one of \[1, -1, None\], got 0"):
        tiny_config(uncertainty={"direction": 0})


# --- transformers conventions: pooler_output, last_hidden_state, output_hidden_states, gradient checkpointing,
# hidden_size, input_modalities ----------------------------------------------------------------------------------
def _text_model():
    bert = BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return InSubModel(tiny_config(encoder_config=bert, pooling="mean")).eval()


def test_outputs_carry_pooler_output_last_hidden_state_and_the_encoders_hidden_states():
    vit = InSubModel(tiny_config()).eval()
    pixels = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        out = vit(pixel_values=pixels, output_hidden_states=True)
        backbone = vit.encoder.model(pixel_values=pixels, output_hidden_states=True)  # the ViT itself
    torch.testing.assert_close(out.pooler_output, out.representation, rtol=0, atol=0)
    torch.testing.assert_close(out.last_hidden_state, backbone.last_hidden_state, rtol=0, atol=0)
    torch.testing.assert_close(out.representation, backbone.last_hidden_state[:, 0], rtol=0, atol=0)  # CLS
    assert len(out.hidden_states) == len(backbone.hidden_states) == 3  # embeddings + 2 layers
    assert vit(pixel_values=pixels).hidden_states is None  # the config's default: off
    text = _text_model()
    ids = torch.randint(1, 30, (3, 5))
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0]])
    with torch.no_grad():
        out = text(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        states = text.encoder.model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    assert out.last_hidden_state.shape == (3, 5, 16) and len(out.hidden_states) == len(states) == 3
    by_hand = (out.last_hidden_state * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)  # masked mean pooling
    torch.testing.assert_close(out.pooler_output, by_hand)


def test_an_encoder_without_hidden_states_refuses_them_by_name():
    from insub_hf.encoders import GenomicEncoderConfig

    dna = InSubModel(tiny_config(encoder_config=GenomicEncoderConfig(conv_filters=8, kernel_size=8, stride=4)))
    x = torch.nn.functional.one_hot(torch.randint(0, 4, (2, 40)), 4).float()
    assert dna(dna_one_hot=x).last_hidden_state.shape == (2, 9, 64)  # its windows
    with pytest.raises(ValueError, match=r"output_hidden_states: this model's encoder \(GenomicEncoder\) gives no "
                                         r"per-layer hidden states"):
        dna(dna_one_hot=x, output_hidden_states=True)


@pytest.mark.parametrize("modality", ["image", "text"])
def test_gradient_checkpointing_gives_the_same_gradients_over_transformers_encoders(modality):
    torch.manual_seed(0)
    model = InSubModel(tiny_config()) if modality == "image" else _text_model()
    model.train()
    model.encoder.model.config.hidden_dropout_prob = 0.0  # deterministic passes: the gradients must match exactly
    inputs = ({"pixel_values": torch.rand(4, 3, 32, 32)} if modality == "image"
              else {"input_ids": torch.randint(1, 30, (4, 6))})

    def gradients():
        model.zero_grad()
        model(**inputs).mean_embedding.square().sum().backward()
        return [p.grad.clone() for p in model.encoder.parameters() if p.grad is not None]

    plain = gradients()
    model.activation_checkpointing_enable()  # transformers' new name of gradient_checkpointing_enable
    assert model.is_activation_checkpointing
    checkpointed = gradients()
    assert len(plain) == len(checkpointed) > 0
    for a, b in zip(plain, checkpointed):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_hidden_size_and_input_modalities_follow_the_encoder():
    from transformers import ResNetConfig

    from insub_hf.encoders.presets import named_encoder
    from insub_hf.encoders import GenomicEncoderConfig

    for config in (tiny_config(), tiny_config(encoder_config=named_encoder("resnet10_cifar", 28, 1, 0.25)),
                   tiny_config(encoder_config=ResNetConfig(hidden_sizes=[8, 24], depths=[1, 1], embedding_size=8)),
                   tiny_config(encoder_config=GenomicEncoderConfig(conv_filters=8, lstm_hidden_size=20))):
        assert config.hidden_size == InSubModel(config).encoder.output_dim
    assert _text_model().config.hidden_size == 16
    assert [InSubModel(c).input_modalities for c in (tiny_config(), _text_model().config)] == ["image", "text"]


def test_the_feature_extraction_pipeline_pools_and_names_the_models_modality():
    from PIL import Image
    from transformers import ImageFeatureExtractionPipeline, pipeline

    from insub_hf import InSubImageFeatureExtractionPipeline, InSubImageProcessor

    model = InSubModel(tiny_config()).eval()
    processor = InSubImageProcessor.for_images(32, 3, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
    image = Image.fromarray(torch.randint(0, 256, (32, 32, 3), dtype=torch.uint8).numpy())
    # transformers' own class, named: an earlier `register_pipelines()` in this process may have replaced the task's
    stock = pipeline("image-feature-extraction", model=model, image_processor=processor,
                     pipeline_class=ImageFeatureExtractionPipeline)
    with pytest.raises(ValueError, match=r"InSubImageProcessor under transformers' own image pipeline, which makes "
                                         r"every image 8-bit RGB first .*: pass pipeline_class="):
        stock(image)  # it would clip a 16-bit image before the processor sees it
    extractor = pipeline("image-feature-extraction", model=model, image_processor=processor,
                         pipeline_class=InSubImageFeatureExtractionPipeline)
    pooled = torch.tensor(extractor(image, pool=True))
    with torch.no_grad():
        expected = model(**processor(image, return_tensors="pt")).representation
    torch.testing.assert_close(pooled.reshape(expected.shape), expected, rtol=1e-5, atol=1e-6)
    assert model.input_modalities == "image"

import pytest
import torch
from transformers import AutoConfig, AutoModel, BertConfig, ResNetConfig

from insub_hf import GenomicEncoderConfig, GenomicEncoderModel, InSubConfig, build_encoder
from insub_hf.encoders import masked_mean

from ..conftest import TINY_VIT


def test_vit_at_cifar_scale_gives_the_cls_token():
    encoder = build_encoder(InSubConfig(encoder_config=dict(TINY_VIT))).eval()
    x = torch.randn(2, 3, 32, 32)
    assert encoder.output_dim == 32
    expected = encoder.model(pixel_values=x).last_hidden_state[:, 0]
    torch.testing.assert_close(encoder(pixel_values=x), expected)
    assert not hasattr(encoder.model, "pooler") or encoder.model.pooler is None  # no unused pooler weights


def test_resnet_gives_pooled_features():
    config = ResNetConfig(num_channels=1, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])
    encoder = build_encoder(InSubConfig(encoder_config=config)).eval()
    out = encoder(pixel_values=torch.randn(3, 1, 28, 28))
    assert out.shape == (3, 16) and encoder.output_dim == 16


def test_timm_encoder_by_name():
    config = InSubConfig(timm_model_name="vit_tiny_patch16_224", timm_kwargs=dict(img_size=32, patch_size=4))
    encoder = build_encoder(config)
    assert encoder(pixel_values=torch.randn(2, 3, 32, 32)).shape == (2, encoder.output_dim) == (2, 192)
    with pytest.raises(ValueError, match="timm_model_name='not_a_model' is not a timm model"):
        build_encoder(InSubConfig(timm_model_name="not_a_model"))


BERT = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)


def test_text_encoder_pooling_cls_and_masked_mean():
    ids = torch.tensor([[2, 5, 7, 0], [2, 9, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    cls = build_encoder(InSubConfig(encoder_config=BERT, pooling="cls")).eval()
    mean = build_encoder(InSubConfig(encoder_config=BERT, pooling="mean")).eval()
    mean.load_state_dict(cls.state_dict())
    hidden = cls.model(input_ids=ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(cls(input_ids=ids, attention_mask=mask), hidden[:, 0])
    by_hand = torch.stack([hidden[0, :3].mean(0), hidden[1, :2].mean(0)])
    torch.testing.assert_close(mean(input_ids=ids, attention_mask=mask), by_hand)
    torch.testing.assert_close(masked_mean(hidden, mask), by_hand)


def test_text_encoder_rejects_ids_outside_the_vocabulary():
    encoder = build_encoder(InSubConfig(encoder_config=BERT))
    with pytest.raises(ValueError, match="vocab_size is 50: the tokenizer does not match the encoder"):
        encoder(input_ids=torch.tensor([[1, 60]]))


def test_genomic_encoder_shapes_and_auto_registration(tmp_path):
    config = GenomicEncoderConfig(conv_filters=8, kernel_size=10, stride=5, lstm_hidden_size=12)
    model = AutoModel.from_config(config).eval()
    assert isinstance(model, GenomicEncoderModel)
    x = torch.nn.functional.one_hot(torch.randint(0, 4, (2, 60)), 4).float()
    out = model(dna_one_hot=x)
    assert out.last_hidden_state.shape == (2, (60 - 10) // 5 + 1, 12)
    torch.testing.assert_close(out.pooler_output, out.last_hidden_state.mean(1))
    model.save_pretrained(tmp_path)
    assert isinstance(AutoConfig.from_pretrained(tmp_path), GenomicEncoderConfig)
    loaded = AutoModel.from_pretrained(tmp_path).eval()
    assert torch.equal(loaded(dna_one_hot=x).pooler_output, out.pooler_output)
    encoder = build_encoder(InSubConfig(encoder_config=config))
    assert encoder(dna_one_hot=x).shape == (2, 12)
    with pytest.raises(ValueError, match=r"length 6, shorter than the conv kernel \(GenomicEncoderConfig.kernel_size=10\)"):
        model(dna_one_hot=x[:, :6])


def test_encoder_of_an_unsupported_modality_is_refused():
    with pytest.raises(ValueError, match="reads 'input_features'; allowed encoders read one of"):
        build_encoder(InSubConfig(encoder_config=dict(model_type="whisper", d_model=8, encoder_attention_heads=2, decoder_attention_heads=2)))


def test_a_timm_encoder_starts_from_pretrained_weights_and_a_checkpoint_reloads_without_them(tmp_path):
    import timm
    from safetensors.torch import save_file

    from insub_hf import InSubConfig, InSubModel

    backbone = timm.create_model("resnet10t", num_classes=0)
    save_file(backbone.state_dict(), tmp_path / "backbone.safetensors")
    config = InSubConfig(
        timm_model_name="resnet10t", num_heads=2, head_hidden_sizes=[8], head_output_size=4,
        timm_kwargs={"pretrained": True, "pretrained_cfg_overlay": {"file": str(tmp_path / "backbone.safetensors")}},
    )
    model = InSubModel(config)
    for name, value in backbone.state_dict().items():
        torch.testing.assert_close(model.encoder.model.state_dict()[name], value, rtol=0, atol=0)
    with torch.no_grad():
        model.encoder.model.conv1[0].weight.add_(1.0)  # fine-tuned: differs from the backbone file
    model.save_pretrained(tmp_path / "insub")
    (tmp_path / "backbone.safetensors").unlink()  # the checkpoint holds its own weights
    loaded = InSubModel.from_pretrained(tmp_path / "insub")
    torch.testing.assert_close(loaded.encoder.model.conv1[0].weight, model.encoder.model.conv1[0].weight, rtol=0, atol=0)

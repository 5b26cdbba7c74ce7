import pytest
import torch
import torchvision
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModel

from insub_hf import InSubConfig, InSubForPreTraining, named_encoder
from insub_hf.encoders import BatchEnsembleConv2d, CifarResNetConfig, CifarResNetModel, convert_to_batch_ensemble


@pytest.mark.parametrize(
    "depth, channels, width, size, d", [(18, 3, 0.25, 32, 128), (34, 1, 0.125, 28, 64), (50, 3, 0.0625, 32, 128)]
)
def test_output_shapes_follow_the_cifar_stem(depth, channels, width, size, d):
    model = CifarResNetModel(CifarResNetConfig(depth=depth, num_channels=channels, width_multiplier=width)).eval()
    out = model(torch.rand(2, channels, size, size), output_hidden_states=True)
    side = -(-size // 8)  # three stride-2 stages, rounded up
    assert out.last_hidden_state.shape == (2, d, side, side)
    assert out.pooler_output.shape == (2, d, 1, 1) and model.config.hidden_size == d
    # CIFAR stem: 3x3 stride 1 and no max-pool, so the stem and the first stage keep the full resolution
    assert model.stem[0].kernel_size == (3, 3) and model.stem[0].stride == (1, 1)
    assert out.hidden_states[0].shape[-1] == out.hidden_states[1].shape[-1] == size
    torch.testing.assert_close(out.pooler_output.flatten(1), out.last_hidden_state.mean(dim=(2, 3)))


def test_resnet18_width_1_has_the_parameters_of_torchvision_resnet18_with_the_cifar_stem():
    model = CifarResNetModel(CifarResNetConfig(depth=18))
    reference = torchvision.models.resnet18()
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    # torchvision's ImageNet ResNet-18 without its classifier, with the 7x7 stem conv replaced by a 3x3 one
    expected = count(reference) - count(reference.fc) - 7 * 7 * 3 * 64 + 3 * 3 * 3 * 64
    assert count(model) == expected == 11_168_832


def test_resnet10_is_resnet18_with_one_basic_block_per_stage():
    model = CifarResNetModel(CifarResNetConfig(depth=10, num_channels=1, width_multiplier=0.25))
    reference = torchvision.models.ResNet(torchvision.models.resnet.BasicBlock, [1, 1, 1, 1], width_per_group=64)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    # at width 0.25 with 1 channel, by hand: stem 3x3x1x16, then one basic block per stage
    widths = [16, 32, 64, 128]
    stem = 3 * 3 * 1 * 16 + 2 * 16
    blocks, previous = 0, 16
    for i, w in enumerate(widths):
        blocks += 3 * 3 * previous * w + 3 * 3 * w * w + 4 * w  # two convs, two BatchNorms
        if i > 0:
            blocks += previous * w + 2 * w  # 1x1 stride-2 shortcut and its BatchNorm
        previous = w
    assert count(model) == stem + blocks
    assert len(model.stages) == 4 and all(len(stage) == 1 for stage in model.stages)
    # at width 1 with 3 channels: torchvision's ResNet-10 layout without its classifier, with the CIFAR stem conv
    full = count(CifarResNetModel(CifarResNetConfig(depth=10)))
    assert full == count(reference) - count(reference.fc) - 7 * 7 * 3 * 64 + 3 * 3 * 3 * 64


def test_save_load_round_trip_through_auto_classes(tmp_path):
    model = AutoModel.from_config(AutoConfig.for_model("insub_cifar_resnet", depth=18, width_multiplier=0.125,
                                                       num_channels=1))
    assert isinstance(model, CifarResNetModel)
    model.train()(torch.rand(4, 1, 28, 28))  # move the BatchNorm running statistics away from their init
    model.eval().save_pretrained(tmp_path)
    loaded = AutoModel.from_pretrained(tmp_path).eval()
    state = load_file(tmp_path / "model.safetensors")
    assert set(state) == set(model.state_dict())
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    x = torch.rand(3, 1, 28, 28)
    with torch.no_grad():
        assert torch.equal(loaded(x).pooler_output, model(x).pooler_output)


def test_insub_config_selects_the_encoder_by_short_name(tmp_path):
    with pytest.raises(ValueError, match=r"encoder_config must be a dict.*named_encoder\('resnet18_cifar'\)"):
        InSubConfig(encoder_config="resnet18_cifar")
    config = InSubConfig(encoder_config=named_encoder("resnet18_cifar"), num_heads=2, head_hidden_sizes=[8],
                         head_output_size=4)
    assert config.encoder_config.model_type == "insub_cifar_resnet" and config.encoder_config.depth == 18
    grey = InSubConfig(encoder_config=named_encoder("resnet34_cifar", 28, 1, width=0.0625), num_heads=2,
                       head_hidden_sizes=[8], head_output_size=4)
    model = InSubForPreTraining(grey)
    out = model(pixel_values=torch.rand(4, 1, 28, 28), pixel_values_2=torch.rand(4, 1, 28, 28))
    assert out.representation.shape == (2, 4, 32) and torch.isfinite(out.loss)
    model.save_pretrained(tmp_path)
    assert InSubForPreTraining.from_pretrained(tmp_path).config.encoder_config.width_multiplier == 0.0625


def test_bad_encoder_settings_name_the_field():
    with pytest.raises(ValueError, match="encoder must be one of .*resnet18_cifar"):
        named_encoder("resnet20_cifar")
    with pytest.raises(ValueError, match="width=0.5 applies to the resnet\\*_cifar encoders"):
        named_encoder("vit_tiny_32", width=0.5)
    with pytest.raises(ValueError, match="CifarResNetConfig.depth must be one of"):
        CifarResNetConfig(depth=20)
    with pytest.raises(ValueError, match="CifarResNetConfig.num_channels must be one of"):
        CifarResNetConfig(num_channels=2)
    with pytest.raises(ValueError, match="pixel_values has 3 channels; CifarResNetConfig.num_channels=1"):
        CifarResNetModel(CifarResNetConfig(num_channels=1, width_multiplier=0.0625))(torch.rand(1, 3, 8, 8))


def test_dropout_makes_stochastic_passes_for_mc_dropout():
    model = CifarResNetModel(CifarResNetConfig(width_multiplier=0.0625, hidden_dropout_prob=0.3)).train()
    x = torch.rand(2, 3, 16, 16)
    assert not torch.equal(model(x).pooler_output, model(x).pooler_output)
    model.eval()
    assert torch.equal(model(x).pooler_output, model(x).pooler_output)


def test_batch_ensemble_conv_member_equals_a_conv_with_its_rank_one_weight():
    conv = torch.nn.Conv2d(3, 5, 3, stride=2, padding=1, bias=True)
    layer = BatchEnsembleConv2d(conv, ensemble_size=2)
    with torch.no_grad():
        layer.fast_in.normal_()
        layer.fast_out.normal_()
        layer.bias.normal_()
    x = torch.randn(4, 3, 9, 9)
    out = layer(x)
    for row in range(4):
        m = row % 2
        weight = conv.weight * layer.fast_out[m].view(-1, 1, 1, 1) * layer.fast_in[m].view(1, -1, 1, 1)
        expected = torch.nn.functional.conv2d(x[row:row + 1], weight, layer.bias[m], stride=2, padding=1)
        torch.testing.assert_close(out[row:row + 1], expected, rtol=1e-5, atol=1e-5)
    resnet = CifarResNetModel(CifarResNetConfig(width_multiplier=0.0625))
    convs = sum(isinstance(module, torch.nn.Conv2d) for module in resnet.modules())
    assert convert_to_batch_ensemble(resnet, 2) == convs == 20  # stem, 16 in blocks, 3 projection shortcuts

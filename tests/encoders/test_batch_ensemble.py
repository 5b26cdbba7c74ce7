import pytest
import torch

from insub_hf import InSubConfig, InSubForPreTraining
from insub_hf.encoders import BatchEnsembleEncoder, BatchEnsembleLinear, convert_to_batch_ensemble

from ..conftest import tiny_config


def test_linear_layer_equals_a_per_member_computation():
    base = torch.nn.Linear(4, 3)
    layer = BatchEnsembleLinear(base, ensemble_size=2)
    with torch.no_grad():
        layer.fast_in.normal_()
        layer.fast_out.normal_()
        layer.bias.normal_()
    x = torch.randn(6, 5, 4)  # (N, tokens, in): row i uses member i % 2
    out = layer(x)
    for i in range(6):
        m = i % 2
        expected = ((x[i] * layer.fast_in[m]) @ base.weight.T) * layer.fast_out[m] + layer.bias[m]
        assert torch.allclose(out[i], expected, atol=1e-6)
    assert torch.equal(layer.weight, base.weight)  # one shared weight


def test_conversion_counts_layers_and_keeps_shared_weights_single():
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Sequential(torch.nn.Linear(4, 2)))
    assert convert_to_batch_ensemble(net, 3) == 2
    assert isinstance(net[0], BatchEnsembleLinear) and isinstance(net[2][0], BatchEnsembleLinear)
    # per member only rank-1 vectors and a bias are added: 3 * (3 + 4 + 4) + 3 * (4 + 2 + 2)
    assert sum(p.numel() for p in net.parameters()) == (12 + 8) + 3 * 11 + 3 * 8


def test_encoder_members_match_training_rows_and_eval_gives_their_mean():
    model = InSubForPreTraining(tiny_config(num_heads=1, batch_ensemble_size=3))
    encoder = model.insub.encoder
    assert isinstance(encoder, BatchEnsembleEncoder)
    x = torch.randn(2, 3, 32, 32)
    model.eval()
    with torch.no_grad():
        members = encoder.forward_members(pixel_values=x)  # (2, 3, d)
        assert members.shape == (2, 3, 32)
        assert torch.allclose(encoder(pixel_values=x), members.mean(dim=1), atol=1e-6)
        # in training layout row i goes through member i % 3: put sample 1 at row 5 -> member 2
        encoder.train()
        rows = torch.cat([torch.zeros(5, 3, 32, 32), x[1:2]])
        encoder.encoder.eval()  # no dropout in this tiny ViT anyway; keep the comparison exact
        assert torch.allclose(encoder.encoder(pixel_values=rows)[5], members[1, 2], atol=1e-5)
    assert not torch.allclose(members[:, 0], members[:, 1])


def test_training_updates_fast_weights_and_save_load_round_trips(tmp_path):
    model = InSubForPreTraining(tiny_config(num_heads=1, batch_ensemble_size=2))
    before = {n: p.detach().clone() for n, p in model.named_parameters() if "fast_" in n}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x1, x2 = torch.randn(4, 3, 32, 32), torch.randn(4, 3, 32, 32)
    loss = model(pixel_values=x1, pixel_values_2=x2).loss
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss)
    assert all(not torch.equal(p, before[n]) for n, p in model.named_parameters() if "fast_" in n)
    model.save_pretrained(tmp_path)
    loaded = InSubForPreTraining.from_pretrained(tmp_path).eval()
    model.eval()
    with torch.no_grad():
        assert torch.equal(
            loaded.insub.encoder.forward_members(pixel_values=x1), model.insub.encoder.forward_members(pixel_values=x1)
        )


def test_batch_ensemble_errors():
    model = InSubForPreTraining(tiny_config(num_heads=1, batch_ensemble_size=3))
    with pytest.raises(ValueError, match="batch size \\(4\\) must be a multiple of it"):
        model(pixel_values=torch.randn(4, 3, 32, 32), pixel_values_2=torch.randn(4, 3, 32, 32))
    with pytest.raises(ValueError, match="batch_ensemble_size must be an integer >= 1"):
        tiny_config(batch_ensemble_size=0)
    genomic = dict(model_type="insub_genomic", conv_filters=8, kernel_size=12, stride=6, lstm_hidden_size=8)
    with pytest.raises(ValueError, match="needs an encoder with nn.Linear or nn.Conv2d layers"):
        InSubForPreTraining(InSubConfig(encoder_config=genomic, num_heads=1, batch_ensemble_size=2,
                                        objective="genomenet"))

import pytest
import torch
import torch.nn.functional as F

from insub_hf import InSubForPreTraining
from insub_hf.losses import barlow_twins_loss, vicreg_loss

from ..conftest import tiny_config

pytestmark = pytest.mark.numeric


@pytest.mark.parametrize("objective, loss", [("vicreg", vicreg_loss), ("barlow_twins", barlow_twins_loss)])
def test_the_loss_reads_the_unnormalised_mean_and_the_hinge_the_normalised_heads(objective, loss):
    torch.manual_seed(0)
    model = InSubForPreTraining(tiny_config(objective=objective, num_heads=3, head_norm="none")).train()
    x1, x2 = torch.randn(6, 3, 32, 32), torch.randn(6, 3, 32, 32)
    out = model(x1, x2)
    raw = torch.stack([model.insub.head_outputs(model.insub.get_representation(pixel_values=x)) for x in (x1, x2)])
    torch.testing.assert_close(out.ssl_loss, loss(raw[0].mean(1), raw[1].mean(1)))
    torch.testing.assert_close(out.head_embeddings, F.normalize(raw, dim=-1))
    out.loss.backward()
    assert all(p.grad is not None for n, p in model.named_parameters() if n.startswith("insub."))

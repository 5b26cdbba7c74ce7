import numpy as np
import pytest
import torch

from insub_hf.losses import vicreg_loss

from ..conftest import tiny_config

pytestmark = pytest.mark.numeric


def numpy_vicreg(z1, z2, lam=25.0, mu=25.0, nu=1.0, eps=1e-4):
    """The authors' formulas with numpy's own variance and covariance."""
    n, d = z1.shape
    invariance = np.mean((z1 - z2) ** 2)
    variance = sum(np.mean(np.maximum(0.0, 1 - np.sqrt(np.var(z, axis=0, ddof=1) + eps))) for z in (z1, z2)) / 2
    covariance = 0.0
    for z in (z1, z2):
        c = np.cov(z, rowvar=False)
        covariance += (np.sum(c**2) - np.sum(np.diag(c) ** 2)) / d
    return lam * invariance + mu * variance + nu * covariance


def test_loss_matches_numpys_variance_and_covariance():
    g = torch.Generator().manual_seed(0)
    z1, z2 = torch.randn(7, 5, generator=g, dtype=torch.float64), torch.randn(7, 5, generator=g, dtype=torch.float64)
    z2 = 0.3 * z2  # some dimensions below a standard deviation of 1: the hinge is active
    expected = numpy_vicreg(z1.numpy(), z2.numpy())
    torch.testing.assert_close(vicreg_loss(z1, z2).item(), expected, rtol=1e-10, atol=1e-12)
    weighted = numpy_vicreg(z1.numpy(), z2.numpy(), lam=1.0, mu=2.0, nu=0.5)
    torch.testing.assert_close(vicreg_loss(z1, z2, 1.0, 2.0, 0.5).item(), weighted, rtol=1e-10, atol=1e-12)


def test_a_hand_worked_case():
    # z1 = z2: no invariance term; two dims with std 1 and 0, covariance 0 -> variance hinge (0 + (1 - 0.01)) / 2 per
    # view, halved and summed over the views
    z = torch.tensor([[1.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)  # var (unbiased) 2 and 0
    std = np.sqrt(np.array([2.0, 0.0]) + 1e-4)
    hinge = np.mean(np.maximum(0, 1 - std))
    assert vicreg_loss(z, z, 25.0, 25.0, 1.0).item() == pytest.approx(25.0 * hinge)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match=r"vicreg_loss: z1 and z2 must both be \(N, D\)"):
        vicreg_loss(torch.randn(3, 4), torch.randn(3, 5))
    with pytest.raises(ValueError, match="at least 2 samples"):
        vicreg_loss(torch.randn(1, 4), torch.randn(1, 4))
    with pytest.raises(ValueError, match=r"VICRegConfig.variance_weight must be a number >= 0.0, got -1"):
        tiny_config(objective="vicreg", objective_config={"variance_weight": -1})

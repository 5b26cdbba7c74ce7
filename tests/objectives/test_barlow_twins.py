import numpy as np
import pytest
import torch

from insub_hf.losses import barlow_twins_loss


pytestmark = pytest.mark.numeric


def numpy_barlow_twins(z1, z2, lam=0.0051, eps=1e-5):
    """The authors' loss: BatchNorm without affine (biased variance), C = z1n^T z2n / N."""
    standardise = lambda z: (z - z.mean(0)) / np.sqrt(z.var(0) + eps)  # noqa: E731
    c = standardise(z1).T @ standardise(z2) / z1.shape[0]
    on = np.sum((1 - np.diag(c)) ** 2)
    off = np.sum(c**2) - np.sum(np.diag(c) ** 2)
    return on + lam * off


def test_loss_matches_the_authors_formula():
    g = torch.Generator().manual_seed(0)
    z1, z2 = torch.randn(9, 6, generator=g, dtype=torch.float64), torch.randn(9, 6, generator=g, dtype=torch.float64)
    torch.testing.assert_close(barlow_twins_loss(z1, z2).item(), numpy_barlow_twins(z1.numpy(), z2.numpy()),
                               rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(barlow_twins_loss(z1, z2, 0.5).item(), numpy_barlow_twins(z1.numpy(), z2.numpy(), 0.5),
                               rtol=1e-10, atol=1e-12)


def test_identical_decorrelated_views_give_almost_no_loss():
    z = torch.tensor([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]], dtype=torch.float64)  # C = I (up to eps)
    # C_ii = var / (var + eps) with var 1, off-diagonals 0
    assert barlow_twins_loss(z, z).item() == pytest.approx(2 * (1 - 1 / (1 + 1e-5)) ** 2, rel=1e-6)


def test_views_of_other_shapes_are_refused():
    with pytest.raises(ValueError, match=r"barlow_twins_loss: z1 and z2 must both be \(N, D\)"):
        barlow_twins_loss(torch.randn(3, 4), torch.randn(4, 4))

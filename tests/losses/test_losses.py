import math

import pytest
import torch
import torch.nn.functional as F

from insub_hf import DiversityLoss, NTXentLoss, diversity_hinge, head_spread, nt_xent_loss

pytestmark = pytest.mark.numeric


def test_nt_xent_hand_computed_example():
    # Two orthogonal samples, each view equal to the other: every anchor sees its positive at similarity 1 and
    # two negatives at 0, so each loss is -log(e / (e + 2)) = log(1 + 2/e).
    z = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    losses = nt_xent_loss(z, z.clone(), temperature=1.0)
    torch.testing.assert_close(losses, torch.full((4,), math.log(1 + 2 / math.e)))


def _nt_xent_loop(z1, z2, tau):
    z = F.normalize(torch.cat([z1, z2]), dim=1).tolist()
    n = len(z1)
    out = []
    for i in range(2 * n):
        pos = (i + n) % (2 * n)
        sims = {j: sum(a * b for a, b in zip(z[i], z[j])) / tau for j in range(2 * n) if j != i}
        out.append(-sims[pos] + math.log(sum(math.exp(s) for s in sims.values())))
    return torch.tensor(out)


def test_nt_xent_matches_a_plain_loop():
    z1, z2 = torch.randn(5, 3), torch.randn(5, 3)
    torch.testing.assert_close(nt_xent_loss(z1, z2, temperature=0.5), _nt_xent_loop(z1, z2, 0.5))
    torch.testing.assert_close(NTXentLoss(0.5)(z1, z2), _nt_xent_loop(z1, z2, 0.5))


def test_nt_xent_gradient_matches_finite_differences():
    z1 = torch.randn(3, 4, dtype=torch.double, requires_grad=True)
    z2 = torch.randn(3, 4, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: nt_xent_loss(a, b, 0.5).mean(), (z1, z2))


def test_nt_xent_rejects_bad_arguments():
    with pytest.raises(ValueError, match=r"must both be \(N, q\), got \(2, 3\) and \(3, 3\)"):
        nt_xent_loss(torch.randn(2, 3), torch.randn(3, 3))
    with pytest.raises(ValueError, match="nt_xent_loss.temperature must be a number > 0.0, got 0"):
        nt_xent_loss(torch.randn(2, 3), torch.randn(2, 3), temperature=0)


def test_diversity_hand_computed_example():
    # M=2 heads, q=1: values 0.1 and 0.0 -> unbiased var 0.005, sigma = sqrt(0.005 + 1e-4) = sqrt(0.0051).
    z = torch.tensor([[[0.1], [0.0]]])  # (B=1, M=2, q=1)
    sigma = math.sqrt(0.0051)
    torch.testing.assert_close(head_spread(z, eps=1e-4), torch.tensor([[sigma]]))
    torch.testing.assert_close(diversity_hinge(z, alpha=0.08, eps=1e-4), torch.tensor([0.08 - sigma]))
    assert diversity_hinge(z, alpha=0.05, eps=1e-4).item() == 0.0  # sigma above alpha: no penalty


def test_identical_heads_give_the_largest_penalty():
    z = torch.randn(4, 1, 6).expand(4, 5, 6)  # 5 identical heads
    loss = DiversityLoss(alpha=0.08, eps=1e-4)(z, z)  # mean over the views (the authors' 1 / 2B)
    torch.testing.assert_close(loss, torch.full((4,), 6 * (0.08 - 0.01)))  # 6 dims, alpha - sqrt(eps)
    summed = DiversityLoss(alpha=0.08, eps=1e-4, reduction="sum")(z, z)  # the paper's l_div(k)
    torch.testing.assert_close(summed, torch.full((4,), 2 * 6 * (0.08 - 0.01)))
    spread_out = torch.randn(4, 5, 6)
    assert (DiversityLoss(0.08, 1e-4)(spread_out, spread_out) < loss).all()


def test_diversity_gradient_matches_finite_differences():
    z = (0.02 * torch.randn(3, 4, 5, dtype=torch.double)).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: diversity_hinge(t, alpha=0.5, eps=1e-4).sum(), (z,))


def test_diversity_gradient_has_the_papers_closed_form():
    # For sigma < alpha: d l_div / d z_m = -(z_m - z_bar) / ((M - 1) sigma): each head is pushed away from the mean.
    m = 4
    z = (0.01 * torch.randn(2, m, 3, dtype=torch.double)).requires_grad_(True)
    diversity_hinge(z, alpha=1.0, eps=1e-4).sum().backward()
    centred = z.detach() - z.detach().mean(dim=1, keepdim=True)
    sigma = head_spread(z.detach(), eps=1e-4).unsqueeze(1)
    torch.testing.assert_close(z.grad, -centred / ((m - 1) * sigma))
    cosine = F.cosine_similarity(z.grad, centred, dim=1)  # over heads, per (sample, dim)
    torch.testing.assert_close(cosine, torch.full_like(cosine, -1.0))


def test_single_head_has_no_diversity_term_and_no_nan():
    z = torch.randn(3, 1, 4, requires_grad=True)
    assert torch.equal(head_spread(z), torch.zeros(3, 4))
    loss = DiversityLoss()(z, z)
    assert torch.equal(loss, torch.zeros(3))
    (loss.sum() + z.sum()).backward()
    assert torch.isfinite(z.grad).all()

import pytest
import torch

from insub_hf import BatchedHeads


@pytest.mark.parametrize(
    "hidden, norm", [([32], "batchnorm"), ([32, 24], "batchnorm"), ([32, 24], "none"), ([], "none")]
)
def test_batched_heads_equal_a_loop_of_separate_mlps(hidden, norm):
    heads = BatchedHeads(in_dim=20, hidden_sizes=hidden, out_dim=8, num_heads=4, norm=norm).double()
    loop = heads.as_modules().double()
    x = torch.randn(6, 20, dtype=torch.double, requires_grad=True)
    x_loop = x.detach().clone().requires_grad_(True)

    out = heads(x)  # (B, M, q)
    ref = torch.stack([mlp(x_loop) for mlp in loop], dim=1)
    assert out.shape == (6, 4, 8)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=0)

    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    (ref * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_loop.grad, atol=1e-6, rtol=0)
    for m, mlp in enumerate(loop):
        linears = [layer for layer in mlp if isinstance(layer, torch.nn.Linear)]
        for i, linear in enumerate(linears):
            grad = heads.weights[i].grad[:, m] if i == 0 else heads.weights[i].grad[m]
            torch.testing.assert_close(grad.t(), linear.weight.grad, atol=1e-6, rtol=0)
            if linear.bias is not None:
                torch.testing.assert_close(heads.biases[i].grad[m], linear.bias.grad, atol=1e-6, rtol=0)


def test_each_head_keeps_its_own_batchnorm_statistics():
    heads = BatchedHeads(in_dim=5, hidden_sizes=[3], out_dim=2, num_heads=2)
    with torch.no_grad():
        heads.weights[0][:, 1] = 10.0 * heads.weights[0][:, 0]  # head 1's pre-activations are 10x head 0's
    heads.norms[0].momentum = 1.0  # running stats = this batch's stats
    heads(torch.randn(64, 5))
    var = heads.norms[0].running_var.view(2, 3)  # (M, h)
    torch.testing.assert_close(var[1] / var[0], torch.full((3,), 100.0), rtol=1e-3, atol=0)


def test_heads_start_different():
    heads = BatchedHeads(in_dim=5, hidden_sizes=[3], out_dim=2, num_heads=3)
    w = heads.weights[0]
    assert not torch.allclose(w[:, 0], w[:, 1]) and not torch.allclose(w[:, 1], w[:, 2])

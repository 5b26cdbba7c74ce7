"""The default SimCLR InSub loss is the authors' training objective, value and gradients.

The reference is a transcription of the authors' public code (github.com/amirvhd/Uncertainty_aware_SSL at b23ad8f):
`UALoss.forward` (utils/losses.py, the unsupervised SupCon case) and the head part of `conResNet.forward`
(models/resnet_big.py): each view through the encoder separately, each head's output L2-normalised, their raw mean
and their unbiased standard deviation (eps 1e-4 inside the root) per view.
"""

import pytest
import torch
import torch.nn.functional as F

from insub_hf import DiversityLoss, InSubConfig, InSubForPreTraining, nt_xent_loss
from insub_hf.encoders.presets import small_vit_encoder

pytestmark = pytest.mark.numeric


def authors_heads(f1, f2, heads):
    """conResNet.forward after the encoder: `features`, `features_std`, each (B, 2, q)."""
    res1 = [F.normalize(head(f1), dim=1) for head in heads]
    res2 = [F.normalize(head(f2), dim=1) for head in heads]
    feat1, feat2 = torch.mean(torch.stack(res1), dim=0), torch.mean(torch.stack(res2), dim=0)
    std1 = torch.sqrt(torch.var(torch.stack(res1), dim=0) + 0.0001)
    std2 = torch.sqrt(torch.var(torch.stack(res2), dim=0) + 0.0001)
    features = torch.cat([feat1.unsqueeze(1), feat2.unsqueeze(1)], dim=1)
    features_std = torch.cat([std1.unsqueeze(1), std2.unsqueeze(1)], dim=1)
    return features, features_std


def authors_loss(features, features_std, temperature, base_temperature=0.07, lamda1=1.0, lamda2=0.08):
    """UALoss.forward (contrast_mode 'all', no labels); `lamda2` is alpha, the configured batch = the batch."""
    batch_size = features.shape[0]
    mask = torch.eye(batch_size, dtype=torch.float32)
    contrast_count = features.shape[1]
    contrast_feature = torch.cat(torch.unbind(features, dim=1), dim=0)
    anchor_feature, anchor_count = contrast_feature, contrast_count
    anchor_dot_contrast = torch.div(torch.matmul(anchor_feature, contrast_feature.T), temperature)
    logits_max, _ = torch.max(anchor_dot_contrast, dim=1, keepdim=True)
    logits = anchor_dot_contrast - logits_max.detach()
    mask = mask.repeat(anchor_count, contrast_count)
    logits_mask = torch.scatter(
        torch.ones_like(mask), 1, torch.arange(batch_size * anchor_count).view(-1, 1), 0
    )
    mask = mask * logits_mask
    exp_logits = torch.exp(logits) * logits_mask
    log_prob = logits - torch.log(exp_logits.sum(1, keepdim=True))
    mean_log_prob_pos = (mask * log_prob).sum(1) / mask.sum(1)
    loss = -(temperature / base_temperature) * mean_log_prob_pos
    std_loss1 = torch.sum(F.relu(lamda2 - features_std)) / (2 * batch_size)
    loss = loss.view(anchor_count, batch_size).mean()
    return std_loss1 * lamda1 + loss if lamda1 > 0 else loss


def tiny_model(**overrides) -> InSubForPreTraining:
    # a ViT (LayerNorm only) and heads without BatchNorm, as in the authors' code, so that encoding the two views
    # as one batch (the package) or one after the other (the authors) gives the same numbers
    config = InSubConfig(
        encoder_config=small_vit_encoder(8, 1, hidden_size=16, num_layers=1), num_heads=4, head_hidden_sizes=[16],
        head_output_size=8, head_norm="none", **overrides,
    )
    return InSubForPreTraining(config).double()


def test_the_default_config_is_the_image_recipe_on_the_authors_objective():
    from insub_hf.recipes import IMAGE

    config = InSubConfig()
    # the authors' SimCLR loss and hinge form (the loss and gradient tests below check them against their code)
    assert config.objective_config == {"temperature": 0.5, "base_temperature": 0.07, "normalize_mean": False}
    assert config.diversity_reduction == "mean" and config.diversity_eps == 1e-4
    # M, alpha, lambda and the heads: the image recipe, the one place that states them (the authors' lambda 1.0 and
    # 2048-wide heads are a config away: diversity_weight=1.0, head_hidden_sizes=[2048])
    assert (config.num_heads, config.diversity_alpha, config.diversity_weight) == (5, 0.08, 0.3) == (
        IMAGE.num_heads, IMAGE.diversity_alpha, IMAGE.diversity_weight)
    assert config.head_hidden_sizes == [512] == list(IMAGE.head_hidden_sizes) and config.head_output_size == 128
    assert InSubConfig.for_images().to_diff_dict() == {**config.to_diff_dict()}


@pytest.mark.parametrize("temperature,alpha,weight", [(0.5, 0.4, 1.0), (0.2, 0.3, 2.5)])
def test_default_loss_and_gradients_equal_the_authors_code(temperature, alpha, weight):
    torch.manual_seed(0)
    model = tiny_model(objective_config={"temperature": temperature}, diversity_alpha=alpha, diversity_weight=weight)
    assert model.config.objective_options.normalize_mean is False  # the default under test
    x1, x2 = torch.randn(6, 1, 8, 8, dtype=torch.double), torch.randn(6, 1, 8, 8, dtype=torch.double)
    out = model(x1, x2)
    assert out.diversity_loss > 0  # alpha above the spread somewhere: the hinge term is part of the check
    out.loss.backward()
    ours = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    model.zero_grad()
    heads = model.insub.heads.as_modules().double()
    encoder = model.insub.encoder
    features, features_std = authors_heads(encoder(pixel_values=x1), encoder(pixel_values=x2), heads)
    reference = authors_loss(features, features_std, temperature, lamda1=weight, lamda2=alpha)
    reference.backward()

    torch.testing.assert_close(out.loss, reference, rtol=1e-12, atol=1e-12)
    for name, p in model.named_parameters():
        if name.startswith("insub.encoder."):
            torch.testing.assert_close(ours[name], p.grad, rtol=1e-10, atol=1e-12, msg=name)
    # each head's weights: the batched layout's slice against the copy the reference used
    batched = model.insub.heads
    for m, head in enumerate(heads):
        torch.testing.assert_close(ours["insub.heads.weights.0"][:, m], head[0].weight.grad.t())
        torch.testing.assert_close(ours["insub.heads.weights.1"][m], head[2].weight.grad.t())
        torch.testing.assert_close(ours["insub.heads.biases.1"][m], head[2].bias.grad)
    assert batched.num_heads == len(heads) == 4


def test_the_reference_loss_matches_on_random_head_outputs():
    # the loss pieces alone, on random head outputs (B=5, M=3, q=7), with gradients to them
    torch.manual_seed(1)
    raw = torch.randn(2, 5, 3, 7, dtype=torch.double, requires_grad=True)  # (views, B, M, q) before normalising
    config = InSubConfig(objective_config={"temperature": 0.5}, diversity_alpha=0.5, diversity_weight=1.0)  # lamda1
    z = F.normalize(raw, dim=-1)
    options = config.objective_options
    ours = options.loss_scale * nt_xent_loss(z[0].mean(1), z[1].mean(1), 0.5, normalize=options.normalize_mean)
    hinge = DiversityLoss(config.diversity_alpha, config.diversity_eps, config.diversity_reduction)
    ours = ours.mean() + config.diversity_weight * hinge(z[0], z[1]).mean()
    (grad_ours,) = torch.autograd.grad(ours, raw, retain_graph=True)
    features = torch.stack([z[0].mean(1), z[1].mean(1)], dim=1)  # (B, 2, q)
    std = torch.stack([torch.sqrt(z[v].var(1) + 1e-4) for v in range(2)], dim=1)
    reference = authors_loss(features, std, 0.5, lamda2=0.5)
    (grad_reference,) = torch.autograd.grad(reference, raw)
    torch.testing.assert_close(ours, reference)
    torch.testing.assert_close(grad_ours, grad_reference)


def test_the_papers_cosine_variant_is_one_field_away():
    torch.manual_seed(2)
    x1, x2 = torch.randn(6, 1, 8, 8, dtype=torch.double), torch.randn(6, 1, 8, 8, dtype=torch.double)
    raw = tiny_model()
    cosine = tiny_model(objective_config={"normalize_mean": True})
    cosine.load_state_dict(raw.state_dict())
    a, b = raw(x1, x2), cosine(x1, x2)
    torch.testing.assert_close(a.diversity_loss, b.diversity_loss)
    assert not torch.allclose(a.ssl_loss, b.ssl_loss)
    z1, z2 = b.head_embeddings.mean(dim=2)  # (B, q) each
    expected = authors_loss(torch.stack([F.normalize(z1, dim=1), F.normalize(z2, dim=1)], dim=1),
                            torch.zeros(6, 2, 8, dtype=torch.double) + 1.0, 0.5, lamda1=0.0)
    torch.testing.assert_close(b.ssl_loss, expected)


def test_the_old_objective_is_expressible_and_its_hinge_twice_as_strong():
    torch.manual_seed(3)
    x1, x2 = torch.randn(6, 1, 8, 8, dtype=torch.double), torch.randn(6, 1, 8, 8, dtype=torch.double)
    new = tiny_model(diversity_alpha=0.5)
    old = tiny_model(diversity_alpha=0.5, objective_config={"normalize_mean": True, "base_temperature": None},
                     diversity_reduction="sum")
    old.load_state_dict(new.state_dict())
    a, b = new(x1, x2), old(x1, x2)
    torch.testing.assert_close(b.diversity_loss, 2 * a.diversity_loss)
    z1, z2 = b.head_embeddings.mean(dim=2)
    torch.testing.assert_close(b.ssl_loss, nt_xent_loss(z1, z2, 0.5, normalize=True).mean())

"""What a model contributed to transformers must do when a user fine-tunes it with the stock tools, for every encoder
family it applies to (ViT, CIFAR ResNet, BERT-style, DNA): mismatched sizes, label types, attentions, input
embeddings, no unused parameters, gradient checkpointing, batch independence, processor channels, attention
implementations and LoRA through peft."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from transformers.testing_utils import CaptureLogger
from transformers.utils import logging as transformers_logging
import torch
import torch.nn.functional as F
from PIL import Image
from transformers.processing_utils import ImagesKwargs

from insub_hf import (
    InSubConfig, InSubForImageClassification, InSubForPreTraining, InSubForSequenceClassification,
    InSubImageProcessor, InSubModel, named_encoder,
)
from insub_hf.processing.image_processing_pil_insub import InSubImageProcessorKwargs

from .conftest import tiny_config
from .objectives.test_scd import tiny_bert_config

GENOMIC = dict(model_type="insub_genomic", conv_filters=8, kernel_size=12, stride=6, lstm_hidden_size=16)


def family_config(family: str, **overrides) -> InSubConfig:
    """A tiny config of each encoder family."""
    small = dict(num_heads=2, head_hidden_sizes=[8], head_output_size=4)
    if family == "vit":
        return tiny_config(**{**small, **overrides})
    if family == "resnet":
        return InSubConfig(encoder_config=named_encoder("resnet18_cifar", width=0.0625), **{**small, **overrides})
    if family == "bert":
        return tiny_bert_config(**{**small, "head_hidden_sizes": [8], **overrides})
    return InSubConfig(encoder_config=dict(GENOMIC), objective="genomenet", **{**small, **overrides})


def family_inputs(family: str, batch: int = 3, seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    if family in ("vit", "resnet"):
        return {"pixel_values": torch.randn(batch, 3, 32, 32, generator=generator)}
    if family == "bert":
        ids = torch.randint(0, 1000, (batch, 7), generator=generator)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    return {"dna_one_hot": torch.eye(4)[torch.randint(0, 4, (batch, 60), generator=generator)]}


def classifier_class(family: str):
    return InSubForImageClassification if family in ("vit", "resnet") else InSubForSequenceClassification


FAMILIES = ("vit", "resnet", "bert", "dna")


# 1. mismatched sizes
@pytest.mark.parametrize("family", FAMILIES)
def test_a_classifier_for_other_labels_raises_transformers_error_and_loads_with_ignore_mismatched_sizes(family, tmp_path):
    cls = classifier_class(family)
    saved = cls(family_config(family, num_labels=3))
    saved.save_pretrained(tmp_path)
    with pytest.raises(RuntimeError, match=r"classifier.*checkpoint .*3.*config .*5.*ignore_mismatched_sizes=True"):
        cls.from_pretrained(tmp_path, num_labels=5)
    loaded, info = cls.from_pretrained(tmp_path, num_labels=5, ignore_mismatched_sizes=True, output_loading_info=True)
    mismatched = {entry[0] if isinstance(entry, tuple) else entry for entry in info["mismatched_keys"]}
    assert mismatched and all(key.startswith("classifier.") for key in mismatched), info["mismatched_keys"]
    assert loaded.config.num_labels == 5
    for name, tensor in saved.insub.encoder.state_dict().items():  # the encoder loaded as saved
        torch.testing.assert_close(loaded.insub.encoder.state_dict()[name], tensor, rtol=0, atol=0)


# 2. label types
def test_the_image_classifier_reads_multi_label_targets_as_its_heads_mean_sigmoid():
    torch.manual_seed(0)
    model = InSubForImageClassification(family_config("vit", num_labels=4, num_heads=3,
                                                      problem_type="multi_label_classification")).eval()
    labels = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    with torch.no_grad():
        out = model(pixel_values=torch.randn(2, 3, 32, 32), labels=labels)
    h = out.head_logits.double().numpy()  # (B, M, C)
    p = 1 / (1 + np.exp(-h))
    mean = p.mean(1)
    np.testing.assert_allclose(out.logits.double().numpy(), np.log(mean / (1 - mean)), rtol=1e-5, atol=1e-6)

    def binary_entropy(q):
        return -(q * np.log(q) + (1 - q) * np.log(1 - q))

    np.testing.assert_allclose(out.entropy.numpy(), binary_entropy(mean).sum(-1), rtol=1e-5)
    np.testing.assert_allclose(out.mutual_information.numpy(),
                               (binary_entropy(mean) - binary_entropy(p).mean(1)).sum(-1), rtol=1e-4, atol=1e-7)
    per_head = [F.binary_cross_entropy_with_logits(out.head_logits[:, m], labels) for m in range(3)]
    torch.testing.assert_close(out.loss, torch.stack(per_head).mean(), rtol=1e-5, atol=1e-7)
    assert out.variance is None


def test_the_image_classifier_regresses_with_the_heads_variance_as_its_uncertainty():
    torch.manual_seed(0)
    model = InSubForImageClassification(family_config("resnet", num_labels=1, num_heads=4)).eval()
    assert model.config.problem_type is None  # one label: regression, as transformers decides
    targets = torch.tensor([0.5, -1.0, 2.0])
    with torch.no_grad():
        out = model(pixel_values=torch.randn(3, 3, 32, 32), labels=targets)
    h = out.head_logits.double().numpy()  # (B, M, 1)
    np.testing.assert_allclose(out.logits.double().numpy(), h.mean(1), rtol=1e-6)
    np.testing.assert_allclose(out.variance.double().numpy(), h.var(1), rtol=1e-5, atol=1e-9)
    expected = np.mean([((h[:, m, 0] - targets.numpy()) ** 2).mean() for m in range(4)])
    assert out.loss.item() == pytest.approx(expected, rel=1e-5)
    assert out.mutual_information is None and out.entropy is None


def test_the_sequence_classifier_takes_the_three_label_types_from_the_config_or_the_labels():
    torch.manual_seed(0)
    inputs = family_inputs("bert", batch=2)
    multi = InSubForSequenceClassification(family_config("bert", num_labels=3)).eval()
    targets = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    out = multi(**inputs, labels=targets)  # float labels: one target per label, as transformers decides
    torch.testing.assert_close(out.loss, F.binary_cross_entropy_with_logits(out.logits, targets))
    assert multi.config.problem_type == "multi_label_classification"  # recorded, as transformers' classifiers do
    classes = torch.tensor([2, 0])  # integer labels on a fresh config (the same weights): classes
    single = InSubForSequenceClassification(family_config("bert", num_labels=3)).eval()
    single.load_state_dict(multi.state_dict())
    torch.testing.assert_close(single(**inputs, labels=classes).loss, F.cross_entropy(out.logits, classes))
    assert single.config.problem_type == "single_label_classification"
    regression = InSubForSequenceClassification(family_config("bert", num_labels=1)).eval()
    values = torch.tensor([0.3, -0.7])
    out = regression(**inputs, labels=values)
    torch.testing.assert_close(out.loss, F.mse_loss(out.logits[:, 0], values))
    dna = InSubForSequenceClassification(family_config("dna", num_labels=2, problem_type="regression")).eval()
    pairs = torch.tensor([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]])
    out = dna(**family_inputs("dna"), labels=pairs)
    torch.testing.assert_close(out.loss, F.mse_loss(out.logits, pairs))
    with pytest.raises(ValueError, match=r"multi_label_classification' must have shape \(batch, num_labels\) = \(2, 3\)"):
        multi(**inputs, labels=torch.ones(2, 2))


def test_label_settings_no_classifier_can_honour_are_refused_naming_the_allowed():
    with pytest.raises(ValueError, match=r"problem_type must be one of \['regression', 'single_label_classification', "
                                         r"'multi_label_classification'\], got 'ranking'"):
        tiny_config(num_labels=3, problem_type="ranking")
    with pytest.raises(ValueError, match=r"single_label_classification.*num_labels"):
        tiny_config(num_labels=1, problem_type="single_label_classification")


# 3. attentions
def stock(family: str, encoder_config):
    """transformers' own model of `family` on the same encoder config, with sdpa attention."""
    from transformers import BertConfig, BertModel, ViTConfig, ViTModel

    config_class, model_class = (ViTConfig, ViTModel) if family == "vit" else (BertConfig, BertModel)
    model = model_class(config_class(**{k: v for k, v in encoder_config.to_dict().items() if k != "model_type"}))
    model.set_attn_implementation("sdpa")
    return model.eval()


@pytest.mark.parametrize("family", ["vit", "bert"])
def test_attention_weights_pass_through_to_an_attention_encoder(family, tmp_path):
    InSubModel(family_config(family)).save_pretrained(tmp_path)
    model = InSubModel.from_pretrained(tmp_path, attn_implementation="eager").eval()
    inputs = family_inputs(family, batch=2)
    out = model(**inputs, output_attentions=True, output_hidden_states=True)
    layers, heads = model.config.encoder_config.num_hidden_layers, model.config.encoder_config.num_attention_heads
    tokens = out.last_hidden_state.shape[1]
    assert len(out.attentions) == layers and len(out.hidden_states) == layers + 1
    assert all(a.shape == (2, heads, tokens, tokens) for a in out.attentions)
    torch.testing.assert_close(out.attentions[0].sum(-1), torch.ones(2, heads, tokens))  # each row a distribution
    classifier = classifier_class(family).from_pretrained(tmp_path, num_labels=3, attn_implementation="eager").eval()
    assert len(classifier(**inputs, output_attentions=True).attentions) == layers
    # under sdpa, as the stock ViT / BERT do: transformers' warning and no attention weights, the rest unchanged
    import logging

    sdpa = InSubModel.from_pretrained(tmp_path, attn_implementation="sdpa").eval()
    logging.Logger.warning_once.cache_clear()  # transformers says it once per process
    with CaptureLogger(transformers_logging.get_logger("transformers")) as logged:
        out = sdpa(**inputs, output_attentions=True)
    stock_model = stock(family, sdpa.config.encoder_config)
    logging.Logger.warning_once.cache_clear()
    with CaptureLogger(transformers_logging.get_logger("transformers")) as stock_logged:
        stock_out = stock_model(**{k: v for k, v in inputs.items() if k != "token_type_ids"}, output_attentions=True)
    assert out.attentions == stock_out.attentions == ()
    assert "does not support `output_attentions=True`" in logged.out and stock_logged.out == logged.out


@pytest.mark.parametrize("family", ["resnet", "dna"])
def test_output_attentions_is_refused_by_name_where_the_encoder_has_no_attention(family):
    model = InSubModel(family_config(family)).eval()
    with pytest.raises(ValueError, match=r"output_attentions: this model's encoder \(\w+\) has no attention weights"):
        model(**family_inputs(family), output_attentions=True)


@pytest.mark.parametrize("family", ["vit", "bert"])
def test_the_attention_implementation_reaches_the_encoder(family, tmp_path):
    InSubModel(family_config(family)).save_pretrained(tmp_path)
    for implementation in ("eager", "sdpa"):
        model = InSubModel.from_pretrained(tmp_path, attn_implementation=implementation)
        assert model.encoder.model.config._attn_implementation == implementation


def test_the_pretraining_model_gives_its_encoder_s_states_over_both_views(tmp_path):
    InSubForPreTraining(family_config("vit")).save_pretrained(tmp_path)
    model = InSubForPreTraining.from_pretrained(tmp_path, attn_implementation="eager").eval()
    views = {"pixel_values": torch.randn(2, 3, 32, 32), "pixel_values_2": torch.randn(2, 3, 32, 32)}
    out = model(**views, output_hidden_states=True, output_attentions=True)
    alone = model.insub(pixel_values=torch.cat([views["pixel_values"], views["pixel_values_2"]]),
                        output_hidden_states=True, output_attentions=True)
    assert out.loss is not None and len(out.hidden_states) == len(alone.hidden_states) == 3
    for ours, theirs in zip((*out.hidden_states, *out.attentions), (*alone.hidden_states, *alone.attentions)):
        torch.testing.assert_close(ours, torch.stack(theirs.chunk(2)))  # (2, B, ...): view, then sample
    assert model(**views).hidden_states is None
    # every per-view field the same way: [view, sample] of a batched call is the call on that sample alone
    one = model(**{k: v[1:2] for k, v in views.items()}, output_hidden_states=True, output_attentions=True)
    for field in ("head_embeddings", "representation"):
        torch.testing.assert_close(getattr(one, field)[:, 0], getattr(out, field)[:, 1], rtol=1e-4, atol=1e-5)
    for ours, single in zip((*out.hidden_states, *out.attentions), (*one.hidden_states, *one.attentions)):
        torch.testing.assert_close(single[:, 0], ours[:, 1], rtol=1e-4, atol=1e-5)


# 4. input embeddings
def test_a_text_model_resizes_its_token_embeddings_and_reads_the_new_tokens(tmp_path):
    model = InSubForSequenceClassification(family_config("bert", num_labels=2)).eval()
    embeddings = model.get_input_embeddings()
    assert embeddings is model.insub.encoder.model.embeddings.word_embeddings and embeddings.num_embeddings == 30522
    model.resize_token_embeddings(30522 + 5)
    assert model.get_input_embeddings().num_embeddings == 30527
    assert model.config.encoder_config.vocab_size == 30527
    new_ids = torch.tensor([[101, 30526, 102]])
    logits = model(input_ids=new_ids).logits
    model.save_pretrained(tmp_path)
    loaded = InSubForSequenceClassification.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(loaded(input_ids=new_ids).logits, logits)
    assert InSubModel(family_config("vit")).get_input_embeddings() is not None  # the patch embeddings
    for family in ("resnet", "dna"):
        assert InSubModel(family_config(family)).get_input_embeddings() is None


# 5. unused parameters
@pytest.mark.parametrize("family", FAMILIES)
def test_a_classifier_has_no_parameter_without_a_gradient(family, tmp_path):
    InSubForPreTraining(family_config(family)).save_pretrained(tmp_path)
    cls = classifier_class(family)
    model, info = cls.from_pretrained(tmp_path, num_labels=3, output_loading_info=True)
    assert model.insub.heads is None
    assert any(key.startswith("insub.heads.") for key in info["unexpected_keys"])  # the load report names them
    labels = torch.tensor([0, 2, 1])
    model.train()(**family_inputs(family), labels=labels).loss.backward()
    without = [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not without, without


def test_two_process_fine_tuning_needs_no_find_unused_parameters(tmp_path):
    worker = Path(__file__).with_name("ddp_finetune_worker.py")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                             str(worker), str(tmp_path)], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    losses = [float((tmp_path / f"rank{r}.txt").read_text()) for r in (0, 1)]
    assert all(math.isfinite(loss) for loss in losses)


# 6. gradient checkpointing
@pytest.mark.parametrize("family, supported", [("vit", True), ("resnet", False), ("bert", True), ("dna", False)])
def test_gradient_checkpointing_is_declared_as_the_encoder_supports_it(family, supported):
    model = InSubModel(family_config(family))
    assert model.supports_gradient_checkpointing is supported
    if supported:
        model.gradient_checkpointing_enable()
        assert model.is_gradient_checkpointing
    else:
        with pytest.raises(ValueError, match="InSubModel does not support (gradient|activation) checkpointing"):
            model.gradient_checkpointing_enable()



def test_the_cifar_resnet_offers_no_checkpointing_as_transformers_resnet_offers_none():
    # replaying a BatchNorm block in the backward pass would move its running statistics twice per step; transformers'
    # own ResNet declines the same call with the same error
    from transformers import ResNetConfig, ResNetModel

    stock = ResNetModel(ResNetConfig(embedding_size=8, hidden_sizes=[8, 8], depths=[1, 1]))
    ours = InSubModel(family_config("resnet"))
    assert stock.supports_gradient_checkpointing is ours.supports_gradient_checkpointing is False
    for model, name in ((stock, "ResNetModel"), (ours, "InSubModel")):
        with pytest.raises(ValueError, match=f"{name} does not support (gradient|activation) checkpointing"):
            model.gradient_checkpointing_enable()
    # one train-mode step moves the statistics once
    x = torch.randn(4, 3, 32, 32)
    ours.train()(pixel_values=x).mean_embedding.sum().backward()
    tracked = [b.num_batches_tracked.item() for b in ours.modules() if isinstance(b, torch.nn.BatchNorm2d)]
    assert set(tracked) == {1}


# 7. batch independence
@pytest.mark.parametrize("family", FAMILIES)
def test_every_sample_s_outputs_are_the_same_alone_and_in_a_batch(family):
    torch.manual_seed(0)
    model = InSubModel(family_config(family)).eval()
    inputs = family_inputs(family, batch=3)
    together = model(**inputs)
    alone = model(**{k: v[1:2] for k, v in inputs.items()})
    for field in ("representation", "head_embeddings", "head_spread"):
        torch.testing.assert_close(getattr(alone, field)[0], getattr(together, field)[1], rtol=1e-4, atol=1e-5)
    assert alone.uncertainty is None and together.uncertainty is None  # not fitted: no number under that name


def test_the_text_pretraining_model_embeds_one_sentence_in_eval_mode():
    torch.manual_seed(0)
    model = InSubForPreTraining(family_config("bert")).eval()
    inputs = family_inputs("bert", batch=3)
    together = model(**inputs)
    alone = model(**{k: v[:1] for k, v in inputs.items()})
    assert alone.loss is None and together.loss is not None  # SCD's loss normalises over a batch of >= 2
    torch.testing.assert_close(alone.head_embeddings[:, 0], together.head_embeddings[:, 0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(alone.representation[:, 0], together.representation[:, 0], rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="at least 2 sentences"):
        model.train()(**{k: v[:1] for k, v in inputs.items()})


# 8. processor conventions
def test_a_four_channel_processor_reads_rgba_images_with_four_means_and_stds():
    assert set(ImagesKwargs.__annotations__) <= set(InSubImageProcessorKwargs.__annotations__)  # derives from it
    mean, std = (0.1, 0.2, 0.3, 0.4), (0.5, 0.25, 0.2, 0.1)
    processor = InSubImageProcessor.for_images(8, 4, mean, std)
    pixels = np.random.default_rng(0).integers(0, 256, (8, 8, 4), dtype=np.uint8)
    got = processor(Image.fromarray(pixels, mode="RGBA"), return_tensors="pt")["pixel_values"]
    expected = (torch.from_numpy(pixels).permute(2, 0, 1).float() / 255 - torch.tensor(mean)[:, None, None]) / \
        torch.tensor(std)[:, None, None]
    torch.testing.assert_close(got[0], expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"num_channels=4 reads 4-channel images .* got 3 channels"):
        processor(torch.randint(0, 256, (3, 8, 8), dtype=torch.uint8), return_tensors="pt")


# 9. LoRA through peft
def test_lora_fine_tuning_trains_the_adapters_and_the_classifier_and_round_trips(tmp_path):
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    base = InSubForSequenceClassification(family_config("bert", num_labels=2))
    before = {name: p.detach().clone() for name, p in base.named_parameters()}
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value"],
                                                      modules_to_save=["classifier"]))
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name or "classifier" in name for name in trainable)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    inputs, labels = family_inputs("bert", batch=4), torch.tensor([0, 1, 1, 0])
    model.train()
    for _ in range(3):
        optimizer.zero_grad()
        model(**inputs, labels=labels).loss.backward()
        optimizer.step()
    changed = {name for name, p in model.named_parameters() if name.split("base_model.model.")[-1] in before
               and not torch.equal(p, before[name.split("base_model.model.")[-1]])}
    assert not changed, changed  # the base weights stay as they were
    model.eval()
    logits = model(**inputs).logits
    model.save_pretrained(tmp_path / "adapter")
    fresh = InSubForSequenceClassification(family_config("bert", num_labels=2))
    fresh.load_state_dict({k: v for k, v in before.items()}, strict=True)
    loaded = peft.PeftModel.from_pretrained(fresh, tmp_path / "adapter").eval()
    torch.testing.assert_close(loaded(**inputs).logits, logits)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_first_positional_argument_is_the_model_s_main_input(family):
    # as BertModel(input_ids) and ViTModel(pixel_values): model(x) reads x as its modality's input
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    inputs = family_inputs(family, batch=2)
    model = InSubModel(family_config(family)).eval()
    main = model.main_input_name
    rest = {k: v for k, v in inputs.items() if k != main}
    with torch.no_grad():
        by_name = model(**inputs).representation
        torch.testing.assert_close(model(inputs[main], **rest).representation, by_name)
        if family == "bert":  # the stock model binds the same call the same way
            stock = BertModel(BertConfig(**family_config("bert").encoder_config.to_dict())).eval()
            torch.testing.assert_close(stock(inputs[main], **rest).last_hidden_state,
                                       stock(**inputs).last_hidden_state)
            classifier = InSubForSequenceClassification(family_config("bert", num_labels=2)).eval()
            torch.testing.assert_close(classifier(inputs[main], **rest).logits, classifier(**inputs).logits)
            pretraining = InSubForPreTraining(family_config("bert")).eval()
            torch.testing.assert_close(pretraining(inputs[main], **rest).head_embeddings,
                                       pretraining(**inputs).head_embeddings)


@pytest.mark.parametrize("family", ["vit", "bert"])
def test_an_encoder_field_set_on_the_config_saves_and_loads(family, tmp_path):
    # transformers' test helpers set such fields on a model's top-level config; what saved must load, the field
    # in the encoder's config, as the stock model's own config keeps it
    from transformers import AutoModel

    model = InSubModel(family_config(family))
    model.config.layer_norm_eps = 1e-6
    assert model.config.encoder_config.layer_norm_eps == 1e-6
    model.save_pretrained(tmp_path / "insub")
    loaded = AutoModel.from_pretrained(tmp_path / "insub")
    assert loaded.config.encoder_config.layer_norm_eps == 1e-6
    assert "layer_norm_eps" not in json.loads((tmp_path / "insub" / "config.json").read_text())
    stock_model = stock(family, model.config.encoder_config)
    stock_model.config.layer_norm_eps = 1e-6
    stock_model.save_pretrained(tmp_path / "stock")
    assert AutoModel.from_pretrained(tmp_path / "stock").config.layer_norm_eps == 1e-6


@pytest.mark.parametrize("family", ["vit", "bert", "resnet"])
def test_selected_hidden_states_are_the_chosen_layers_and_none_elsewhere(family):
    # transformers 5's layer selection: output_hidden_states=[0, 2, -1] gives those layers, None for the others
    torch.manual_seed(0)
    model = InSubModel(family_config(family)).eval()
    inputs = family_inputs(family, batch=2)
    with torch.no_grad():
        every = model(**inputs, output_hidden_states=True).hidden_states
        chosen = model(**inputs, output_hidden_states=[0, 2, -1]).hidden_states
    assert len(chosen) == len(every)
    for i, (state, full) in enumerate(zip(chosen, every)):
        if i in (0, 2, len(every) - 1):
            torch.testing.assert_close(state, full)
        else:
            assert state is None, i
    if family == "bert":  # the stock model answers the same call the same way
        stock_model = stock("bert", model.config.encoder_config)
        stock_states = stock_model(inputs["input_ids"], output_hidden_states=[0, 2, -1]).hidden_states
        assert [s is None for s in stock_states] == [s is None for s in chosen]

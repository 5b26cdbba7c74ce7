import json
import math

import numpy as np
import pytest
import torch
from datasets import Dataset
from sklearn.linear_model import LogisticRegression
from transformers import AutoTokenizer

from insub_hf import InSubConfig, InSubForPreTraining, InSubModel
from insub_hf.data import SentenceTokenizer, TextViews, load_sentence_corpus, load_tweet_sentiment
from insub_hf.encoders import dropout_rate
from insub_hf.evaluation.senteval import (
    PENALTIES,
    classify_cv,
    classify_splits,
    evaluate_task,
    load_senteval_task,
    sts_spearman,
)
from insub_hf.losses import decorrelation, head_cross_correlation, scd_loss, self_contrast
from insub_hf.model.sentence_embeddings import InSubSentenceEncoder
from insub_hf.encoders.pretrained import packaged_minilm_path
from insub_hf.training.trainer import InSubTrainer

from ..test_trainer import args

pytestmark = pytest.mark.numeric

MINILM = packaged_minilm_path()


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(MINILM)


def tiny_bert_config(**overrides):
    bert = dict(model_type="bert", vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, max_position_embeddings=64)
    kwargs = dict(encoder_config=bert, objective="scd", num_heads=3, head_hidden_sizes=[24, 24], head_output_size=24,
                  normalize_heads=False, pooling="mean", diversity_alpha=0.1, diversity_weight=0.01)
    kwargs.update(overrides)
    return InSubConfig(**kwargs)


def save_tiny_bert(folder):
    """A seeded tiny stock BERT (`tiny_bert_config`'s encoder) with the packaged MiniLM tokenizer, saved at `folder`:
    what a text job takes as `--encoder`. Returns `folder`."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    BertModel(BertConfig(**tiny_bert_config().encoder_config.to_dict())).save_pretrained(folder)
    AutoTokenizer.from_pretrained(packaged_minilm_path()).save_pretrained(folder)
    return folder


def test_scd_loss_matches_a_hand_computed_example():
    h1, h2 = torch.tensor([[1.0, 0.0], [1.0, 1.0]]), torch.tensor([[0.0, 1.0], [1.0, 1.0]])
    p1 = torch.tensor([[[1.0, 2.0], [0.0, 1.0]], [[3.0, 0.0], [2.0, 3.0]]])  # (B=2, M=2, q=2)
    p2 = torch.tensor([[[0.0, 1.0], [1.0, 1.0]], [[2.0, 5.0], [3.0, 0.0]]])
    # cos: 0 and 1 -> mean 0.5 / tau 0.05 = 10
    assert self_contrast(h1, h2, 0.05).tolist() == pytest.approx([0.0, 20.0])
    # with B = 2 every standardised column is (-1, +1) up to eps, in the order of its two values
    sign = lambda col: [-1.0, 1.0] if col[0] < col[1] else [1.0, -1.0]  # noqa: E731
    expected_c = np.zeros((2, 2))
    for m in range(2):
        n1 = np.array([sign(p1[:, m, i].tolist()) for i in range(2)]).T  # (B, q)
        n2 = np.array([sign(p2[:, m, i].tolist()) for i in range(2)]).T
        expected_c += n1.T @ n2 / 2
    expected_c /= 2
    c = head_cross_correlation(p1, p2, eps=0.0)
    np.testing.assert_allclose(c.numpy(), expected_c, atol=1e-6)
    diag, off = np.diag(expected_c), expected_c - np.diag(np.diag(expected_c))
    expected_decor = ((diag - 1) ** 2).sum() + 0.012 * (off**2).sum()
    assert decorrelation(c).item() == pytest.approx(expected_decor, abs=1e-6)
    loss = scd_loss(h1, h2, p1, p2, 0.05, 1.0, 0.005225, 0.012)
    assert loss.item() == pytest.approx(10.0 + 0.005225 * expected_decor, abs=1e-4)


def test_the_two_dropout_views_differ_and_rates_are_restored():
    model = InSubForPreTraining(tiny_bert_config(objective_config={"dropout": 0.0, "dropout_2": 0.3})).train()
    ids = torch.randint(1000, 2000, (4, 12))
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids))
    h1, h2 = out.representation
    assert not torch.allclose(h1, h2)
    no_dropout = InSubForPreTraining(tiny_bert_config(objective_config={"dropout": 0.0, "dropout_2": 0.0})).train()
    h1, h2 = no_dropout(input_ids=ids, attention_mask=torch.ones_like(ids)).representation
    torch.testing.assert_close(h1, h2)
    rates = {m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)}
    assert rates == {0.1}  # BERT's configured rate, back after the two passes
    with pytest.raises(ValueError, match=r"dropout rate must be in \[0, 1\)"):
        with dropout_rate(model, 1.0):
            pass


def test_tokenizer_round_trip_truncation_said_once_and_bad_rows(tokenizer):
    tokenize = SentenceTokenizer(tokenizer, max_length=8, vocab_size=30522)
    ids = tokenize(["Self-driving cars."])["input_ids"][0]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "self - driving cars."
    long = ["one two three four five six seven eight nine ten eleven"]
    with pytest.warns(UserWarning, match=r"the first batch with a sentence longer than max_length=8 tokens holds 1 of "
                                          r"its 2 \(the longest 13\); sentences over max_length are truncated"):
        out = tokenize([long[0], "Short."])  # a batch of 2, one of them long: counted as such
    out = {name: value[:1] for name, value in out.items()}
    assert out["input_ids"].shape == (1, 8) and out["input_ids"][0, -1].item() == tokenizer.sep_token_id
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tokenize(long)  # said once
    with pytest.raises(ValueError, match=r"text\[1\] is '  '; every row needs a non-empty string"):
        tokenize(["fine", "  "])
    with pytest.raises(ValueError, match="tokenizer has 30522 tokens but the encoder's vocab_size is 100"):
        TextViews(tokenizer, vocab_size=100)
    with pytest.raises(ValueError, match="no column 'text'"):
        TextViews(tokenizer)({"sentence": ["a"]})


def test_training_steps_change_parameters(tmp_path, tokenizer):
    model = InSubForPreTraining(tiny_bert_config())
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    corpus = load_sentence_corpus("bundled", max_sentences=16).with_transform(TextViews(tokenizer, max_length=16))
    trainer = InSubTrainer(model=model, args=args(tmp_path, max_steps=2, learning_rate=1e-3, optim="adamw_torch"),
                           train_dataset=corpus)
    trainer.train()
    logs = [row for row in trainer.state.log_history if "loss" in row]
    assert len(logs) == 2 and all(math.isfinite(r["loss"]) and r["diversity_loss"] >= 0 for r in logs)
    changed = [k for k, v in model.named_parameters() if not torch.equal(v, before[k])]
    assert any("encoder" in k for k in changed) and any("heads" in k for k in changed)


def test_a_frozen_encoder_keeps_its_weights_while_the_heads_learn(tmp_path, tokenizer):
    model = InSubForPreTraining(tiny_bert_config(freeze_encoder=True))
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    corpus = load_sentence_corpus("bundled", max_sentences=16).with_transform(TextViews(tokenizer, max_length=16))
    trainer = InSubTrainer(model=model, args=args(tmp_path, max_steps=2, learning_rate=1e-3, optim="adamw_torch"),
                           train_dataset=corpus)
    trainer.train()
    changed = {k for k, v in model.named_parameters() if not torch.equal(v, before[k])}
    assert changed and all(k.startswith("insub.heads") for k in changed)
    assert all(torch.equal(v, before[k]) for k, v in model.insub.encoder.named_parameters(prefix="insub.encoder"))
    model.save_pretrained(tmp_path / "model")
    reloaded = InSubForPreTraining.from_pretrained(tmp_path / "model")  # trained on: the encoder stays frozen
    InSubTrainer(model=reloaded, args=args(tmp_path / "again", max_steps=1), train_dataset=corpus)
    assert reloaded.config.freeze_encoder and not any(p.requires_grad for p in reloaded.insub.encoder.parameters())


def test_padding_to_the_longest_sentence_gives_the_fixed_length_embeddings(tokenizer):
    model = InSubModel(tiny_bert_config(num_heads=2)).eval()
    sentences = ["Short one.", "A somewhat longer sentence with more words in it."]
    fixed = SentenceTokenizer(tokenizer, 40)(sentences)
    longest = SentenceTokenizer(tokenizer, 40, padding="longest")(sentences)
    assert fixed["input_ids"].shape == (2, 40) and longest["input_ids"].shape[1] < 20
    with torch.no_grad():
        a, b = model(**fixed), model(**longest)
    torch.testing.assert_close(b.representation, a.representation, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(b.uncertainty, a.uncertainty, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match=r"padding must be one of \['max_length', 'longest'\], got 'left'"):
        SentenceTokenizer(tokenizer, 40, padding="left")


def test_save_load_round_trip_of_model_and_tokenizer(tmp_path, tokenizer):
    config = tiny_bert_config(num_heads=3, uncertainty={"direction": 1})  # the spread, oriented
    encoder = InSubSentenceEncoder(InSubModel(config), tokenizer, max_length=16)
    sentences = ["The car drove itself.", "I would never ride in one!"]
    first = encoder.encode(sentences)
    assert first.embeddings.shape == (2, 32) and first.head_spread.shape == (2,) and (first.head_spread > 0).all()
    assert first.uncertainty is None and first.knn_distance is None  # no calibrated fit, no bank
    encoder.save_pretrained(tmp_path / "enc")
    loaded = InSubSentenceEncoder.from_pretrained(tmp_path / "enc", max_length=16)
    again = loaded.encode(sentences)
    torch.testing.assert_close(again.embeddings, first.embeddings, rtol=0, atol=0)
    torch.testing.assert_close(again.head_spread, first.head_spread, rtol=0, atol=0)
    assert loaded.tokenizer(sentences)["input_ids"] == tokenizer(sentences)["input_ids"]


def test_sentence_encoder_refuses_a_bad_length_batch_size_or_a_folder_without_tokenizer(tmp_path, tokenizer):
    model = InSubModel(tiny_bert_config(num_heads=2))
    positions = model.config.encoder_config.max_position_embeddings
    with pytest.raises(ValueError, match=rf"max_length={positions + 1} is more than the encoder's {positions} position"):
        InSubSentenceEncoder(model, tokenizer, max_length=positions + 1)
    with pytest.raises(ValueError, match="max_length must be an integer >= 3"):
        InSubSentenceEncoder(model, tokenizer, max_length=0)
    encoder = InSubSentenceEncoder(model, tokenizer, max_length=positions)
    with pytest.raises(ValueError, match="encode: batch_size must be an integer >= 1, got 0"):
        encoder.encode(["a sentence"], batch_size=0)
    model.save_pretrained(tmp_path / "model-only")  # no tokenizer beside it
    with pytest.raises(FileNotFoundError, match=r"from_pretrained\('.*model-only'\): no tokenizer could be loaded"):
        InSubSentenceEncoder.from_pretrained(tmp_path / "model-only")


def test_real_minilm_transfer_on_a_tiny_real_subset_beats_chance(tokenizer):
    from insub_hf.encoders import encoder_config_from_pretrained, load_encoder_weights

    model = InSubModel(tiny_bert_config(encoder_config=encoder_config_from_pretrained(MINILM), num_heads=1))
    load_encoder_weights(model, MINILM)
    encoder = InSubSentenceEncoder(model, tokenizer)
    tweets = load_tweet_sentiment("transfer").shuffle(seed=0).select(range(240))
    result = evaluate_task(lambda s: encoder.encode(s).embeddings, "TWEETS", tweets, folds=3)
    assert result["n"] == 240 and result["accuracy"] > 0.45  # three classes: chance is 1/3
    assert 0 <= result["ece"] < 0.3 and math.isfinite(result["nll"])


def test_classifiers_match_sklearn_and_sts_matches_scipy():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 5))
    y = (x[:, 0] + 0.5 * rng.normal(size=120) > 0).astype(int)
    train, dev, test = (x[:60], y[:60]), (x[60:90], y[60:90]), (x[90:], y[90:])
    result = classify_splits(train, test, dev)
    scores = [(LogisticRegression(C=c, max_iter=1000, random_state=0).fit(*train).predict(dev[0]) == dev[1]).mean()
              for c in PENALTIES]
    reference = LogisticRegression(C=PENALTIES[int(np.argmax(scores))], max_iter=1000, random_state=0).fit(*train)
    assert result["accuracy"] == pytest.approx((reference.predict(test[0]) == test[1]).mean())
    probs = reference.predict_proba(test[0])
    assert result["nll"] == pytest.approx(-np.log(probs[np.arange(30), test[1]]).mean(), rel=1e-6)
    assert classify_cv(x, y, folds=4)["accuracy"] > 0.7
    with pytest.raises(ValueError, match="at least 2 are needed"):
        classify_cv(x, np.zeros(120, dtype=int))
    from scipy.stats import spearmanr

    u, v, gold = torch.randn(20, 4), torch.randn(20, 4), rng.uniform(0, 5, 20)
    cos = torch.nn.functional.cosine_similarity(u.double(), v.double()).numpy()
    assert sts_spearman(u, v, gold) == pytest.approx(100 * spearmanr(cos, gold).statistic)


def bag_of_letters(sentences):
    return torch.tensor([[s.lower().count(c) for c in "abcdefghijklmnopqrstuvwxyz"] for s in sentences]).float()


def test_senteval_loaders_read_local_copies_in_the_hub_format(tmp_path):
    cr = tmp_path / "cr"
    cr.mkdir()
    for split, rows in (("train", 40), ("test", 20)):
        lines = [{"text": ("great product, love it" if i % 2 else "awful, broke in a day") + f" #{i}", "label": i % 2}
                 for i in range(rows)]
        (cr / f"{split}.jsonl").write_text("\n".join(json.dumps(r) for r in lines))
    data = load_senteval_task("CR", str(cr))
    assert list(data) == ["all"] and len(data["all"]) == 60  # cv tasks pool every split, as SentEval
    assert evaluate_task(bag_of_letters, "CR", data, folds=3)["accuracy"] == 1.0

    mrpc = tmp_path / "mrpc"
    mrpc.mkdir()
    for split, rows in (("train", 30), ("validation", 10), ("test", 10)):
        header = "sentence1,sentence2,label\n"
        body = "".join(f"the cat sat {i},{'the cat sat' if i % 2 else 'dogs run far'} {i},{i % 2}\n" for i in range(rows))
        (mrpc / f"{split}.csv").write_text(header + body)
    data = load_senteval_task("MRPC", str(mrpc))
    assert sorted(data) == ["test", "train", "validation"]
    assert 0 <= evaluate_task(bag_of_letters, "MRPC", data)["accuracy"] <= 1

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "train.jsonl").write_text(json.dumps({"sentence": "x", "label": 0}))
    with pytest.raises(ValueError, match="has no column 'text'"):
        load_senteval_task("CR", str(bad))
    with pytest.raises(ValueError, match="task must be one of"):
        load_senteval_task("IMDB")


def test_corpus_handling(tmp_path):
    text = tmp_path / "sentences.txt"
    text.write_text("first sentence\n\n   \nsecond one\n")
    corpus = load_sentence_corpus(str(text))
    assert corpus["text"] == ["first sentence", "second one"]  # empty lines dropped
    assert len(load_sentence_corpus("bundled")) == 4000
    with pytest.raises(ValueError, match="no column 'sentence'"):
        load_sentence_corpus(str(text), text_column="sentence")
    empty = tmp_path / "empty.csv"
    empty.write_text("text\n\" \"\n")
    with pytest.raises(ValueError, match="is empty"):
        load_sentence_corpus(str(empty))
    with pytest.raises(ValueError, match="no column 'text'"):
        TextViews(AutoTokenizer.from_pretrained(MINILM))(Dataset.from_dict({"s": ["a"]})[:1])

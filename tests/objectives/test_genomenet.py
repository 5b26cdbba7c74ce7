import gzip
import math

import pytest
import torch

from insub_hf import InSubConfig, InSubForPreTraining, InSubForSequenceClassification
from insub_hf.data import (
    DNAViews,
    bundled_upstream_path,
    fasta_windows,
    load_fasta_dataset,
    load_labelled_sequences,
    load_splice_junctions,
    read_fasta,
)
from insub_hf.data.dna_views import one_hot_dna, reverse_complement
from insub_hf.evaluation.features import extract_features
from insub_hf.jobs.genomics import encode_labelled
from insub_hf.evaluation.harness import summarize
from insub_hf.evaluation.probes import ProbeArguments, fit_probes, member_probabilities
from insub_hf.losses import self_genomenet_loss
from insub_hf.training.trainer import InSubTrainer

from ..test_trainer import args

pytestmark = pytest.mark.numeric


def genomic_config(**overrides):
    kwargs = dict(encoder_config=dict(model_type="insub_genomic", conv_filters=16, lstm_hidden_size=16),
                  objective="genomenet", num_heads=3, head_hidden_sizes=[], head_output_size=8, head_norm="none",
                  normalize_heads=False)
    kwargs.update(overrides)
    return InSubConfig(**kwargs)


def test_one_hot_and_reverse_complement_against_hand_written_cases():
    x = one_hot_dna("acGTn")
    assert x.tolist() == [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0]]
    # reverse complement of ACGTN is NACGT
    assert reverse_complement(x).tolist() == one_hot_dna("NACGT").tolist()
    assert reverse_complement(one_hot_dna("AAGC")).tolist() == one_hot_dna("GCTT").tolist()
    with pytest.raises(ValueError, match=r"record 'chr1': character 'X' at position 2 is not allowed"):
        one_hot_dna("ACXT", name="record 'chr1'")
    with pytest.raises(ValueError, match="character 'N' at position 0"):
        one_hot_dna("NA", unknown="error")


def test_loss_matches_a_hand_computed_tiny_example():
    # B = 2 sequences, T = 3 positions, q = 1, one distance with W = 2
    c = torch.tensor([[[1.0], [2.0], [0.0]], [[0.0], [1.0], [-1.0]]])
    r = torch.tensor([[[0.5], [1.0], [2.0]], [[-1.0], [0.0], [1.0]]])
    w = torch.tensor([[[2.0]]])

    def ce(scores, target):
        return -scores[target] + math.log(sum(math.exp(s) for s in scores))

    expected = [0.0, 0.0]
    for anchor, other in ((c, r), (r, c)):
        for j in range(2):  # positions j = 0..T-1-d with d = 1; target position T-1-d-j = 1-j
            for b in range(2):
                scores = [2.0 * anchor[b, j, 0].item() * other[k, 1 - j, 0].item() for k in range(2)]
                expected[b] += ce(scores, b) / 4  # averaged over 2 positions x 2 directions
    loss = self_genomenet_loss(c, r, w)
    assert loss.tolist() == pytest.approx(expected, rel=1e-6)
    with pytest.raises(ValueError, match="gives 3 positions, which leaves nothing to predict at 3 distances"):
        self_genomenet_loss(c, r, torch.ones(3, 1, 1))


def test_fasta_reading_streams_gzip_and_names_bad_records(tmp_path):
    path = tmp_path / "genome.fa.gz"
    with gzip.open(path, "wt") as f:
        f.write(">chr1 test\nACGTACGT\nacgt\n>chr2\nNNNN\n")
    assert list(read_fasta(path)) == [("chr1 test", "ACGTACGTacgt"), ("chr2", "NNNN")]
    assert list(fasta_windows(path, 5, 4)) == [("chr1 test:0", "ACGTA"), ("chr1 test:4", "ACGTa")]
    empty = tmp_path / "empty.fa"
    empty.write_text(">one\nACGT\n>two\n>three\nGG\n")
    with pytest.raises(ValueError, match="record 'two' has no sequence"):
        list(read_fasta(empty))
    assert [n for n, _ in read_fasta(empty, skip_empty=True)] == ["one", "three"]
    labelled = tmp_path / "effectors.fa"
    labelled.write_text(">p1|effector\nACGTACGTAC\n>p2|other\nTTGGACGTAC\n")
    data = load_labelled_sequences(labelled)
    assert data["label"] == [0, 1] and data.features["label"].names == ["effector", "other"]
    views = DNAViews(crop_length=20)
    with pytest.raises(ValueError, match=r"record 'p1|effector': length 10 is shorter than crop_length=20"):
        views(load_fasta_dataset(labelled)[:2])
    bad = tmp_path / "bad.fa"
    bad.write_text(">seqA\nACGU\n")
    with pytest.raises(ValueError, match=r"record 'seqA': character 'U' at position 3"):
        DNAViews(2)(load_fasta_dataset(bad)[:1])


def test_genomic_encoder_save_load_equivalence(tmp_path):
    model = InSubForPreTraining(genomic_config()).eval()
    x = torch.stack([one_hot_dna("ACGT" * 20), one_hot_dna("TTGCA" * 16)])
    model.save_pretrained(tmp_path / "m")
    loaded = InSubForPreTraining.from_pretrained(tmp_path / "m").eval()
    with torch.no_grad():
        a, b = model(dna_one_hot=x), loaded(dna_one_hot=x)
    assert torch.equal(a.loss, b.loss) and torch.equal(a.head_embeddings, b.head_embeddings)
    with pytest.raises(ValueError, match="pass only dna_one_hot"):
        model(dna_one_hot=x, dna_one_hot_2=x)
    with pytest.raises(ValueError, match="shorter than the conv kernel"):
        model(dna_one_hot=x[:, :10])


def test_training_steps_change_parameters_on_real_upstream_regions(tmp_path):
    model = InSubForPreTraining(genomic_config())
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    data = load_fasta_dataset(bundled_upstream_path()).select(range(16)).with_transform(DNAViews(120, two_views=False))
    trainer = InSubTrainer(model=model, args=args(tmp_path, max_steps=3, per_device_train_batch_size=8,
                                                  learning_rate=1e-2, optim="adamw_torch"), train_dataset=data)
    trainer.train()
    logs = [row for row in trainer.state.log_history if "loss" in row]
    assert all(math.isfinite(r["loss"]) for r in logs) and logs[-1]["ssl_loss"] < logs[0]["ssl_loss"]
    changed = {k.split(".")[0] for k, v in model.named_parameters() if not torch.equal(v, before[k])}
    assert changed == {"insub", "objective"}


def test_classification_on_a_real_splice_subset_beats_chance(tmp_path):
    splice = load_splice_junctions().shuffle(seed=0).select(range(600))
    parts = splice.train_test_split(test_size=0.25, seed=0, stratify_by_column="label")
    train, test = encode_labelled(parts["train"]), encode_labelled(parts["test"])
    model = InSubForPreTraining(genomic_config(num_heads=1))
    probes = fit_probes(extract_features(model, {"dna_one_hot": train[0]}).representations, train[1], 3, 1,
                        ProbeArguments(probe_epochs=30))
    probs = member_probabilities(probes, extract_features(model, {"dna_one_hot": test[0]}).representations)
    result = summarize(probs, test[1])
    majority = max(torch.bincount(test[1]).tolist()) / len(test[1])
    assert result.accuracy > majority and all(math.isfinite(getattr(result, k)) for k in ("ece", "tace", "nll"))

    config = InSubConfig.from_dict({**model.config.to_dict(), "num_labels": 3})
    classifier = InSubForSequenceClassification(config)
    classifier.insub.encoder.load_state_dict(model.insub.encoder.state_dict())
    out = classifier(dna_one_hot=train[0][:4], labels=train[1][:4])
    assert out.logits.shape == (4, 3) and out.loss.item() > 0
    classifier.save_pretrained(tmp_path / "clf")
    reloaded = InSubForSequenceClassification.from_pretrained(tmp_path / "clf")
    assert torch.equal(reloaded.classifier.weight, classifier.classifier.weight)

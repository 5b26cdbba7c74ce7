import pytest
import torch
from datasets import Dataset
from transformers import BertConfig, BertTokenizerFast

from insub_hf import InSubConfig, InSubForPreTraining
from insub_hf.data import DNAViews, TextViews, one_hot_dna, random_crop, reverse_complement


def test_one_hot_dna_by_hand():
    expected = torch.tensor([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0], [1, 0, 0, 0]])
    assert torch.equal(one_hot_dna("ACGTNa"), expected.float())  # N -> zeros, lower case accepted
    with pytest.raises(ValueError, match=r"rec7: character 'N' at position 2 is not allowed; allowed: A, C, G, T\."):
        one_hot_dna("ACNT", unknown="error", name="rec7")
    with pytest.raises(ValueError, match="character 'X' at position 1 is not allowed"):
        one_hot_dna("AX")
    with pytest.raises(ValueError, match=r"unknown must be one of \['zero', 'error'\], got 'skip'"):
        one_hot_dna("A", unknown="skip")


def test_reverse_complement_by_hand():
    assert torch.equal(reverse_complement(one_hot_dna("AACGTN")), one_hot_dna("NACGTT"))
    assert torch.equal(reverse_complement(one_hot_dna("GATTACA")), one_hot_dna("TGTAATC"))
    x = one_hot_dna("ACGGTCAT")
    assert torch.equal(reverse_complement(reverse_complement(x)), x)


def test_random_crops_and_dna_views():
    x = one_hot_dna("ACGTACGTAC")
    crop = random_crop(x, 4, torch.Generator().manual_seed(0))
    starts = [s for s in range(7) if torch.equal(x[s : s + 4], crop)]
    assert crop.shape == (4, 4) and starts
    with pytest.raises(ValueError, match="a sequence of length 10 is shorter than the crop length 12"):
        random_crop(x, 12)
    ds = Dataset.from_dict({"sequence": ["ACGTTGCAAC" * 3, "GGGAAATTTC" * 3]}).with_transform(DNAViews(20))
    row = ds[:2]
    assert row["dna_one_hot"][0].shape == row["dna_one_hot_2"][0].shape == (20, 4)
    seq = "ACGTTGCAAC" * 3
    windows = [one_hot_dna(seq[s : s + 20]) for s in range(11)]
    assert any(torch.equal(reverse_complement(row["dna_one_hot_2"][0]), w) for w in windows)


@pytest.fixture
def tokenizer(tmp_path):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "a"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab))
    return BertTokenizerFast(vocab=str(tmp_path / "vocab.txt"))


def test_text_views_tokenise_and_two_dropout_passes_differ(tokenizer):
    ds = Dataset.from_dict({"text": ["the cat sat", "a cat sat on the mat the mat"]})
    rows = ds.with_transform(TextViews(tokenizer, max_length=6))[:2]
    ids = torch.stack(rows["input_ids"])
    assert ids.shape == (2, 6)
    assert ids[0].tolist() == [2, 5, 6, 7, 3, 0] and rows["attention_mask"][0].tolist() == [1, 1, 1, 1, 1, 0]
    assert ids[1, -1].item() == 3  # truncated to max_length, still ends with [SEP]
    bert = BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=32, hidden_dropout_prob=0.3)
    model = InSubForPreTraining(InSubConfig(encoder_config=bert, num_heads=2, head_hidden_sizes=[8]))
    out = model(input_ids=ids, attention_mask=torch.stack(rows["attention_mask"]))
    view1, view2 = out.representation
    assert not torch.allclose(view1, view2)
    with pytest.raises(ValueError, match=r"text\[1\] is ''; every row needs a non-empty string"):
        Dataset.from_dict({"text": ["ok", ""]}).with_transform(TextViews(tokenizer))[:2]


def test_views_name_a_missing_column(tokenizer):
    from insub_hf.data import IMAGE_STATS, ImageViews, simclr_augmentation

    ds = Dataset.from_dict({"sentence": ["a cat"], "seq": ["ACGT"]})
    with pytest.raises(ValueError, match=r"no column 'text' \(text_column\); its columns are \['sentence', 'seq'\]"):
        ds.with_transform(TextViews(tokenizer))[:1]
    with pytest.raises(ValueError, match=r"no column 'sequence' \(sequence_column\)"):
        ds.with_transform(DNAViews(4))[:1]
    with pytest.raises(ValueError, match=r"no column 'image' \(image_column\)"):
        ds.with_transform(ImageViews(simclr_augmentation(32, *IMAGE_STATS["cifar10"])))[:1]

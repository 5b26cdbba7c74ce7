import numpy as np
import pytest
import torch
from sklearn.neighbors import KNeighborsClassifier

from insub_hf import knn_accuracy
from insub_hf.evaluation import knn_predict


def test_knn_matches_scikit_learn_cosine_majority_vote():
    g = torch.Generator().manual_seed(0)
    train, test = torch.randn(200, 8, generator=g), torch.randn(50, 8, generator=g)
    labels = torch.randint(0, 4, (200,), generator=g)
    test_labels = torch.randint(0, 4, (50,), generator=g)
    for k in (1, 5, 20):
        ours = knn_predict(train, labels, test, k=k, chunk_size=16)
        ref = KNeighborsClassifier(n_neighbors=k, metric="cosine", algorithm="brute").fit(train.numpy(), labels.numpy())
        assert ours.tolist() == ref.predict(test.numpy()).tolist()
        expected = float(np.mean(ref.predict(test.numpy()) == test_labels.numpy()))
        assert knn_accuracy(train, labels, test, test_labels, k=k) == pytest.approx(expected)


def test_knn_hand_worked_example_and_ties():
    train = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    labels = torch.tensor([0, 0, 1, 1])
    assert knn_predict(train, labels, torch.tensor([[1.0, 0.05], [0.05, 1.0]]), k=1).tolist() == [0, 1]
    # k=4 over two classes with two votes each: the tie goes to the smaller label
    assert knn_predict(train, labels, torch.tensor([[0.0, 1.0]]), k=4).tolist() == [0]
    with pytest.raises(ValueError, match="train_features has 4 rows but train_labels 3"):
        knn_predict(train, labels[:3], train)
    with pytest.raises(ValueError, match="k must be an integer >= 1, got 0"):
        knn_predict(train, labels, train, k=0)


def test_extract_representations_reads_the_frozen_encoder_and_restores_the_mode():
    from datasets import Dataset

    from insub_hf import InSubForPreTraining, extract_representations

    from ..conftest import tiny_config

    model = InSubForPreTraining(tiny_config()).train()
    x = torch.randn(5, 3, 32, 32)
    ds = Dataset.from_dict({"pixel_values": x.numpy(), "labels": [0, 1, 2, 3, 4]}).with_format("torch")
    features, labels = extract_representations(model, ds, batch_size=2)
    assert model.insub.training  # back in training mode
    model.eval()
    with torch.no_grad():
        expected = model.insub.get_representation(pixel_values=x)
    torch.testing.assert_close(features, expected)
    assert labels.tolist() == [0, 1, 2, 3, 4]

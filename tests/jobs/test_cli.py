import json

import pytest
import torch

from insub_hf import InSubForPreTraining
from insub_hf.cli import main


def test_help_and_unknown_command(capsys):
    assert main(["--help"]) == 0
    assert "demo" in capsys.readouterr().out
    assert main(["train-everything"]) == 2


@pytest.mark.slow
def test_demo_end_to_end_on_a_tiny_budget(tmp_path, capsys):
    out = tmp_path / "demo"
    code = main([
        "demo", "--output_dir", str(out), "--data_source", "bundled", "--train_per_class", "8",
        "--test_per_class", "4", "--epochs", "2", "--batch_size", "16", "--hidden_size", "16", "--num_layers", "1",
        "--head_hidden_size", "32", "--num_heads", "3", "--knn_k", "3",
    ])
    assert code == 0
    printed = capsys.readouterr().out
    assert "[baseline] epoch 2 | ssl" in printed and "[insub_m3] epoch 2 | ssl" in printed and "k-NN acc" in printed
    results = json.loads((out / "results.json").read_text())
    baseline, insub = results["runs"]
    assert len(baseline["history"]) == len(insub["history"]) == 2
    assert baseline["history"][-1]["mean_sigma"] == 0.0 and baseline["history"][-1]["diversity_loss"] == 0.0
    assert insub["history"][-1]["mean_sigma"] > 0.0
    assert all(0.0 <= row["knn_accuracy"] <= 1.0 for row in baseline["history"] + insub["history"])
    model = InSubForPreTraining.from_pretrained(out / "insub_m3" / "model")
    assert model.config.num_heads == 3
    assert InSubForPreTraining.from_pretrained(out / "baseline" / "model").config.num_heads == 1
    assert torch.isfinite(model(torch.randn(2, 1, 28, 28), torch.randn(2, 1, 28, 28)).loss)
    assert any((out / "baseline").glob("checkpoint-*/model.safetensors"))  # resumable Trainer checkpoint

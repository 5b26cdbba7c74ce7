"""Running a model card's code snippets as a Hub user would: in a fresh process without insub-hf, against a Hub on
127.0.0.1 (`tests/hub_server.py`) that holds the repo the card names, each ```python block as written, in its own
namespace. `your_image.png`, which the image cards open, is a 28x28 grey image in the working folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

RUN_SNIPPETS = """
import re, sys
sys.modules["insub_hf"] = None  # a Hub user: the card's snippets need no insub-hf
import numpy as np
import torch
from huggingface_hub import hf_hub_download
from PIL import Image

repo_id = sys.argv[1]
card = open(hf_hub_download(repo_id, "README.md")).read()
snippets = re.findall(r"```python\\n(.*?)```", card, flags=re.S)
Image.fromarray(np.random.default_rng(0).integers(0, 256, (28, 28), dtype=np.uint8)).save("your_image.png")
outputs = {}
for number, snippet in enumerate(snippets):
    scope = {}
    exec(compile(snippet, f"snippet {number}", "exec"), scope)
    outputs.update({f"{number}:{k}": v for k, v in scope.items() if isinstance(v, torch.Tensor)})
    # a processor's or tokenizer's batch (`inputs = processor(...)`): its tensors under their own names
    for batch in [v for k, v in scope.items() if k == "inputs" and hasattr(v, "items")]:
        outputs.update({f"{number}:{k}": v for k, v in batch.items() if isinstance(v, torch.Tensor)})
torch.save(outputs, sys.argv[2])
print(len(snippets), "snippets ran")
"""


def run_card_snippets(repo_id: str, endpoint: str, workdir: Path) -> dict[str, torch.Tensor]:
    """Runs every snippet of the card of `repo_id` on the Hub at `endpoint`; returns the tensors each left (and those
    of its `inputs` batch), keyed `"<snippet number>:<name>"`. Fails the test with the process's error output when a snippet fails."""
    env = {**os.environ, "HF_ENDPOINT": endpoint, "HF_HOME": str(workdir / "hf-home"), "HF_HUB_OFFLINE": "0"}
    result = subprocess.run([sys.executable, "-c", RUN_SNIPPETS, repo_id, str(workdir / "outputs.pt")], cwd=workdir,
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return torch.load(workdir / "outputs.pt")

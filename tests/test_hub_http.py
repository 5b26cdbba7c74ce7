"""The Hub path over real HTTP: the package's push (`push_model_to_hub`, the real `huggingface_hub` client) sends an
image model and a text model to a Hub-compatible server on 127.0.0.1 (`tests/hub_server.py`), and a fresh process
without insub-hf loads them by repo id: `AutoModel` and `AutoImageProcessor` with `trust_remote_code=True`,
`pipeline("image-feature-extraction")`, and `SentenceTransformer(repo_id, trust_remote_code=True)`."""

import os
import subprocess
import sys

import pytest

from .hub_server import LocalHub

pytestmark = pytest.mark.slow

SENTENCES = ["The car drove itself.", "I would never ride in one!"]

PUSH = """
import sys
import torch
from transformers import AutoTokenizer
from insub_hf import InSubConfig, InSubImageProcessor, InSubModel
from insub_hf.encoders.presets import named_encoder
from insub_hf.hub import push_model_to_hub
from insub_hf.hub.model_card import HubCard
from insub_hf.encoders.pretrained import packaged_minilm_path
from insub_hf.model.sentence_embeddings import InSubSentenceEncoder

torch.manual_seed(0)
image = InSubModel(InSubConfig(encoder_config=named_encoder("resnet18_cifar", 28, 1, 0.0625), num_heads=2,
                               head_hidden_sizes=[8], head_output_size=4, uncertainty={"direction": -1})).eval()
processor = InSubImageProcessor.for_images(28, 1, (0.5,), (0.25,))
bert = dict(model_type="bert", vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=64)
text = InSubModel(InSubConfig(encoder_config=bert, objective="scd", num_heads=3, head_hidden_sizes=[24, 24],
                              head_output_size=24, normalize_heads=False, pooling="mean",
                              uncertainty={"direction": 1})).eval()
tokenizer = AutoTokenizer.from_pretrained(packaged_minilm_path())
image.fit_uncertainty({"pixel_values": torch.randn(60, 1, 28, 28, generator=torch.Generator().manual_seed(1))}, k=5)
for model, repo_id, card in ((image, "someone/tiny-image", HubCard(processor=processor)),
                             (text, "someone/tiny-text", HubCard(tokenizer=tokenizer))):
    commit = push_model_to_hub(model, repo_id, card, token="hf_test")
    assert commit.commit_url.endswith(commit.oid), commit
pixels = torch.randint(0, 256, (2, 1, 28, 28), dtype=torch.uint8)
with torch.no_grad():
    out = image(**processor(pixels, return_tensors="pt"))
sentences = SENTENCES
encoded = InSubSentenceEncoder(text, tokenizer).encode(sentences)
torch.save({"pixels": pixels, "mean_embedding": out.mean_embedding, "uncertainty": out.uncertainty,
            "representation": out.representation,
            "embeddings": torch.nn.functional.normalize(encoded.embeddings, dim=-1),
            "sentence_spread": encoded.head_spread}, sys.argv[1])
assert out.uncertainty is not None and encoded.uncertainty is None  # the image model is fitted, the text one not
print("pushed")
"""

LOAD = """
import sys
sys.modules["insub_hf"] = None  # a user without insub-hf, loading by repo id
import torch
from PIL import Image
from sentence_transformers import SentenceTransformer
from transformers import AutoImageProcessor, AutoModel, pipeline

expected = torch.load(sys.argv[1])
model = AutoModel.from_pretrained("someone/tiny-image", trust_remote_code=True).eval()
processor = AutoImageProcessor.from_pretrained("someone/tiny-image", trust_remote_code=True)
assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
with torch.no_grad():
    out = model(**processor(expected["pixels"], return_tensors="pt"))
for key in ("mean_embedding", "uncertainty", "representation"):
    torch.testing.assert_close(getattr(out, key), expected[key], rtol=1e-5, atol=1e-6)
extractor = pipeline("image-feature-extraction", model="someone/tiny-image", trust_remote_code=True)
features = torch.tensor(extractor(Image.fromarray(expected["pixels"][0, 0].numpy())))
torch.testing.assert_close(features[0], expected["representation"][0], rtol=1e-4, atol=1e-5)
st = SentenceTransformer("someone/tiny-text", trust_remote_code=True)
sentences = SENTENCES
torch.testing.assert_close(torch.as_tensor(st.encode(sentences)), expected["embeddings"], rtol=1e-4, atol=1e-5)
spread = torch.stack(st.encode(sentences, output_value="head_spread"))
torch.testing.assert_close(spread, expected["sentence_spread"], rtol=1e-4, atol=1e-6)
assert not any(m == "insub_hf" or m.startswith("insub_hf.") for m in sys.modules if sys.modules[m] is not None)
print("loaded")
"""


def test_push_then_load_by_repo_id_over_http_in_a_fresh_process_without_the_package(tmp_path):
    pytest.importorskip("sentence_transformers")
    with LocalHub() as hub:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        env.update(HF_ENDPOINT=hub.endpoint, HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_TELEMETRY="1",
                   HF_HUB_DISABLE_XET="1")
        expected = str(tmp_path / "expected.pt")
        pushed = subprocess.run([sys.executable, "-c", f"SENTENCES = {SENTENCES!r}\n" + PUSH, expected], env=env,
                                capture_output=True, text=True, timeout=300)
        assert "pushed" in pushed.stdout, pushed.stderr[-3000:]
        assert {"someone/tiny-image", "someone/tiny-text"} <= set(hub.repos)
        _, files = hub.repos["someone/tiny-text"]
        assert {"modules.json", "model.safetensors", "README.md", "tokenizer.json"} <= set(files)
        loaded = subprocess.run([sys.executable, "-c", f"SENTENCES = {SENTENCES!r}\n" + LOAD, expected], env=env,
                                capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert "loaded" in loaded.stdout, loaded.stderr[-4000:]
        # the download went over HTTP, by commit
        assert any(method == "GET" and "/someone/tiny-text/resolve/" in path for method, path in hub.requests)

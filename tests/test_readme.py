"""The README's quickstart and docs/usage.md's "Using a checkpoint" snippets, run as written in a fresh process on tiny
checkpoints laid out where the snippets look for them (the fine-tuning runs 2 steps instead of its budget)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from insub_hf import InSubConfig, InSubForPreTraining, InSubModel
from insub_hf.checkpointing import save_pretrained_atomic
from insub_hf.encoders.presets import named_encoder
from insub_hf.data import IMAGE_DATASET_PRESETS
from insub_hf.encoders.pretrained import packaged_minilm_path

from .objectives.test_scd import tiny_bert_config

ROOT = Path(__file__).resolve().parents[1]
README, USAGE = ROOT / "README.md", ROOT / "docs" / "usage.md"
# what the test budget changes in the snippets: (as written, as run)
BUDGET = [("num_train_epochs=3,", "max_steps=2,"), ("max_steps=100,", "max_steps=2,")]
QUICKSTART_CHECKS = """
assert out.representation.shape[0] == 8 and out.uncertainty.shape == (8,) and out.uncertainty.isfinite().all()
assert ood.shape == (8,) and (ood >= 0).all()
assert classifier.config.num_labels == 10 and 0 <= float(accuracy) <= 1
assert fitted.components[0] == "knn" and model.config.uncertainty["bank_size"] == 1000
print("README quickstart OK")
"""
CHECKS = """
assert features.shape[0] == 8 and uncertainty.shape == (8,) and ((uncertainty >= 0) & (uncertainty <= 1)).all()
assert len(embeddings) == 8 and torch.allclose(torch.tensor(embeddings[0][0]), features[0], atol=1e-4)
assert scores["knn"].shape == (8,) and (scores["knn"] >= 0).all()
assert len(top3) == 3 and {t["label"] for t in top3} <= set(names)
assert disagreement.shape == (8,) and (disagreement >= 0).all()
assert sentence_embeddings.shape == (2, 32)
assert len(sentence_uncertainty) == 2 and all(0 <= float(u) <= 1 for u in sentence_uncertainty)
print("README snippets OK")
"""


FINETUNING_CHECKS = """
assert tag_probabilities.shape == (4, 4) and tag_disagreement.shape == (4,) and (tag_disagreement >= 0).all()
assert prediction.shape == (4,) and (variance >= 0).all() and variance.max() > 0
assert retagger.config.num_labels == 6 and retagger.classifier.sizes[-1] == 6
trainable = [n for n, p in lora.named_parameters() if p.requires_grad]
assert any("lora_" in n for n in trainable) and all("lora_" in n or "classifier" in n for n in trainable)
assert (Path("runs/text/lora") / "adapter_model.safetensors").is_file()
print("fine-tuning snippets OK")
"""


def section(path: Path, title: str) -> str:
    text = path.read_text()
    start = text.index(f"## {title}\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def snippets(path: Path, title: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", section(path, title), flags=re.S)


def test_the_readme_is_short_and_starts_with_the_quickstart():
    text = README.read_text()
    assert len(text.splitlines()) <= 130
    assert len(re.findall(r"(?<![\w.])\d+(?:[.,]\d+)*", text)) <= 60  # the numbers live in docs/evidence.md
    assert not re.findall(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b", text)  # nor do commits
    first_code = text.splitlines().index("```python")
    assert first_code < 30
    prose = re.sub(r"^\|.*\|$|^#.*$", "", re.sub(r"```.*?```", "", text, flags=re.S), flags=re.M)
    words = sorted(len(s.split()) for s in re.split(r"(?<=[.!?:])\s+|\n\n", prose) if len(s.split()) > 2)
    assert words[len(words) // 2] <= 22, words
    assert re.findall(r"^## .*", text, flags=re.M)[:2] == ["## Quickstart", "## Two commands"]
    code = "\n".join(snippets(README, "Quickstart"))
    for needed in ("trust_remote_code=True", "out.uncertainty", "InSubOODDetector(model).score",
                   "Trainer("):
        assert needed in code, needed


def test_the_usage_page_has_each_use_the_issue_names():
    code = "\n".join(snippets(USAGE, "Using a checkpoint"))
    for needed in ('pipeline("image-feature-extraction"', 'pipeline("image-classification"', "Trainer(",
                   "fit_uncertainty(", "InSubOODDetector(model).score", "SentenceTransformer(", 'output_value="uncertainty"', "mutual_information"):
        assert needed in code, needed
    assert BUDGET[0][0] in code and BUDGET[1][0] in "\n".join(snippets(README, "Quickstart"))


def run_as_written(code: str, cwd: Path, checks: str, ok: str, budget: bool = True) -> list[str]:
    """Runs `code` (its training cut to the test budget unless `budget` is False), then `checks`; its stdout lines."""
    for written, run in BUDGET if budget else ():
        code = code.replace(written, run)
    run = subprocess.run([sys.executable, "-c", code + checks], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and ok in run.stdout, run.stderr[-4000:]
    return run.stdout.splitlines()


# A printed number the docs quote may differ by this much from what a run prints on another machine (the same seeds:
# only float rounding moves it; a percentage in points, any other number relative)
PRINTED_TOLERANCE = 2.0
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def quoted_prints(code: str) -> list[str]:
    """The output a snippet quotes: the comment line right under each line that prints."""
    lines = code.splitlines()
    return [lines[i + 1].removeprefix("# ") for i, line in enumerate(lines[:-1])
            if line.lstrip().startswith("print(") and lines[i + 1].startswith("# ")]


def printed_mismatches(quoted: list[str], printed: list[str]) -> list[str]:
    """'quoted X, printed Y' for each quoted line whose numbers differ by more than `PRINTED_TOLERANCE` (points for
    a percentage, else relative) from the next printed line of the same words (other lines, such as the Trainer's
    logs, are passed over), or 'quoted X, not printed' when no such line follows."""
    wrong, rest = [], iter(printed)
    for want in quoted:
        got = next((line for line in rest if NUMBER.sub("#", line) == NUMBER.sub("#", want)), None)
        if got is None:
            wrong.append(f"quoted {want!r}, not printed")
            continue
        limit = [PRINTED_TOLERANCE if want.endswith("%") else PRINTED_TOLERANCE / 100 * abs(float(a))
                 for a in NUMBER.findall(want)]
        if any(abs(float(a) - float(b)) > t for a, b, t in zip(NUMBER.findall(want), NUMBER.findall(got), limit)):
            wrong.append(f"quoted {want!r}, printed {got!r}")
    return wrong


def test_the_printed_number_check_finds_a_changed_number_and_word():
    quoted = quoted_prints("print(a)\n# 77.2%\nx = 1\nprint(b)\n# ['knn', 'spread']\n")
    assert quoted == ["77.2%", "['knn', 'spread']"]
    assert printed_mismatches(quoted, ["{'loss': 2.1}", "78.9%", "['knn', 'spread']"]) == []
    assert printed_mismatches(quoted, ["79.3%", "['knn']"]) == ["quoted '77.2%', printed '79.3%'",
                                                               "quoted \"['knn', 'spread']\", not printed"]


def save_demo_checkpoint(folder: Path) -> None:
    """A tiny image checkpoint where the demo writes its InSub model (5 heads, 1 grey channel, 28x28), its
    uncertainty fitted as the demo fits it."""
    from insub_hf.data import load_fashion_mnist

    torch.manual_seed(0)
    config = InSubConfig(encoder_config=named_encoder("resnet18_cifar", 28, 1, 0.0625), num_heads=5,
                         head_hidden_sizes=[16], head_output_size=8)
    model, processor = InSubForPreTraining(config), IMAGE_DATASET_PRESETS["fashion_mnist"].image_processor()
    images = list(load_fashion_mnist("bundled", train_per_class=30)["train"]["image"])
    model.insub.fit_uncertainty(processor(images, return_tensors="pt"))
    save_pretrained_atomic(model, folder / "runs/demo/insub_m5/model", processor=processor)


def save_text_checkpoint(folder: Path) -> None:
    """A tiny text model where `insub-hf text` writes its InSub model, fitted on sentences as the job fits it."""
    tokenizer = AutoTokenizer.from_pretrained(packaged_minilm_path())
    text_model = InSubModel(tiny_bert_config(num_heads=3))
    words = "the a cat dog sat ran on under mat tree today quickly".split()
    rng = torch.Generator().manual_seed(0)
    lengths = torch.randint(2, 40, (80,), generator=rng).tolist()  # the token counts the docs' sentences have
    sentences = [" ".join(words[i] for i in torch.randint(0, len(words), (n,), generator=rng)) for n in lengths]
    text_model.fit_uncertainty(tokenizer(sentences, padding=True, return_tensors="pt"))
    save_pretrained_atomic(text_model, folder / "runs/text/scd_insub_m3/model", processor=tokenizer)


@pytest.mark.slow
def test_the_quickstart_runs_as_written_on_the_released_model(tmp_path):
    released = ROOT / "model_cards" / "insub-resnet10-fashion-mnist"
    if not (released / "model.safetensors").is_file():
        pytest.fail(f"{released} holds no released model")
    (tmp_path / "model_cards").mkdir()
    (tmp_path / "model_cards" / released.name).symlink_to(released)  # a clone's layout, read only
    code = "\n".join(snippets(README, "Quickstart"))
    printed = run_as_written(code, tmp_path, QUICKSTART_CHECKS, "README quickstart OK", budget=False)
    quoted = quoted_prints(code)
    assert len(quoted) == 3 and printed_mismatches(quoted, printed) == []
    assert (tmp_path / "runs/ft").is_dir()


@pytest.mark.slow
def test_using_a_checkpoint_runs_as_written(tmp_path):
    save_demo_checkpoint(tmp_path)
    save_text_checkpoint(tmp_path)
    run_as_written("\n".join(snippets(USAGE, "Using a checkpoint")), tmp_path, CHECKS, "README snippets OK")
    assert '"bank_size": 3000' in (tmp_path / "runs/demo/insub_m5/model/config.json").read_text()
    assert (tmp_path / "runs/finetune/model/preprocessor_config.json").is_file()


@pytest.mark.slow
def test_the_fine_tuning_section_runs_as_written(tmp_path):
    pytest.importorskip("peft")
    save_demo_checkpoint(tmp_path)
    text_model = InSubModel(tiny_bert_config(num_heads=3))
    save_pretrained_atomic(text_model, tmp_path / "runs/text/scd_insub_m3/model",
                           processor=AutoTokenizer.from_pretrained(packaged_minilm_path()))
    code = "from pathlib import Path\n" + "\n".join(snippets(USAGE, "Fine-tuning: new labels, multi-label, regression, LoRA"))
    run_as_written(code, tmp_path, FINETUNING_CHECKS, "fine-tuning snippets OK")


def test_the_released_models_table_links_cards_that_exist():
    from huggingface_hub import ModelCard

    section = README.read_text().split("## Released models", 1)[1].split("\n## ", 1)[0]
    links = re.findall(r"\]\((model_cards/[^)]+/README\.md)\)", section)
    assert links, "the README's Released models table links no card"
    for link in links:
        card = ModelCard.load(ROOT / link)  # the YAML header parses
        assert card.data.eval_results, link  # and carries the run's numbers
        assert "Made by `insub-hf release " in card.text, link  # and the command that reproduces it


@pytest.mark.slow
def test_the_usage_page_opens_with_code_that_runs_and_prints_what_it_says(tmp_path):
    text = USAGE.read_text()
    first = text.splitlines().index("```python")
    assert first < 30
    code = re.findall(r"```python\n(.*?)```", text, flags=re.S)[0]
    printed = re.findall(r"^# (.*)$", code, flags=re.M)[-1]  # the line under the print
    (tmp_path / "model_cards").mkdir()
    released = ROOT / "model_cards" / "insub-resnet10-fashion-mnist"
    (tmp_path / "model_cards" / released.name).symlink_to(released)
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.stdout.strip().splitlines()[-1] == printed


@pytest.mark.slow
def test_acting_on_the_uncertainty_runs_as_written_and_prints_what_it_quotes(tmp_path):
    (tmp_path / "model_cards").mkdir()
    released = ROOT / "model_cards" / "insub-resnet10-fashion-mnist"
    (tmp_path / "model_cards" / released.name).symlink_to(released)
    code = "\n".join(snippets(USAGE, "Acting on the uncertainty"))
    printed = run_as_written(code, tmp_path, "\nprint('acting OK')\n", "acting OK", budget=False)
    quoted = quoted_prints(code)
    assert len(quoted) == 3 and printed_mismatches(quoted, printed) == []


# The sections whose Python the tests above run as written (path, section title; None: the page's first block)
RUN_SECTIONS = [(README, "Quickstart"), (USAGE, "Using a checkpoint"),
                (USAGE, "Fine-tuning: new labels, multi-label, regression, LoRA"), (USAGE, "Building and training a model"),
                (USAGE, "Acting on the uncertainty")]
NOT_RUN = re.compile(r"<!-- not run: [^>]+ -->\n```python\n")


def test_every_python_block_of_the_docs_is_run_or_says_why_not():
    run = {block for path, title in RUN_SECTIONS for block in snippets(path, title)}
    run.add(re.findall(r"```python\n(.*?)```", USAGE.read_text(), flags=re.S)[0])
    left = []
    for doc in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        marked = {m.end() for m in NOT_RUN.finditer(text)}
        for match in re.finditer(r"```python\n(.*?)```", text, flags=re.S):
            if match.group(1) not in run and match.start(1) not in marked:
                left.append(f"{doc.name}: {match.group(1).splitlines()[0]}")
    assert left == []


def test_building_a_model_runs_as_written(tmp_path):
    code = "\n".join(snippets(USAGE, "Building and training a model"))
    checks = "\nassert out.loss.isfinite() and base.config.num_heads == 5\nprint('building OK')\n"
    run_as_written(code, tmp_path, checks, "building OK")

"""An InSub text model as a sentence-transformers model: saved with its own module, loaded in a fresh process with
`SentenceTransformer(path, trust_remote_code=True)`, embeddings equal to `InSubSentenceEncoder`'s, uncertainty one call
away."""

import copy
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from huggingface_hub import ModelCard
from transformers import AutoTokenizer

from insub_hf import InSubModel
from insub_hf.encoders.pretrained import packaged_minilm_path
from insub_hf.model.sentence_embeddings import InSubSentenceEncoder

from .objectives.test_scd import tiny_bert_config

pytest.importorskip("sentence_transformers")

SENTENCES = ["The car drove itself.", "I would never ride in one!", "A much longer sentence " * 4]


WORDS = "the a cat dog sat ran on far and mat sun rain car road we they saw it".split()


def made_sentences(lengths: list[int], seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, n)) for n in lengths]


@pytest.fixture(scope="module")
def encoder():
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(packaged_minilm_path())
    # its spread read in a fixed direction, and its calibrated `uncertainty` fitted on sentences of every length it
    # reads here (1 word to past the 64 positions), so that every path has a number to compare
    model = InSubModel(tiny_bert_config(num_heads=3, uncertainty={"direction": 1})).eval()
    rng = np.random.default_rng(0)
    calibration = made_sentences([1, 80] + rng.integers(3, 70, 38).tolist(), seed=1)
    model.fit_uncertainty(made_sentences(rng.integers(3, 70, 60).tolist(), seed=2), calibration, k=5,
                          processor=tokenizer)
    assert model.config.uncertainty["length_range"] == [3, 64]
    return InSubSentenceEncoder(model, tokenizer)


def test_max_length_follows_the_base_model(encoder):
    # the tokenizer's 512 capped by the tiny encoder's 64 position embeddings
    assert encoder.tokenize.max_length == min(encoder.tokenizer.model_max_length, 64) == 64


def test_a_saved_sentence_transformer_loads_in_a_fresh_process_and_matches_the_encoder(tmp_path, encoder):
    expected = encoder.encode(SENTENCES)
    path = encoder.save_sentence_transformer(tmp_path / "st")
    modules = json.loads((path / "modules.json").read_text())
    assert modules == [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformer_module.InSubSentenceTransformer"},
        {"idx": 1, "name": "1", "path": "1_Normalize", "type": "sentence_transformers.base.modules.normalize.Normalize"},
    ]  # sentence-transformers' own Normalize: unit embeddings, as the MiniLM base model's
    assert (path / "sentence_transformer_module.py").is_file() and (path / "modeling_insub.py").is_file()
    # the module imports no reading of its own: the model reads it (one bundle of model code, and the pipeline
    # file that refuses the image tasks)
    assert sorted(p.name for p in path.glob("*.py")) == ["configuration_insub.py", "modeling_insub.py",
                                                          "pipeline_insub.py", "sentence_transformer_module.py"]
    card = ModelCard.load(path / "README.md")  # the InSub card, not sentence-transformers' generic one
    assert card.data.library_name == "sentence-transformers" and "InSub" in card.text
    assert 'SentenceTransformer("st", trust_remote_code=True)' in card.text
    code = f"""
import json, sys
sys.modules["insub_hf"] = None  # the folder must load without insub-hf
from sentence_transformers import SentenceTransformer
model = SentenceTransformer({str(path)!r}, trust_remote_code=True)
sentences = {SENTENCES!r}
embeddings = model.encode(sentences)
uncertainty = [float(u) for u in model.encode(sentences, output_value="uncertainty")]
# the same folder through transformers alone: the encoder's representation, before the normalisation
from transformers import AutoModel, AutoTokenizer
auto = AutoModel.from_pretrained({str(path)!r}, trust_remote_code=True).eval()
tokens = AutoTokenizer.from_pretrained({str(path)!r}, trust_remote_code=True)(sentences, padding=True,
                                                                              return_tensors="pt")
representation = auto(**tokens).representation.tolist()
print(json.dumps({{"embeddings": embeddings.tolist(), "uncertainty": uncertainty, "representation": representation,
                  "max_seq_length": model.max_seq_length}}))
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={
        "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
    })
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    unit = torch.nn.functional.normalize(expected.embeddings, dim=-1)
    torch.testing.assert_close(torch.tensor(out["embeddings"]), unit, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(torch.tensor(out["embeddings"]).norm(dim=-1), torch.ones(3), rtol=0, atol=1e-5)
    torch.testing.assert_close(torch.tensor(out["representation"]), expected.embeddings, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(torch.tensor(out["uncertainty"]), expected.uncertainty, rtol=1e-4, atol=1e-6)
    assert out["max_seq_length"] == 64


def test_the_module_round_trips_through_save_and_load(tmp_path, encoder):
    from sentence_transformers import SentenceTransformer

    path = encoder.save_sentence_transformer(tmp_path / "st")
    first = SentenceTransformer(str(path), trust_remote_code=True)
    first.save(str(tmp_path / "again"))
    second = SentenceTransformer(str(tmp_path / "again"), trust_remote_code=True)
    torch.testing.assert_close(
        torch.as_tensor(second.encode(SENTENCES)), torch.as_tensor(first.encode(SENTENCES)), rtol=0, atol=0
    )
    features = second.encode(SENTENCES[:1], output_value=None)[0]
    assert features["head_embeddings"].shape == (3, 24) and features["uncertainty"].ndim == 0
    assert 0 <= float(features["uncertainty"]) <= 1 and "knn_distance" in features  # calibrated: it holds a bank


def test_saves_into_a_run_folder_keep_its_results_and_models(tmp_path, encoder):
    run = tmp_path / "run"
    (run / "insub_m3" / "model").mkdir(parents=True)
    (run / "results.json").write_text('{"rows": []}')
    (run / "insub_m3" / "model" / "config.json").write_text("{}")
    (run / "notes.txt").write_text("kept")
    encoder.save_sentence_transformer(run)
    encoder.save_pretrained(run)
    assert (run / "results.json").read_text() == '{"rows": []}' and (run / "notes.txt").read_text() == "kept"
    assert (run / "insub_m3" / "model" / "config.json").read_text() == "{}"
    assert (run / "modules.json").is_file() and (run / "model.safetensors").is_file()


BANK = ["A dog runs in the park.", "Stocks fell sharply today.", "I love this song so much!", "Rain again, ugh.",
        "The meeting is at noon.", "What a great game last night", "def main(): return 0", "Bonjour tout le monde"]


def test_a_folder_with_the_knn_reading_gives_knn_distance_to_the_kth_nearest_bank_sentence(tmp_path, encoder):
    from sentence_transformers import SentenceTransformer
    from sklearn.neighbors import NearestNeighbors

    bank = torch.nn.functional.normalize(encoder.encode(BANK).embeddings, dim=1)
    path = encoder.save_sentence_transformer(tmp_path / "st", uncertainty={"reading": "knn", "k": 3, "bank": bank})
    assert len(json.loads((path / "modules.json").read_text())) == 2  # the bank is the model's: no module
    assert encoder.model.config.uncertainty["reading"] == "calibrated"  # the caller's model is left as it was
    model = SentenceTransformer(str(path), trust_remote_code=True)
    got = torch.stack(model.encode(SENTENCES, output_value="knn_distance"))
    with pytest.raises(KeyError, match="uncertainty is not fitted yet"):  # the bank replaced the calibrated fit
        model.encode(SENTENCES, output_value="uncertainty")
    queries = torch.nn.functional.normalize(encoder.encode(SENTENCES).embeddings, dim=1)
    distances, _ = NearestNeighbors(n_neighbors=3, metric="cosine").fit(bank.numpy()).kneighbors(queries.numpy())
    torch.testing.assert_close(got.double(), torch.as_tensor(distances[:, -1], dtype=torch.float64), rtol=1e-4, atol=1e-5)
    features = model.encode(SENTENCES, output_value=None)  # the heads' spread stays, under its own name
    torch.testing.assert_close(torch.stack([f["head_spread"] for f in features]), encoder.encode(SENTENCES).head_spread,
                               rtol=1e-4, atol=1e-6)
    # one `knn_distance`: AutoModel on the same folder gives the same number
    from transformers import AutoModel

    with torch.no_grad():
        auto = AutoModel.from_pretrained(path).eval()(**encoder.tokenizer(SENTENCES, padding=True, return_tensors="pt"))
    torch.testing.assert_close(auto.knn_distance, got, rtol=1e-5, atol=1e-6)
    assert auto.uncertainty is None


def test_a_folder_with_the_length_reading_records_its_buckets_and_serves_no_uncertainty(tmp_path, encoder):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    from insub_hf.uncertainty.length import standardise_by_length

    settings = {"reading": "spread_by_length", "length_edges": [8.0], "length_mean": [0.2, 0.3],
                "length_std": [0.5, 0.25], "direction": -1}
    path = encoder.save_sentence_transformer(tmp_path / "st", uncertainty=settings)
    assert len(json.loads((path / "modules.json").read_text())) == 2  # no module after Normalize
    assert encoder.model.config.uncertainty["reading"] == "calibrated"  # the caller's model is left as it was
    spread = encoder.encode(SENTENCES).head_spread
    lengths = [len(encoder.tokenizer(s)["input_ids"]) for s in SENTENCES]  # 7, 9 and 23 tokens: buckets 0, 1, 1
    assert lengths[0] < 8 <= lengths[1] and lengths[2] >= 8
    expected = torch.stack([-(spread[i] - (0.2 if n < 8 else 0.3)) / (0.5 if n < 8 else 0.25)
                            for i, n in enumerate(lengths)])
    # a single reading is never served as `uncertainty`: the folder records the buckets, and the standardised
    # spread is its `head_spread` read with them
    with pytest.raises(KeyError, match="uncertainty is not fitted yet"):
        SentenceTransformer(str(path), trust_remote_code=True).encode(SENTENCES, output_value="uncertainty")
    tokens = encoder.tokenizer(SENTENCES, padding=True, return_tensors="pt")
    loaded = AutoModel.from_pretrained(path).eval()
    with torch.no_grad():
        out = loaded(**tokens)
    assert out.uncertainty is None
    buckets = dict(loaded.config.uncertainty["length_buckets"])
    direction = buckets.pop("direction")
    torch.testing.assert_close(direction * standardise_by_length(out.head_spread, tokens["attention_mask"].sum(1),
                                                                 **buckets), expected, rtol=1e-4, atol=1e-5)
    card = (path / "README.md").read_text()
    assert "records the **spread of the heads within its sentence-length bucket**" in card


@pytest.mark.parametrize("settings, message", [
    ({"length_edges": [8.0], "length_mean": [0.2], "length_std": [0.5], "direction": 1},
     r"need one value per bucket \(2 for 1 edges\)"),
    ({"length_edges": [8.0], "length_mean": [0.2, 0.3], "length_std": [0.5, 0.0], "direction": 1},
     "positive deviations"),
    ({"length_edges": [], "length_mean": [0.2], "length_std": [0.5], "direction": 0}, r"\['direction'\]"),
    ({"length_edges": [], "length_mean": [0.2]}, "must be a dict with keys"),
])
def test_bad_length_settings_are_refused_naming_the_field(encoder, settings, message):
    model = copy.deepcopy(encoder.model)
    with pytest.raises(ValueError, match=r"uncertainty\['length_buckets'\].*" + message):
        model.set_length_buckets(settings)
    assert model.config.uncertainty == encoder.model.config.uncertainty  # nothing half-set


def test_length_standardisation_is_fitted_per_bucket():
    from insub_hf.uncertainty.length import fit_length_buckets, standardise_by_length

    lengths = torch.tensor([3, 3, 3, 10, 10, 10])
    spread = torch.tensor([1.0, 2.0, 3.0, 10.0, 20.0, 30.0])
    fitted = fit_length_buckets(spread, lengths, buckets=2)
    assert fitted["length_edges"] == [6.5] and fitted["length_mean"] == [2.0, 20.0]
    torch.testing.assert_close(torch.tensor(fitted["length_std"]), torch.tensor([1.0, 10.0]))
    torch.testing.assert_close(standardise_by_length(spread, lengths, **fitted),
                               torch.tensor([-1.0, 0.0, 1.0, -1.0, 0.0, 1.0]))


def test_an_unknown_reading_is_refused_naming_the_readings(encoder):
    from insub_hf import InSubConfig

    config = encoder.model.config.to_dict()
    with pytest.raises(ValueError, match=r"uncertainty\['reading'\] must be one of \['spread', 'spread_by_length', "
                                         r"'knn', 'calibrated'\], got 'entropy'"):
        InSubConfig(**{**config, "uncertainty": {"reading": "entropy"}})
    with pytest.raises(ValueError, match=r"uncertainty\['length_buckets'\] must be a dict with keys.*for the reading 'spread_by_length'"):
        InSubConfig(**{**config, "uncertainty": {"reading": "spread_by_length"}})  # without its settings


def test_the_length_reading_is_a_text_model_s():
    from insub_hf import InSubConfig

    with pytest.raises(ValueError, match="reads sentence lengths.*reads image"):
        InSubConfig(objective="simclr", uncertainty={"reading": "spread_by_length", "length_buckets": {
            "length_edges": [], "length_mean": [0.0], "length_std": [1.0], "direction": 1}})
    with pytest.raises(ValueError, match="reads sentence lengths.*reads image"):
        InSubModel(InSubConfig(objective="simclr")).set_length_buckets({})


@pytest.mark.parametrize("save", ["encoder", "model"])
def test_saving_retrained_weights_over_a_knn_folder_serves_the_new_weights_own_readings(tmp_path, encoder, save):
    from sentence_transformers import SentenceTransformer

    bank = torch.nn.functional.normalize(encoder.encode(BANK).embeddings, dim=1)
    folder = encoder.save_sentence_transformer(tmp_path / "model", uncertainty={"reading": "knn", "k": 3, "bank": bank})
    torch.manual_seed(1)
    retrained = InSubSentenceEncoder(InSubModel(tiny_bert_config(num_heads=3, uncertainty={"direction": 1})),
                                     encoder.tokenizer)
    if save == "encoder":  # atomic: through a sibling folder
        retrained.save_pretrained(folder)
    else:  # transformers' own save into the folder
        retrained.model.save_pretrained(folder)
    assert json.loads((folder / "config.json").read_text())["uncertainty"]["reading"] == "spread"
    # the new weights' own readings (the heads' spread), not distances to the old weights' bank
    st = SentenceTransformer(str(folder), trust_remote_code=True)
    features = st.encode(SENTENCES, output_value=None)
    assert not any("knn_distance" in f or "uncertainty" in f for f in features)
    served = torch.stack([f["head_spread"] for f in features])
    torch.testing.assert_close(served, retrained.encode(SENTENCES).head_spread, rtol=1e-4, atol=1e-6)


OWN = ["Quarterly revenue rose four percent.", "The board approved the merger.", "Shares closed higher on Friday.",
       "Analysts expect slower growth.", "The central bank held rates steady.", "Profits beat the forecasts."]


@pytest.mark.parametrize("reading", ["knn", "spread"])
def test_one_line_makes_the_uncertainty_relative_to_your_own_sentences_and_save_keeps_it(tmp_path, encoder, reading):
    from sentence_transformers import SentenceTransformer
    from sklearn.neighbors import NearestNeighbors

    shipped = {"reading": "knn", "k": 3, "bank": encoder.encode(BANK).embeddings} if reading == "knn" else {}
    folder = encoder.save_sentence_transformer(tmp_path / "shipped", uncertainty={"reading": "spread", **shipped})
    model = SentenceTransformer(str(folder), trust_remote_code=True)
    model[0].set_bank(model.encode(OWN, convert_to_tensor=True), k=2)  # the documented line
    got = torch.stack(model.encode(SENTENCES, output_value="knn_distance"))
    own = torch.nn.functional.normalize(encoder.encode(OWN).embeddings, dim=1)
    queries = torch.nn.functional.normalize(encoder.encode(SENTENCES).embeddings, dim=1)
    distances, _ = NearestNeighbors(n_neighbors=2, metric="cosine").fit(own.numpy()).kneighbors(queries.numpy())
    torch.testing.assert_close(got.double(), torch.as_tensor(distances[:, -1], dtype=torch.float64), rtol=1e-4,
                               atol=1e-5)
    model.save(str(tmp_path / "mine"))  # saved with the model, tied to its weights
    again = SentenceTransformer(str(tmp_path / "mine"), trust_remote_code=True)
    torch.testing.assert_close(torch.stack(again.encode(SENTENCES, output_value="knn_distance")), got)
    from transformers import AutoModel  # the same number through transformers alone

    with torch.no_grad():
        auto = AutoModel.from_pretrained(tmp_path / "mine").eval()(
            **encoder.tokenizer(SENTENCES, padding=True, return_tensors="pt"))
    torch.testing.assert_close(auto.knn_distance, got, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"set_bank: k=7 must be between 1 and the bank's 6 rows"):
        model[0].set_bank(model.encode(OWN, convert_to_tensor=True), k=7)
    with pytest.raises(ValueError, match=r"set_bank: representations must be \(N, \d+\)"):
        model[0].set_bank(torch.zeros(6, 5))


def test_a_long_sentence_reads_the_same_on_every_path_and_past_the_positions_is_refused_in_one_line(tmp_path, encoder):
    """The folder's tokenizer truncates where the model reads (its position embeddings, 64 here; sentence-transformers'
    max_seq_length), so the card's `tokenizer(..., truncation=True)` and sentence-transformers give one number; token
    ids past the positions are refused naming the way out, not in torch's words."""
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    folder = encoder.save_sentence_transformer(tmp_path / "st")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.model_max_length == 64
    long = ["word " * 200]  # 202 tokens before truncation
    st = SentenceTransformer(str(folder), trust_remote_code=True)
    model = AutoModel.from_pretrained(folder).eval()
    with torch.no_grad():
        auto = model(**tokenizer(long, padding=True, truncation=True, return_tensors="pt"))
    torch.testing.assert_close(auto.uncertainty, torch.stack(st.encode(long, output_value="uncertainty")),
                               rtol=1e-5, atol=1e-6)
    too_long = tokenizer(long, return_tensors="pt")  # untruncated: 202 token ids
    with pytest.raises(ValueError, match=r"input_ids has 202 tokens per row; this encoder reads at most 64 "
                                         r"\(max_position_embeddings\): tokenize with truncation=True"):
        model(**too_long)


def test_a_misspelt_output_value_and_a_generator_of_sentences_are_answered_in_words(tmp_path, encoder):
    from sentence_transformers import SentenceTransformer

    # a generator of sentences reads as the list it yields
    torch.testing.assert_close(encoder.encode(s for s in SENTENCES).embeddings, encoder.encode(SENTENCES).embeddings)
    with pytest.raises(ValueError, match="encode: got no sentences; give a list of non-empty strings"):
        encoder.encode(s for s in [])
    st = SentenceTransformer(str(encoder.save_sentence_transformer(tmp_path / "st")), trust_remote_code=True)
    with pytest.raises(KeyError, match=r"output_value='uncertanty' is not an output of this model; it gives \[.*"
                                       r"'head_spread'.*'sentence_embedding'.*'uncertainty'\]"):
        st.encode(SENTENCES, output_value="uncertanty")


@pytest.mark.parametrize("length", [0, 1, 2.5])
def test_a_folder_whose_sentence_length_was_edited_to_nonsense_is_refused_naming_the_file(tmp_path, encoder, length):
    from sentence_transformers import SentenceTransformer

    folder = encoder.save_sentence_transformer(tmp_path / "st")
    (folder / "insub_sentence_config.json").write_text(json.dumps({"max_seq_length": length}))
    with pytest.raises(ValueError, match=rf"max_seq_length={length!r} \(insub_sentence_config.json of the folder\) "
                                         r"must be an integer >= 2"):
        SentenceTransformer(str(folder), trust_remote_code=True)


def test_a_reading_given_through_the_former_card_field_still_reaches_the_folder_with_one_warning(tmp_path, encoder):
    from insub_hf.hub import save_for_hub
    from insub_hf.hub.model_card import HubCard

    bank = torch.nn.functional.normalize(encoder.encode(BANK).embeddings, dim=1)
    settings = {"reading": "knn", "k": 3, "bank": bank}
    with pytest.warns(FutureWarning, match=r"HubCard\(sentence_uncertainty=\.\.\.\) is .*save_sentence_transformer"):
        save_for_hub(encoder.model, tmp_path / "former", "former",
                     HubCard(tokenizer=encoder.tokenizer, sentence_uncertainty=settings))
    assert encoder.model.config.uncertainty["reading"] == "calibrated"  # the caller's model is left as it was
    now = encoder.save_sentence_transformer(tmp_path / "now", uncertainty=settings)
    former = InSubModel.from_pretrained(tmp_path / "former").eval()
    current = InSubModel.from_pretrained(now).eval()
    assert former.config.uncertainty["reading"] == current.config.uncertainty["reading"] == "knn"
    torch.testing.assert_close(former.knn_bank.bank, current.knn_bank.bank, rtol=0, atol=0)

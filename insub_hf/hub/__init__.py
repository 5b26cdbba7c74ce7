"""The Hub: a model repo's folder, built and checked before anything is uploaded (`folder`: weights, config, remote
code, the generated card of `model_card`, a text model's sentence-transformers files), and the upload itself through
`huggingface_hub.HfApi` (`upload`)."""

from .folder import check_hub_folder, machine_paths, save_for_hub, scrub_published_files, write_sentence_transformer_files
from .upload import (
    final_push_target, hub_access, hub_token, offline_load_error, push_model_to_hub, save_final_model,
    upload_hub_folder, upload_space_folder,
)

__all__ = [
    "check_hub_folder", "final_push_target", "hub_access", "hub_token", "machine_paths", "offline_load_error",
    "push_model_to_hub", "save_final_model", "save_for_hub", "scrub_published_files", "upload_hub_folder",
    "upload_space_folder", "write_sentence_transformer_files",
]

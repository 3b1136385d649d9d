"""Presets on model hubs: `hf://`, `kaggle://` and other keras-hub handles.

A handle is resolved by keras-hub's own preset file getter
(`keras_hub.src.utils.preset_utils.get_file`), so the zoo downloads the
way every keras-hub model does: Hugging Face files through
`huggingface_hub.hf_hub_download` (its cache under `HF_HOME`), Kaggle
files through `kagglehub.model_download` (its cache under
`KAGGLEHUB_CACHE`), `gs://` and other `tf.io.gfile` schemes into
`~/.keras/models`. A second load of the same handle reads the cache.

The files of one preset revision land in one cache directory, which is
then read like a local preset directory.
"""

import os

from ensemble_zoo.presets.preset_error import PresetError

#: Files every preset has.
REQUIRED_FILES = ("config.json", "metadata.json")
#: Files a preset may have; each is fetched when the hub holds it.
OPTIONAL_FILES = (
    "model.weights.h5",
    "task.json",
    "task.weights.h5",
    "preprocessor.json",
    "image_converter.json",
    "tokenizer.json",
)


def is_handle(preset):
    """Whether `preset` is a hub handle (`scheme://...`), not a path or name."""
    return isinstance(preset, str) and "://" in preset


def _error(message):
    return PresetError(message)


def _get_file(preset, filename):
    from keras_hub.src.utils import preset_utils

    return preset_utils.get_file(preset, filename)


def _kind(preset):
    """The `kind` in a hub preset's `metadata.json` (None when the file
    is missing or unreadable: the full download then reports it)."""
    import json

    try:
        with open(_get_file(preset, "metadata.json"), encoding="utf-8") as f:
            metadata = json.load(f)
    except (FileNotFoundError, ValueError, ImportError, OSError):
        return None
    return metadata.get("kind") if isinstance(metadata, dict) else None


def download_preset(preset):
    """Fetches a hub preset's files (or finds them in the download cache)
    and returns the local directory that holds them.

    Args:
        preset: str, a handle such as `"hf://user/hydra_vit_digits"` or
            `"kaggle://user/hydra/keras/vit_digits/1"`.

    Raises:
        PresetError: the handle is malformed, a required file is missing
            on the hub, or the hub's client library is not installed.
    """
    local = {}
    files = REQUIRED_FILES + OPTIONAL_FILES
    if _kind(preset) == "adapters":  # `adapter_presets`: no model config
        files = ("metadata.json", "adapters.lora_ensemble.h5")
    for filename in files:
        try:
            local[filename] = _get_file(preset, filename)
        except FileNotFoundError as e:
            if filename in REQUIRED_FILES:
                raise _error(f"Damaged preset: {preset} has no {filename} ({e}).") from e
        except ImportError as e:
            raise _error(f"Cannot load {preset}: {e}") from e
        except ValueError as e:
            raise _error(f"Cannot load {preset}: {e}") from e
    directories = {os.path.dirname(os.path.abspath(p)) for p in local.values()}
    if len(directories) != 1:
        raise _error(
            f"The files of {preset} were downloaded to different directories "
            f"({sorted(directories)}); a preset's files must come from one "
            "revision."
        )
    return directories.pop()

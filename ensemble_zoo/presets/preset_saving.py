"""Writing a model as a preset directory, in keras-hub's layout."""

import datetime
import json
import os
import shutil
import tempfile

import keras

from ensemble_zoo.presets import keras_hub_layout
from ensemble_zoo.presets.keras_hub_layout import TASK_CONFIG_FILE
from ensemble_zoo.presets.keras_hub_layout import TASK_WEIGHTS_FILE
from ensemble_zoo.presets.preset_error import PresetError
from ensemble_zoo.presets.preset_files import CONFIG_FILE
from ensemble_zoo.presets.preset_files import METADATA_FILE
from ensemble_zoo.presets.preset_files import PRESET_FILES
from ensemble_zoo.presets.preset_files import WEIGHTS_FILE
from ensemble_zoo.presets.preset_files import file_sha256
from ensemble_zoo.presets.preset_files import strip_optimizer_state
from ensemble_zoo.utils.parameters import parameter_count


def save_preset(model, preset_dir, metadata=None, include_weights=True):
    """Writes a model as a preset directory.

    Every zoo classifier is a keras-hub task with a keras-hub backbone and
    is written in keras-hub's layout (`config.json` = backbone,
    `model.weights.h5`, `task.json`, `task.weights.h5`, the preprocessor's
    files, `metadata.json`; see `ensemble_zoo.presets.keras_hub_layout`),
    which `keras_hub.models.ImageClassifier.from_preset` /
    `TextClassifier.from_preset` load and `keras_hub.upload_preset`
    accepts. `metadata.json` records the layout, the method, the versions
    and the weights files' SHA-256, which loading checks.

    With `include_weights=False` the preset is an *architecture* preset
    (`kind: "architecture"` in its metadata): `from_preset` builds it with
    freshly initialized weights.

    Every file is first written to a temporary directory next to
    `preset_dir` and moved into place only when all of them are complete:
    a save that fails (e.g. on metadata that is not JSON-serializable)
    leaves an existing preset in `preset_dir` unchanged. Other preset
    files left in `preset_dir` (e.g. `task.weights.h5` of a task that has
    no task weights now) are removed.

    Raises:
        TypeError: `model` is not a keras-hub task with a keras-hub
            backbone, or `metadata` is not a JSON-serializable dict.
    """
    from ensemble_zoo.version import __version__

    preset_dir = os.fspath(preset_dir)
    if os.path.exists(preset_dir) and not os.path.isdir(preset_dir):
        raise PresetError(f"`preset_dir` {preset_dir!r} exists and is not a directory.")
    if metadata is not None and not isinstance(metadata, dict):
        raise TypeError(f"`metadata` must be a dict or None; got {type(metadata).__name__}.")
    if not keras_hub_layout.uses_keras_hub_layout(model):
        raise TypeError(
            "`model` must be a keras-hub task with a keras-hub backbone (every "
            f"zoo classifier is one); got {type(model).__name__}."
        )
    quantized = [l for l in model._flatten_layers() if l.quantization_mode]
    if quantized:
        # Keras 3.15.1 rebuilds a quantized `Embedding` (keras-hub's
        # position embeddings) under a `DTypePolicyMap` whose
        # `dtype_policy.quantization_mode` reads None, and then cannot save
        # or check its weights: such a preset would not load.
        raise NotImplementedError(
            f"{type(model).__name__} is quantized ({quantized[0].path}: "
            f"{quantized[0].quantization_mode}); presets hold float weights. "
            "Save the float model and call `quantize` after `from_preset`."
        )
    config = keras_hub_layout.strip_build_state(keras.saving.serialize_keras_object(model))
    parent = os.path.dirname(os.path.abspath(preset_dir))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".preset-", dir=parent)
    try:
        content = {
            "name": os.path.basename(os.path.normpath(preset_dir)),
            "kind": "trained" if include_weights else "architecture",
            "layout": "keras_hub",
            "class_name": type(model).__name__,
            "num_members": getattr(model, "num_members", None),
            "num_classes": getattr(model, "num_classes", None),
            "parameter_count": parameter_count(model),
            "keras_version": keras.__version__,
            "ensemble_zoo_version": __version__,
            "backend": keras.config.backend(),
            "date_saved": datetime.date.today().isoformat(),
        }
        content.update(keras_hub_layout.keras_hub_metadata(model))
        _write_json(staging, TASK_CONFIG_FILE, config)
        backbone_config = keras_hub_layout.strip_build_state(
            keras.saving.serialize_keras_object(model.backbone)
        )
        _write_json(staging, CONFIG_FILE, backbone_config)
        _save_preprocessor(model.preprocessor, staging)
        if include_weights:
            weights = [(WEIGHTS_FILE, "weights_sha256")]
            model.backbone.save_weights(os.path.join(staging, WEIGHTS_FILE))
            if model.has_task_weights():
                model.save_task_weights(os.path.join(staging, TASK_WEIGHTS_FILE))
                weights.append((TASK_WEIGHTS_FILE, "task_weights_sha256"))
            for filename, key in weights:
                path = os.path.join(staging, filename)
                strip_optimizer_state(path)
                content[key] = file_sha256(path)
        write_metadata(staging, content, metadata, preset_dir)
        os.makedirs(preset_dir, exist_ok=True)
        written = set(os.listdir(staging))
        for name in PRESET_FILES:
            target = os.path.join(preset_dir, name)
            if name not in written and os.path.lexists(target):
                _remove(target)
        for name in sorted(written):
            target = os.path.join(preset_dir, name)
            if os.path.isdir(target):
                shutil.rmtree(target)
            os.replace(os.path.join(staging, name), target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_metadata(staging, content, metadata, preset_dir):
    """Writes `content` updated with the user's `metadata` as
    `staging/metadata.json`; a `TypeError` when it is not JSON (the preset
    in `preset_dir` is then left as it was)."""
    content = {**content, **(metadata or {})}
    try:
        text = json.dumps(content, indent=2, sort_keys=True)
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"`metadata` must be JSON-serializable ({e}); the preset in "
            f"{preset_dir} was not changed."
        ) from e
    with open(os.path.join(staging, METADATA_FILE), "w", encoding="utf-8") as f:
        f.write(text)


def _write_json(directory, filename, content):
    with open(os.path.join(directory, filename), "w", encoding="utf-8") as f:
        f.write(json.dumps(content, indent=2, sort_keys=True))


def _save_preprocessor(preprocessor, directory):
    """The preprocessor's files, as keras-hub writes them."""
    if preprocessor is None:
        return
    if hasattr(preprocessor, "save_to_preset"):
        preprocessor.save_to_preset(directory)
    else:
        from keras_hub.src.utils.preset_utils import get_preset_saver

        get_preset_saver(directory).save_preprocessor(preprocessor)


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.remove(path)

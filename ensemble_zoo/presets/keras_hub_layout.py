"""The keras-hub preset layout: which models use it and its file names.

keras-hub's loader (`keras_hub.models.ImageClassifier.from_preset`,
`keras_hub.upload_preset`) reads a directory holding

- `config.json`: the serialized backbone (keras-hub finds the task class
  from it: the task whose `backbone_cls` is this class);
- `model.weights.h5`: the backbone's weights;
- `task.json`: the serialized task (backbone and preprocessor nested);
- `task.weights.h5`: the task's weights outside the backbone (absent when
  it has none);
- `preprocessor.json` plus `image_converter.json` or `tokenizer.json` and
  `assets/`, when the task carries a preprocessor;
- `metadata.json`: keras-hub's fields (`keras_version`,
  `keras_hub_version`, `parameter_count`, `date_saved`, `tasks`) merged
  with the zoo's (method, members, metrics, checksums).

Every zoo classifier whose `backbone` is a `keras_hub.models.Backbone` is
saved this way. The classifiers that wrap whole models (deep ensembles,
MC dropout, subnetwork and tile ensembles, loss prediction) keep the zoo
layout: `config.json` is the serialized classifier, `model.weights.h5`
all its weights.
"""

import os

CONFIG_FILE = "config.json"
TASK_CONFIG_FILE = "task.json"
WEIGHTS_FILE = "model.weights.h5"
TASK_WEIGHTS_FILE = "task.weights.h5"
METADATA_FILE = "metadata.json"
PREPROCESSOR_FILES = ("preprocessor.json", "image_converter.json", "tokenizer.json", "assets")


def uses_keras_hub_layout(model):
    """Whether `model` is a keras-hub task with a keras-hub backbone."""
    import keras_hub

    return isinstance(model, keras_hub.models.Task) and isinstance(
        getattr(model, "backbone", None), keras_hub.models.Backbone
    )


def is_keras_hub_layout(directory):
    """Whether a preset directory is in the keras-hub layout."""
    return os.path.isfile(os.path.join(directory, TASK_CONFIG_FILE))


def keras_hub_metadata(model):
    """keras-hub's `metadata.json` fields for `model`'s backbone."""
    import keras
    import keras_hub

    return {
        "keras_version": keras.version(),
        "keras_hub_version": keras_hub.__version__,
        "tasks": sorted(
            base.__name__
            for base in type(model).__mro__[1:]
            if base.__module__.startswith("keras_hub") and base.__name__.endswith("Classifier")
        ),
    }


def strip_build_state(config):
    """Drops `compile_config` / `build_config` at every depth, as
    keras-hub's saver does."""
    if isinstance(config, dict):
        return {
            k: strip_build_state(v)
            for k, v in config.items()
            if k not in ("compile_config", "build_config")
        }
    if isinstance(config, list):
        return [strip_build_state(v) for v in config]
    return config

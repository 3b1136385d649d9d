"""Reading and writing preset directories, with errors that name the file.

A preset directory holds:

- `config.json`: `keras.saving.serialize_keras_object(model)`;
- `model.weights.h5`: the weights (absent for an *architecture* preset,
  which is built with random weights);
- `metadata.json`: `name`, `description`, `kind` (`"trained"` or
  `"architecture"`), `class_name`, `num_members`, `num_classes`,
  `parameter_count`, versions and optional `metrics`.
"""

import datetime
import json
import os
import pathlib
import tempfile
import warnings

import keras

from ensemble_zoo.presets.registry import PRESETS
from ensemble_zoo.utils.parameters import parameter_count

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.weights.h5"
METADATA_FILE = "metadata.json"


class PresetError(ValueError):
    """A preset could not be found or is damaged; the message says which
    file is wrong and how."""


def preset_root():
    """The directory that holds the shipped preset directories."""
    package_dir = pathlib.Path(__file__).resolve().parent.parent
    installed = package_dir / "_preset_files"
    if installed.is_dir():
        return installed
    return package_dir.parent / "presets"


def list_presets():
    """Names of the shipped presets, sorted."""
    return sorted(PRESETS)


def get_preset_path(preset):
    """Resolves a preset name (or a directory path) to a directory path."""
    if not isinstance(preset, (str, os.PathLike)):
        raise PresetError(
            f"`preset` must be a preset name or a directory path; got "
            f"{type(preset).__name__}."
        )
    preset = os.fspath(preset)
    if preset in PRESETS:
        path = preset_root() / PRESETS[preset]["path"]
        if not path.is_dir():
            raise PresetError(
                f"Preset {preset!r} is registered but its directory {path} "
                "is missing from this installation."
            )
        return str(path)
    if os.path.isdir(preset):
        return preset
    raise PresetError(
        f"Unknown preset {preset!r}. Valid names: "
        f"{', '.join(list_presets())}; or pass the path of a directory "
        "written by `save_to_preset`."
    )


def _read_json(directory, filename):
    path = os.path.join(directory, filename)
    if not os.path.isfile(path):
        raise PresetError(f"Damaged preset: {path} is missing.")
    try:
        with open(path, encoding="utf-8") as f:
            content = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PresetError(
            f"Damaged preset: {path} is not valid JSON ({e})."
        ) from e
    if not isinstance(content, dict):
        raise PresetError(
            f"Damaged preset: {path} must hold a JSON object; got "
            f"{type(content).__name__}."
        )
    return content


def preset_metadata(preset):
    """The parsed `metadata.json` of a preset (name or directory)."""
    return _read_json(get_preset_path(preset), METADATA_FILE)


def _h5_shapes(path):
    import h5py

    shapes = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            shapes[name] = tuple(obj.shape)

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return shapes


def _check_weights_file(model, path):
    """Compares the file's variables with the model's, by path and shape."""
    try:
        found = _h5_shapes(path)
    except OSError as e:
        raise PresetError(
            f"Damaged preset: {path} is not a readable HDF5 weights file "
            f"({e})."
        ) from e
    with tempfile.TemporaryDirectory() as tmp:
        reference = os.path.join(tmp, WEIGHTS_FILE)
        model.save_weights(reference)
        expected = {
            k: v for k, v in _h5_shapes(reference).items()
            if not _is_optimizer_state(k)
        }
    found = {k: v for k, v in found.items() if not _is_optimizer_state(k)}
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    wrong = sorted(
        k for k in set(expected) & set(found) if expected[k] != found[k]
    )
    problems = []
    if wrong:
        problems += [
            f"variable {k!r} has shape {found[k]}, the model expects "
            f"{expected[k]}"
            for k in wrong[:5]
        ]
    if missing:
        problems.append(
            f"{len(missing)} variable(s) missing, e.g. {missing[:3]}"
        )
    if unexpected:
        problems.append(
            f"{len(unexpected)} unexpected variable(s), e.g. {unexpected[:3]}"
        )
    if problems:
        raise PresetError(
            f"Damaged preset: {path} does not match the model in its "
            f"config.json: " + "; ".join(problems) + "."
        )


def _import_config_packages(config_text):
    # Classes from keras-hub register themselves on import.
    if '"keras_hub>' in config_text or '"keras_nlp>' in config_text:
        import keras_hub  # noqa: F401
    import ensemble_zoo.models  # noqa: F401


_POLICY_CLASSES = ("DTypePolicy", "FloatDTypePolicy")


def _with_dtype_policy(config, name):
    """A copy of a serialized model whose every layer dtype policy is
    `name` (keras-hub models pin the policy they were saved with)."""
    if isinstance(config, list):
        return [_with_dtype_policy(v, name) for v in config]
    if not isinstance(config, dict):
        return config
    out = {}
    for key, value in config.items():
        if (
            key == "dtype"
            and isinstance(value, dict)
            and value.get("class_name") in _POLICY_CLASSES
        ):
            value = dict(value, config=dict(value.get("config", {}), name=name))
        out[key] = _with_dtype_policy(value, name)
    return out


def _policy_name(dtype):
    if dtype is None:
        return keras.config.dtype_policy().name
    try:
        return keras.dtype_policies.get(dtype).name
    except (ValueError, TypeError) as e:
        raise ValueError(
            "`dtype` must be a Keras dtype policy or its name (e.g. "
            "'float32', 'mixed_bfloat16', 'mixed_float16'); got "
            f"{dtype!r}."
        ) from e


def load_preset(preset, cls=None, load_weights=True, dtype=None):
    """Builds the model of a preset and loads its weights.

    Args:
        preset: a preset name from `list_presets()` or a directory path.
        cls: optional class; the preset must hold this class or a subclass.
        load_weights: bool; `False` builds the architecture only.
        dtype: optional dtype policy (name or `keras.DTypePolicy`) for
            every layer, e.g. `"mixed_bfloat16"`. Defaults to the global
            policy (`keras.config.dtype_policy()`), which thus reaches the
            layers of a preset saved under another policy too. Layers that
            must stay float32 (MoE routers) keep float32.

    Raises:
        PresetError: unknown name, missing or invalid file, wrong class,
            or weights that do not match the configuration.
    """
    directory = get_preset_path(preset)
    config_path = os.path.join(directory, CONFIG_FILE)
    config = _read_json(directory, CONFIG_FILE)
    metadata = _read_json(directory, METADATA_FILE)
    for key in ("class_name", "config"):
        if key not in config:
            raise PresetError(
                f"Damaged preset: {config_path} has no {key!r} entry; it "
                "must be the output of keras.saving.serialize_keras_object."
            )
    _import_config_packages(json.dumps(config))
    registered_name = config.get("registered_name") or config["class_name"]
    preset_cls = keras.saving.get_registered_object(registered_name)
    if preset_cls is None:
        raise PresetError(
            f"Damaged preset: {config_path} names the class "
            f"{registered_name!r}, which is not registered with Keras."
        )
    if cls is not None and not issubclass(preset_cls, cls):
        raise PresetError(
            f"Preset {preset!r} holds a {preset_cls.__name__}, not a "
            f"{cls.__name__}. Load it with "
            f"{preset_cls.__name__}.from_preset({preset!r}) or "
            f"ensemble_zoo.models.EnsembleClassifier.from_preset(...)."
        )
    policy = _policy_name(dtype)
    config = _with_dtype_policy(config, policy)
    previous = keras.config.dtype_policy()
    try:
        # Layers built without an explicit dtype take the global policy.
        keras.config.set_dtype_policy(policy)
        model = keras.saving.deserialize_keras_object(config, safe_mode=True)
    except Exception as e:
        raise PresetError(
            f"Damaged preset: could not build the model from {config_path} "
            f"({type(e).__name__}: {e})."
        ) from e
    finally:
        keras.config.set_dtype_policy(previous)
    kind = metadata.get("kind", "trained")
    if load_weights and kind != "architecture":
        weights_path = os.path.join(directory, WEIGHTS_FILE)
        if not os.path.isfile(weights_path):
            raise PresetError(f"Damaged preset: {weights_path} is missing.")
        _check_weights_file(model, weights_path)
        try:
            with warnings.catch_warnings():
                # Presets carry no optimizer state (see save_preset).
                warnings.filterwarnings(
                    "ignore", message="Skipping variable loading for optimizer"
                )
                model.load_weights(weights_path)
        except Exception as e:
            raise PresetError(
                f"Damaged preset: could not load {weights_path} "
                f"({type(e).__name__}: {e})."
            ) from e
    return model


def _is_optimizer_state(path):
    """Whether an HDF5 path is optimizer state: the model's own or that of
    a compiled sub-model (keras-hub tasks compile themselves, and under
    `mixed_float16` their optimizer is a LossScaleOptimizer with variables)."""
    return "optimizer" in path.split("/")


def _strip_optimizer_state(path):
    """Presets hold model weights only: drop every optimizer's state."""
    import h5py

    with h5py.File(path, "a") as f:
        groups = []
        f.visit(
            lambda name: groups.append(name)
            if name.split("/")[-1] == "optimizer" else None
        )
        for name in sorted(groups, key=len, reverse=True):
            if name in f:
                del f[name]


def save_preset(model, preset_dir, metadata=None, include_weights=True):
    """Writes a model as a preset directory (config, weights, metadata).

    With `include_weights=False` the preset is an *architecture* preset
    (`kind: "architecture"` in its metadata): `from_preset` builds it with
    freshly initialized weights.
    """
    from ensemble_zoo import __version__

    preset_dir = os.fspath(preset_dir)
    os.makedirs(preset_dir, exist_ok=True)
    config = keras.saving.serialize_keras_object(model)
    for key in ("compile_config", "build_config"):
        config.pop(key, None)
    with open(os.path.join(preset_dir, CONFIG_FILE), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    if include_weights:
        weights_path = os.path.join(preset_dir, WEIGHTS_FILE)
        model.save_weights(weights_path)
        _strip_optimizer_state(weights_path)
    content = {
        "name": os.path.basename(os.path.normpath(preset_dir)),
        "kind": "trained" if include_weights else "architecture",
        "class_name": type(model).__name__,
        "num_members": getattr(model, "num_members", None),
        "num_classes": getattr(model, "num_classes", None),
        "parameter_count": parameter_count(model),
        "keras_version": keras.__version__,
        "ensemble_zoo_version": __version__,
        "backend": keras.config.backend(),
        "date_saved": datetime.date.today().isoformat(),
    }
    content.update(metadata or {})
    with open(os.path.join(preset_dir, METADATA_FILE), "w") as f:
        json.dump(content, f, indent=2, sort_keys=True)

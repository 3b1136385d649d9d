"""Reading and writing preset directories, with errors that name the file.

A preset directory holds:

- `config.json`: `keras.saving.serialize_keras_object(model)`;
- `model.weights.h5`: the weights (absent for an *architecture* preset,
  which is built with random weights);
- `metadata.json`: `name`, `description`, `kind` (`"trained"` or
  `"architecture"`), `class_name`, `num_members`, `num_classes`,
  `parameter_count`, `weights_sha256` (the SHA-256 of the weights file),
  versions and optional `metrics`.

Loading checks every file before it builds anything it returns: valid
JSON objects, a registered `keras.Model` class, configs held twice that
agree (`config_copies`: keras-hub's loader reads the other copy), `kind` consistent with the
presence of weights, the weights file's checksum, variable paths, shapes
and dtypes against the model, and finite values; each failure is a
`PresetError` that names the file. Saving (`preset_saving`) writes into a temporary
directory and moves the finished files into place, so a failed save
leaves the previous preset as it was.
"""

import copy
import difflib
import importlib
import json
import os
import warnings

import keras

from ensemble_zoo.presets import adapter_presets
from ensemble_zoo.presets import hub_handles
from ensemble_zoo.presets import keras_hub_layout
from ensemble_zoo.presets.config_copies import check_config_copies
from ensemble_zoo.presets.constructor_arguments import check_constructor_arguments
from ensemble_zoo.presets.constructor_arguments import constructor_arguments
from ensemble_zoo.presets.keras_hub_layout import TASK_CONFIG_FILE
from ensemble_zoo.presets.keras_hub_layout import TASK_WEIGHTS_FILE
from ensemble_zoo.presets.paths import preset_root
from ensemble_zoo.presets.preset_error import PresetError
from ensemble_zoo.presets.preset_files import CONFIG_FILE
from ensemble_zoo.presets.preset_files import METADATA_FILE
from ensemble_zoo.presets.preset_files import WEIGHTS_FILE
from ensemble_zoo.presets.preset_files import check_weights_file
from ensemble_zoo.presets.preset_files import file_sha256  # noqa: F401 (its old path)
from ensemble_zoo.presets.preset_saving import save_preset  # noqa: F401 (its old path)
from ensemble_zoo.presets.registry import PRESETS
from ensemble_zoo.utils.quiet_import import quiet_stderr
from ensemble_zoo.utils.validation import check_bool


def list_presets():
    """Names of the shipped presets, sorted."""
    return sorted(PRESETS)


def did_you_mean(name, names):
    """`"; did you mean 'x'?"` for the name of `names` closest to a
    mistyped `name` (difflib), or `""` when none is close."""
    close = difflib.get_close_matches(str(name), list(names), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def get_preset_path(preset):
    """Resolves a preset to a local directory path.

    `preset` is a shipped name, a directory path, or a hub handle
    (`hf://user/model`, `kaggle://user/model/keras/variant[/version]`),
    which is downloaded through keras-hub's preset loader and its cache
    (`ensemble_zoo.presets.hub_handles`).
    """
    if not isinstance(preset, (str, os.PathLike)):
        raise PresetError(
            f"`preset` must be a preset name, a directory path or a hub "
            f"handle (hf://, kaggle://); got {type(preset).__name__}."
        )
    preset = os.fspath(preset)
    if hub_handles.is_handle(preset):
        return hub_handles.download_preset(preset)
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
        f"Unknown preset {preset!r}{did_you_mean(preset, list_presets())}; valid names: "
        f"{', '.join(list_presets())}; or pass the path of a directory "
        "written by `save_to_preset`, or a hub handle such as "
        "'hf://user/model' or 'kaggle://user/model/keras/variant'."
    )


def _read_json(directory, filename):
    path = os.path.join(directory, filename)
    if not os.path.isfile(path):
        raise PresetError(f"Damaged preset: {path} is missing.")
    try:
        with open(path, encoding="utf-8") as f:
            content = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PresetError(f"Damaged preset: {path} is not valid JSON ({e}).") from e
    if not isinstance(content, dict):
        raise PresetError(
            f"Damaged preset: {path} must hold a JSON object; got {type(content).__name__}."
        )
    return content


def preset_metadata(preset):
    """The parsed `metadata.json` of a preset (name or directory)."""
    return _read_json(get_preset_path(preset), METADATA_FILE)


def _import_config_packages(config_text):
    # Classes from keras-hub register themselves on import. The zoo's own
    # registered when `ensemble_zoo` (whose `__init__` imports
    # `ensemble_zoo.models`) was imported: this package never imports the
    # models (they import it), so the two form no import cycle.
    if '"keras_hub>' in config_text or '"keras_nlp>' in config_text:
        import keras_hub  # noqa: F401


_POLICY_CLASSES = ("DTypePolicy", "FloatDTypePolicy")


def _with_dtype_policy(config, name):
    """A copy of a serialized model whose every layer dtype policy is
    `name` (keras-hub models pin the policy they were saved with). The
    preprocessor keeps its own."""
    if isinstance(config, list):
        return [_with_dtype_policy(v, name) for v in config]
    if not isinstance(config, dict):
        return config
    out = {}
    for key, value in config.items():
        if key == "preprocessor":
            # Not a model layer: a tokenizer's dtype is int32 or string,
            # an image converter's output the model casts itself.
            out[key] = value
            continue
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


#: `preprocessor` of `load_preset`: the preset's own.
AUTO = "auto"


def load_preset(
    preset, cls=None, load_weights=True, dtype=None, preprocessor=AUTO, base=None, **kwargs
):
    """Builds the model of a preset and loads its weights.

    Args:
        preset: a preset name from `list_presets()` or a directory path.
        cls: optional class; the preset must hold this class or a subclass.
        load_weights: bool; `False` builds the architecture only.
        preprocessor: `"auto"` (default) keeps the preset's preprocessor;
            `None` loads the model without one (its `predict` then takes
            what calling the model takes: images scaled to [0, 1] for the
            digits presets); a keras-hub preprocessor replaces it. As
            keras-hub's `from_preset(..., preprocessor=...)`.
        base: for an adapter preset (`kind: "adapters"`, see
            `ensemble_zoo.presets.adapter_presets`) only: the keras-hub
            causal LM to put the adapters on, or its preset name,
            directory or hub handle; `None` (default) loads the base
            model the preset's metadata names.
        **kwargs: constructor arguments that replace the preset's (e.g.
            `compile=False`), merged into the model's config as keras-hub's
            loader merges them.
        dtype: optional dtype policy (name or `keras.DTypePolicy`) for
            every layer, e.g. `"mixed_bfloat16"`. Defaults to the global
            policy (`keras.config.dtype_policy()`), which thus reaches the
            layers of a preset saved under another policy too. Layers that
            must stay float32 (MoE routers) keep float32.

    Raises:
        PresetError: unknown name, missing or invalid file, wrong class,
            or weights that do not match the configuration.
    """
    load_weights = check_bool(load_weights, "load_weights")  # "no" is truthy
    directory = get_preset_path(preset)
    if os.path.isfile(os.path.join(directory, METADATA_FILE)):
        metadata = _read_json(directory, METADATA_FILE)
        if adapter_presets.is_adapter_preset(metadata):
            return adapter_presets.load_adapter_preset(
                preset,
                directory,
                metadata,
                cls=cls,
                base=base,
                load_weights=load_weights,
                dtype=dtype,
                preprocessor=preprocessor,
                **kwargs,
            )
    if base is not None:
        raise ValueError(
            f"`base` is for adapter presets (kind 'adapters'); preset "
            f"{preset!r} holds a whole model."
        )
    if not keras_hub_layout.is_keras_hub_layout(directory):
        _refuse_without_task_config(directory)
    config_path = os.path.join(directory, TASK_CONFIG_FILE)
    config = _read_json(directory, TASK_CONFIG_FILE)
    metadata = _read_json(directory, METADATA_FILE)
    preset_cls = _preset_class(config, config_path)
    check_constructor_arguments(preset_cls, config["config"], config_path)
    if cls is not None and not issubclass(preset_cls, cls):
        raise PresetError(
            f"Preset {preset!r} holds a {preset_cls.__name__}, not a "
            f"{cls.__name__}. Load it with {_loader_hint(preset, preset_cls)}."
        )
    backbone_config = _read_json(directory, CONFIG_FILE)
    # Deserializing replaces nested configs with objects: compare a copy.
    copies = (directory, copy.deepcopy(config), backbone_config, _read_json)
    kind = metadata.get("kind", "trained")
    weights_path = os.path.join(directory, WEIGHTS_FILE)
    metadata_path = os.path.join(directory, METADATA_FILE)
    if kind not in KINDS:
        raise PresetError(
            f"Damaged preset: {metadata_path} has kind {kind!r}; expected one of {KINDS}."
        )
    if kind == "architecture" and os.path.exists(weights_path):
        raise PresetError(
            f"Damaged preset: {metadata_path} says kind 'architecture' (random "
            f"weights), but {weights_path} exists. Set kind to 'trained' to "
            "load those weights, or delete the file."
        )
    if load_weights and kind == "trained" and not os.path.isfile(weights_path):
        raise PresetError(f"Damaged preset: {weights_path} is missing.")
    if not (isinstance(preprocessor, str) and preprocessor == AUTO):
        config = _with_preprocessor(config, preprocessor, config_path)
    if kwargs:
        config = {**config, "config": {**config["config"], **kwargs}}
    policy = _policy_name(dtype)
    config = _with_dtype_policy(config, policy)
    previous = keras.config.dtype_policy()
    loads = load_weights and kind == "trained"
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
    # After building in safe mode (which refuses unsafe configs by name;
    # a Lambda's marshalled code differs between two serializations).
    check_config_copies(*copies)
    _check_backbone_config(model, backbone_config, directory)
    if loads:
        _load_keras_hub_weights(model, directory, metadata)
    # The preset's own preprocessor reads its assets (a vocabulary); a
    # preprocessor passed in keeps its own. A hub preset's assets come
    # through keras-hub's file getter (into the same download cache).
    preset_preprocessor = getattr(model, "preprocessor", None)
    if (
        isinstance(preprocessor, str)
        and preset_preprocessor is not None
        and hasattr(preset_preprocessor, "load_preset_assets")
    ):
        # SentencePiece logs an INFO line from C++ for a tokenizer without
        # a normalization table (the arithmetic presets'): dropped.
        with quiet_stderr():
            preset_preprocessor.load_preset_assets(
                preset if hub_handles.is_handle(preset) else directory
            )
    return model


def _refuse_without_task_config(directory):
    """The error for a preset directory without `task.json`: a keras-hub
    backbone preset, a preset of the zoo's old layout, or a damaged one."""
    task_path = os.path.join(directory, TASK_CONFIG_FILE)
    config_path = os.path.join(directory, CONFIG_FILE)
    config = _read_json(directory, CONFIG_FILE)
    preset_cls = _preset_class(config, config_path)
    if _is_keras_hub_backbone(preset_cls):
        raise PresetError(
            f"Damaged preset: {config_path} holds a {preset_cls.__name__} "
            f"(keras-hub's layout: the backbone), but {task_path} is missing."
        )
    raise PresetError(
        f"The preset in {directory} is in the zoo's old layout ({config_path} "
        f"holds the whole {preset_cls.__name__}; {task_path} is missing), "
        "which ensemble_zoo 0.1.0 no longer reads. Load it with an earlier "
        "release and save it again with `save_to_preset`, which writes "
        "keras-hub's layout."
    )


def _with_preprocessor(config, preprocessor, config_path):
    """The model config with its preprocessor replaced (or dropped)."""
    import keras_hub

    if preprocessor is not None and not isinstance(preprocessor, keras_hub.models.Preprocessor):
        raise TypeError(
            "`preprocessor` must be 'auto', None or a keras_hub "
            f"Preprocessor; got {preprocessor!r}."
        )
    inner = config.get("config") if isinstance(config, dict) else None
    if not isinstance(inner, dict) or (
        preprocessor is not None
        and "preprocessor" not in inner
        and not _accepts_preprocessor(config)
    ):
        raise PresetError(
            f"The model in {config_path} takes no preprocessor; load it with preprocessor='auto'."
        )
    inner = dict(inner)
    if preprocessor is None:
        inner.pop("preprocessor", None)
    else:
        inner["preprocessor"] = preprocessor
    return {**config, "config": inner}


def _accepts_preprocessor(config):
    cls = keras.saving.get_registered_object(config.get("registered_name") or "")
    return isinstance(cls, type) and "preprocessor" in constructor_arguments(cls)


def _is_keras_hub_backbone(preset_cls):
    import keras_hub

    return issubclass(preset_cls, keras_hub.models.Backbone)


def _preset_class(config, config_path):
    """The registered `keras.Model` class a serialized model names."""
    for key in ("class_name", "config"):
        if key not in config:
            raise PresetError(
                f"Damaged preset: {config_path} has no {key!r} entry; it "
                "must be the output of keras.saving.serialize_keras_object."
            )
    _import_config_packages(json.dumps(config))
    registered_name = config.get("registered_name") or config["class_name"]
    preset_cls = keras.saving.get_registered_object(registered_name)
    module = config.get("module")
    if preset_cls is None and isinstance(module, str) and module.split(".")[0] == "keras":
        try:  # Keras' own classes (`keras.layers.Dense`) are not registered
            preset_cls = getattr(importlib.import_module(module), config["class_name"], None)
        except ImportError:
            preset_cls = None
    if preset_cls is None:
        raise PresetError(
            f"Damaged preset: {config_path} names the class "
            f"{registered_name!r}, which is not registered with Keras."
        )
    if not (isinstance(preset_cls, type) and issubclass(preset_cls, keras.Model)):
        raise PresetError(
            f"Damaged preset: {config_path} holds a "
            f"{getattr(preset_cls, '__name__', registered_name)}, which is "
            "not a keras.Model; a preset's config.json (task.json in the "
            "keras-hub layout) is the serialized model."
        )
    return preset_cls


#: Keyword arguments every Keras model takes besides its own (a keras-hub
#: task also takes `compile`).
def _check_backbone_config(model, backbone_config, directory):
    """`config.json` must name the class of the task's backbone (keras-hub
    picks the task class from it)."""
    backbone = getattr(model, "backbone", None)
    path = os.path.join(directory, CONFIG_FILE)
    expected = keras.saving.get_registered_name(type(backbone)) if backbone is not None else None
    found = backbone_config.get("registered_name") or backbone_config.get("class_name")
    if backbone is None or found != expected:
        raise PresetError(
            f"Damaged preset: {path} names the backbone class {found!r}, but "
            f"the task in {TASK_CONFIG_FILE} has a "
            f"{type(backbone).__name__ if backbone is not None else 'no backbone'}"
            f" ({expected!r}); config.json must be the task's serialized "
            "backbone."
        )


def _load_keras_hub_weights(model, directory, metadata):
    """Checks and loads `model.weights.h5` (the backbone) and
    `task.weights.h5` (the rest), as keras-hub's loader splits them."""
    weights_path = os.path.join(directory, WEIGHTS_FILE)
    task_path = os.path.join(directory, TASK_WEIGHTS_FILE)
    backbone = model.backbone
    check_weights_file(
        backbone.save_weights,
        weights_path,
        metadata.get("weights_sha256"),
        f"the backbone in {CONFIG_FILE}",
    )
    has_task_weights = model.has_task_weights()
    if has_task_weights and not os.path.isfile(task_path):
        raise PresetError(f"Damaged preset: {task_path} is missing.")
    if not has_task_weights and os.path.exists(task_path):
        raise PresetError(
            f"Damaged preset: {task_path} exists, but the task in "
            f"{TASK_CONFIG_FILE} has no weights outside its backbone."
        )
    if has_task_weights:
        check_weights_file(
            model.save_task_weights,
            task_path,
            metadata.get("task_weights_sha256"),
            f"the task in {TASK_CONFIG_FILE}",
        )
    _load_weights(backbone.load_weights, weights_path)
    if has_task_weights:
        _load_weights(model.load_task_weights, task_path)


KINDS = ("trained", "architecture")


def _load_weights(load, weights_path):
    try:
        with warnings.catch_warnings():
            # Presets carry no optimizer state (see save_preset).
            warnings.filterwarnings("ignore", message="Skipping variable loading for optimizer")
            load(weights_path)
    except Exception as e:
        raise PresetError(
            f"Damaged preset: could not load {weights_path} ({type(e).__name__}: {e})."
        ) from e


def _loader_hint(preset, preset_cls):
    """Calls that load a preset of class `preset_cls`."""
    calls = f"ensemble_zoo.presets.load_preset({preset!r})"
    if preset_cls.__module__.startswith("ensemble_zoo") and hasattr(preset_cls, "from_preset"):
        calls = f"ensemble_zoo.models.{preset_cls.__name__}.from_preset({preset!r}) or " + calls
    return calls

"""Adapter presets: a LoRA-Ensemble causal LM as its adapters alone, naming
the keras-hub model they were trained on.

A causal LM's frozen weights are hundreds of MB to GB and already have a
preset of their own (keras-hub's `gemma3_270m`, a Hugging Face
checkpoint); its members' adapters are a few MB. An adapter preset holds:

- `adapters.lora_ensemble.h5`: the adapters, as
  `LoRAEnsembleCausalLM.save_adapters` writes them (with the members,
  rank, targets and scaling they were built with);
- `metadata.json`: `kind: "adapters"`, the task class, `base_model` (the
  preset of the model to build on, and its class), the adapters' SHA-256,
  versions and optional `metrics`.

`ensemble_zoo.presets.load_preset(preset, base=...)` (and
`LoRAEnsembleCausalLM.from_preset`) loads the base model, by default the
one the metadata names through keras-hub's loader (which downloads a
hub preset), checks the file's checksum and rebuilds the ensemble with
the task class's `from_adapters`. keras-hub's own `from_preset` cannot
read such a directory: it has no `config.json` to build from.

Example:

```python
import ensemble_zoo as ez

ensemble = ez.presets.load_preset("lora_ensemble_gemma_tiny_arithmetic")
ez.presets.save_adapter_preset(ensemble, "my_adapters", base="gemma_tiny_arithmetic")
ez.presets.load_preset("my_adapters").num_members  # 4, on its base by name
```
"""

import datetime
import math
import os
import shutil
import tempfile

import keras

from ensemble_zoo.presets.paths import preset_root
from ensemble_zoo.presets.preset_error import PresetError
from ensemble_zoo.presets.preset_files import ADAPTERS_FILE
from ensemble_zoo.presets.preset_files import METADATA_FILE
from ensemble_zoo.presets.preset_files import file_sha256
from ensemble_zoo.presets.preset_saving import write_metadata
from ensemble_zoo.presets.registry import PRESETS
from ensemble_zoo.utils.quiet_import import quiet_stderr

#: `kind` of an adapter preset in its `metadata.json`.
KIND = "adapters"


def save_adapter_preset(model, preset_dir, base, metadata=None):
    """Writes a LoRA-Ensemble causal LM's adapters as a preset directory.

    Args:
        model: a `LoRAEnsembleCausalLM`.
        preset_dir: the directory to write (created; its adapter preset
            files are replaced, other files are left alone).
        base: str, the preset of the model the adapters were trained on,
            which `load_preset` loads when it is given no `base`: a
            keras-hub preset name (`"gemma3_270m"`), a hub handle
            (`"hf://google/gemma-3-270m"`) or a shipped zoo preset of a
            plain keras-hub causal LM (`"gemma_tiny_arithmetic"`).
        metadata: optional JSON-serializable dict merged into
            `metadata.json` (`description`, `metrics`, ...).

    Raises:
        TypeError: `model` has no adapters to save, `base` is not a
            string, or `metadata` is not a JSON-serializable dict.
    """
    from ensemble_zoo.version import __version__

    if not (hasattr(model, "save_adapters") and hasattr(type(model), "from_adapters")):
        raise TypeError(
            "`model` must be a LoRA-Ensemble causal LM (with `save_adapters`); "
            f"got {type(model).__name__}."
        )
    if not isinstance(base, str) or not base:
        raise TypeError(
            "`base` must name the preset of the model the adapters were trained "
            f"on (e.g. 'gemma3_270m'); got {base!r}."
        )
    if metadata is not None and not isinstance(metadata, dict):
        raise TypeError(f"`metadata` must be a dict or None; got {type(metadata).__name__}.")
    preset_dir = os.fspath(preset_dir)
    if os.path.exists(preset_dir) and not os.path.isdir(preset_dir):
        raise PresetError(f"`preset_dir` {preset_dir!r} exists and is not a directory.")
    parent = os.path.dirname(os.path.abspath(preset_dir))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".preset-", dir=parent)
    try:
        adapters_path = os.path.join(staging, ADAPTERS_FILE)
        model.save_adapters(adapters_path)
        content = {
            "name": os.path.basename(os.path.normpath(preset_dir)),
            "kind": KIND,
            "class_name": type(model).__name__,
            "registered_name": keras.saving.get_registered_name(type(model)),
            "method": "lora_ensemble",
            "base_model": {"preset": base, "class_name": model.keras_hub_class.__name__},
            "num_members": model.num_members,
            "rank": model.rank,
            "targets": list(model.targets),
            "parameter_count": sum(
                math.prod(w.shape) for a in model.adapters for w in (a.lora_a, a.lora_b)
            ),
            "adapters_sha256": file_sha256(adapters_path),
            "keras_version": keras.__version__,
            "ensemble_zoo_version": __version__,
            "backend": keras.config.backend(),
            "date_saved": datetime.date.today().isoformat(),
        }
        write_metadata(staging, content, metadata, preset_dir)
        os.makedirs(preset_dir, exist_ok=True)
        for name in (ADAPTERS_FILE, METADATA_FILE):
            os.replace(os.path.join(staging, name), os.path.join(preset_dir, name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def is_adapter_preset(metadata):
    """Whether a preset's parsed `metadata.json` is an adapter preset's."""
    return isinstance(metadata, dict) and metadata.get("kind") == KIND


def load_adapter_preset(
    preset,
    directory,
    metadata,
    cls=None,
    base=None,
    load_weights=True,
    dtype=None,
    preprocessor="auto",
    **kwargs,
):
    """The ensemble of an adapter preset on its base model
    (`ensemble_zoo.presets.load_preset` with the preset's directory and
    parsed metadata; the arguments are that function's)."""
    metadata_path = os.path.join(directory, METADATA_FILE)
    if kwargs:
        raise TypeError(
            f"Preset {preset!r} holds adapters only: constructor arguments "
            f"({sorted(kwargs)}) cannot replace its configuration. Load it and "
            "change the model, or pass the base model you want as `base`."
        )
    preset_cls = _task_class(metadata, metadata_path)
    if cls is not None and not issubclass(preset_cls, cls):
        raise PresetError(f"Preset {preset!r} holds a {preset_cls.__name__}, not a {cls.__name__}.")
    adapters_path = os.path.join(directory, ADAPTERS_FILE)
    if not os.path.isfile(adapters_path):
        raise PresetError(f"Damaged preset: {adapters_path} is missing.")
    expected = metadata.get("adapters_sha256")
    if load_weights and expected is not None and file_sha256(adapters_path) != expected:
        raise PresetError(
            f"Damaged preset: {adapters_path} does not match the SHA-256 in "
            f"{metadata_path} (a changed or partly downloaded file)."
        )
    base_model, described = _base_model(base, metadata, metadata_path, dtype, preset)
    try:
        model = preset_cls.from_adapters(base_model, adapters_path, load_weights=load_weights)
    except ValueError as e:
        raise PresetError(f"The adapters of preset {preset!r} do not fit {described}: {e}") from e
    if not (isinstance(preprocessor, str) and preprocessor == "auto"):
        _check_preprocessor(preprocessor)
        model.preprocessor = preprocessor
    return model


def _task_class(metadata, metadata_path):
    name = metadata.get("registered_name") or metadata.get("class_name")
    preset_cls = keras.saving.get_registered_object(name) if isinstance(name, str) else None
    if not (isinstance(preset_cls, type) and hasattr(preset_cls, "from_adapters")):
        raise PresetError(
            f"Damaged preset: {metadata_path} names the class {name!r}, which is "
            "not a registered LoRA-Ensemble causal LM (a class with "
            "`from_adapters`)."
        )
    return preset_cls


def _base_model(base, metadata, metadata_path, dtype, preset):
    """`(the keras-hub causal LM to build on, how to name it in errors)`."""
    import keras_hub

    if isinstance(base, keras_hub.models.CausalLM):
        if dtype is not None:
            raise ValueError(
                "`dtype` applies to a base model loaded by name; `base` is a "
                "model already built: load it with the dtype you want."
            )
        return base, f"the base model passed ({type(base).__name__})"
    if base is None:
        recorded = metadata.get("base_model")
        base = recorded.get("preset") if isinstance(recorded, dict) else None
        if not isinstance(base, str):
            raise PresetError(
                f"Damaged preset: {metadata_path} names no base model "
                "(`base_model.preset`); pass the model the adapters were "
                "trained on as `base`."
            )
    elif not isinstance(base, (str, os.PathLike)):
        raise TypeError(
            "`base` must be a keras-hub causal LM, a preset name, directory or "
            f"hub handle, or None (the preset's own); got {type(base).__name__}."
        )
    base = os.fspath(base)
    path = str(preset_root() / PRESETS[base]["path"]) if base in PRESETS else base
    try:
        with quiet_stderr():  # SentencePiece's C++ INFO line
            model = keras_hub.models.CausalLM.from_preset(path, dtype=dtype)
    except Exception as e:
        raise PresetError(
            f"Could not load {base!r}, the base model of preset {preset!r} "
            f"({type(e).__name__}: {e}). Pass `base`: the keras-hub causal LM "
            "the adapters were trained on, or its preset name, directory or "
            "hub handle."
        ) from e
    return model, f"the base model {base!r}"


def _check_preprocessor(preprocessor):
    import keras_hub

    if preprocessor is not None and not isinstance(preprocessor, keras_hub.models.Preprocessor):
        raise TypeError(
            "`preprocessor` must be 'auto', None or a keras_hub Preprocessor; "
            f"got {preprocessor!r}."
        )

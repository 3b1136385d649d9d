"""The configs that a keras-hub-layout preset holds twice must agree.

keras-hub's layout stores some configs twice, and the two loaders read
different copies:

- `task.json` nests the backbone's config, which `config.json` holds
  too. keras-hub's loader builds the backbone from `config.json`; the
  zoo's `load_preset` builds the whole task from `task.json`.
- `task.json` nests the preprocessor's config, which `preprocessor.json`
  holds too. keras-hub reads `preprocessor.json`.
- `preprocessor.json` nests its image converter or tokenizer, which
  `image_converter.json` or `tokenizer.json` holds too. keras-hub reads
  those files only when it builds a default preprocessor.

If one copy were damaged, the two loaders would build different models
from one directory. `check_config_copies` refuses to load such a preset
and names the file and the first entry where the copies differ. The
layout stays keras-hub's, so that `keras_hub.models.Task.from_preset` and
`keras_hub.upload_preset` keep working.
"""

import os

from ensemble_zoo.presets.keras_hub_layout import CONFIG_FILE
from ensemble_zoo.presets.keras_hub_layout import TASK_CONFIG_FILE
from ensemble_zoo.presets.keras_hub_layout import strip_build_state
from ensemble_zoo.presets.preset_error import PresetError

PREPROCESSOR_FILE = "preprocessor.json"
#: Files holding a preprocessor component, with the entry of the
#: preprocessor's config that nests the same component.
COMPONENT_FILES = (("image_converter.json", "image_converter"), ("tokenizer.json", "tokenizer"))


def first_difference(a, b, path=""):
    """The first entry where two JSON values differ: `(path, a, b)` with a
    path such as `/config/num_layers`, or `None` if they are equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                return (f"{path}/{key}", a.get(key, "<missing>"), b.get(key, "<missing>"))
            found = first_difference(a[key], b[key], f"{path}/{key}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return (f"{path} (length)", len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    if a != b or type(a) is not type(b):
        return (path or "/", a, b)
    return None


def _compare(directory, copy_file, copy, nested_in, nested, what):
    found = first_difference(strip_build_state(copy), strip_build_state(nested))
    if found is None:
        return
    where, in_copy, in_nested = found
    raise PresetError(
        f"Damaged preset: {os.path.join(directory, copy_file)} and {what} in "
        f"{nested_in} differ at {where} ({_short(in_copy)} in {copy_file}, "
        f"{_short(in_nested)} in {nested_in}). keras-hub's loader reads "
        f"{copy_file} and the zoo's reads {nested_in}, so they would build "
        "different models. Restore the file from the preset's source, or "
        "load the right model and save it again with `save_to_preset`."
    )


def _short(value):
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_config_copies(directory, task_config, backbone_config, read_json):
    """Raises `PresetError` unless every config held twice agrees.

    Args:
        directory: the preset directory.
        task_config: the parsed `task.json`.
        backbone_config: the parsed `config.json`.
        read_json: `read_json(directory, filename)`, the loader's reader
            (errors name the file).
    """
    inner = task_config.get("config") if isinstance(task_config.get("config"), dict) else {}
    if "backbone" in inner:
        _compare(
            directory,
            CONFIG_FILE,
            backbone_config,
            TASK_CONFIG_FILE,
            inner["backbone"],
            "the backbone",
        )
    preprocessor = inner.get("preprocessor")
    has_file = os.path.isfile(os.path.join(directory, PREPROCESSOR_FILE))
    if preprocessor is None and has_file:
        raise PresetError(
            f"Damaged preset: {os.path.join(directory, PREPROCESSOR_FILE)} "
            f"exists, but the task in {TASK_CONFIG_FILE} has no preprocessor: "
            "keras-hub's loader would add one and the zoo's would not."
        )
    if preprocessor is None:
        return
    if not has_file:
        raise PresetError(
            f"Damaged preset: {os.path.join(directory, PREPROCESSOR_FILE)} is "
            f"missing, but the task in {TASK_CONFIG_FILE} has a preprocessor."
        )
    stored = read_json(directory, PREPROCESSOR_FILE)
    _compare(
        directory, PREPROCESSOR_FILE, stored, TASK_CONFIG_FILE, preprocessor, "the preprocessor"
    )
    components = stored.get("config") if isinstance(stored.get("config"), dict) else {}
    for filename, key in COMPONENT_FILES:
        if os.path.isfile(os.path.join(directory, filename)) and key in components:
            _compare(
                directory,
                filename,
                read_json(directory, filename),
                PREPROCESSOR_FILE,
                components[key],
                f"the {key.replace('_', ' ')}",
            )

"""The files of a preset directory and the checks of its weights files.

A preset directory holds `config.json` (the backbone's config),
`model.weights.h5`, `metadata.json` and, in keras-hub's layout, the task's
and the preprocessor's files (`keras_hub_layout`). A weights file is
checked before anything is built from it (`check_weights_file`): its
checksum against the metadata, its variables' paths, shapes and dtypes
against the file the model itself writes, and finite values.
"""

import hashlib
import os
import tempfile

import numpy as np

from ensemble_zoo.presets.keras_hub_layout import PREPROCESSOR_FILES
from ensemble_zoo.presets.keras_hub_layout import TASK_CONFIG_FILE
from ensemble_zoo.presets.keras_hub_layout import TASK_WEIGHTS_FILE
from ensemble_zoo.presets.preset_error import PresetError

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.weights.h5"
METADATA_FILE = "metadata.json"
#: The adapters of an adapter preset (`adapter_presets`).
ADAPTERS_FILE = "adapters.lora_ensemble.h5"

#: Every file a preset directory may hold.
PRESET_FILES = (
    CONFIG_FILE,
    WEIGHTS_FILE,
    METADATA_FILE,
    TASK_CONFIG_FILE,
    TASK_WEIGHTS_FILE,
) + PREPROCESSOR_FILES


def _h5_datasets(path):
    """`{variable path: (shape, dtype)}` of an HDF5 weights file."""
    import h5py

    found = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            found[name] = (tuple(obj.shape), np.dtype(obj.dtype).name)

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return found


def _dtype_kind(name):
    """`"float"` for every floating dtype name of an HDF5 dataset (h5py
    writes bfloat16 as the opaque `void16`), `"int"` for int32 and int64,
    else the name. Loading casts a float32 file's weights to
    the model's dtype policy (a float32 preset loads under
    `dtype="bfloat16"`), and integer weights to the backend's width (Keras
    lets the backend pick it: keras-hub's CLIP `position_ids` are int64
    under TensorFlow, int32 under JAX); any other dtype must match."""
    if name.startswith(("float", "bfloat")) or name == "void16":
        return "float"
    if name in ("int32", "int64"):
        return "int"
    return name


def _non_finite_variables(path):
    """Paths of floating-point variables holding NaN or infinity."""
    import h5py

    bad = []

    def visit(name, obj):
        if (
            isinstance(obj, h5py.Dataset)
            and np.issubdtype(obj.dtype, np.floating)
            and not is_optimizer_state(name)
            and not np.isfinite(obj[()]).all()
        ):
            bad.append(name)

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return bad


def file_sha256(path):
    """The SHA-256 hex digest of a file (`weights_sha256` in metadata)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_weights_file(write_reference, path, sha256=None, what="the model"):
    """Checks the file's checksum (when the metadata records one), then its
    variables by path, shape and dtype against the file that
    `write_reference(filepath)` writes, then that they are finite."""
    if sha256 is not None:
        if not isinstance(sha256, str):
            raise PresetError(
                f"Damaged preset: `weights_sha256` in the metadata.json next "
                f"to {path} must be a hex string; got {sha256!r}."
            )
        actual = file_sha256(path)
        if actual != sha256:
            raise PresetError(
                f"Damaged preset: {path} has SHA-256 {actual[:16]}..., but "
                f"metadata.json records {sha256[:16]}...: the file was "
                "changed or corrupted after the preset was saved."
            )
    try:
        found = _h5_datasets(path)
    except OSError as e:
        raise PresetError(
            f"Damaged preset: {path} is not a readable HDF5 weights file ({e})."
        ) from e
    with tempfile.TemporaryDirectory() as tmp:
        reference = os.path.join(tmp, WEIGHTS_FILE)
        write_reference(reference)
        expected = {k: v for k, v in _h5_datasets(reference).items() if not is_optimizer_state(k)}
    found = {k: v for k, v in found.items() if not is_optimizer_state(k)}
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    common = sorted(set(expected) & set(found))
    wrong = [k for k in common if expected[k][0] != found[k][0]]
    retyped = [
        k
        for k in common
        if k not in wrong
        and expected[k][1] != found[k][1]
        and not (found[k][1] == "float32" and _dtype_kind(expected[k][1]) == "float")
        and not (_dtype_kind(found[k][1]) == _dtype_kind(expected[k][1]) == "int")
    ]
    problems = [
        f"variable {k!r} has shape {found[k][0]}, the model expects {expected[k][0]}"
        for k in wrong[:5]
    ]
    problems += [
        f"variable {k!r} has dtype {found[k][1]}, the model expects {expected[k][1]}"
        for k in retyped[:5]
    ]
    if missing:
        problems.append(f"{len(missing)} variable(s) missing, e.g. {missing[:3]}")
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected variable(s), e.g. {unexpected[:3]}")
    if problems:
        raise PresetError(
            f"Damaged preset: {path} does not match {what}: " + "; ".join(problems) + "."
        )
    non_finite = _non_finite_variables(path)
    if non_finite:
        raise PresetError(
            f"Damaged preset: {path} holds NaN or infinite values in "
            f"{len(non_finite)} variable(s), e.g. {non_finite[:3]}."
        )


def is_optimizer_state(path):
    """Whether an HDF5 path is optimizer state: the model's own or that of
    a compiled sub-model (keras-hub tasks compile themselves, and under
    `mixed_float16` their optimizer is a LossScaleOptimizer with variables)."""
    return "optimizer" in path.split("/")


def strip_optimizer_state(path):
    """Presets hold model weights only: drop every optimizer's state."""
    import h5py

    with h5py.File(path, "a") as f:
        groups = []
        f.visit(lambda name: groups.append(name) if name.split("/")[-1] == "optimizer" else None)
        for name in sorted(groups, key=len, reverse=True):
            if name in f:
                del f[name]

"""Saving and loading a LoRA-Ensemble's trainable part: adapters and heads.

The file is HDF5 with one group per adapter (`adapters/<index>_<name>`,
datasets `lora_a` and `lora_b`) and a `head` group (`kernel`, `bias`).
Arrays are stored as NumPy float32 so any backend can read them.
"""

import os

import h5py
import keras
import numpy as np


def _entries(model):
    entries = {}
    for index, adapter in enumerate(model.adapters):
        group = f"adapters/{index:03d}_{adapter.name}"
        entries[f"{group}/lora_a"] = adapter.lora_a
        entries[f"{group}/lora_b"] = adapter.lora_b
    entries["head/kernel"] = model.head.kernel
    if model.head.bias is not None:
        entries["head/bias"] = model.head.bias
    return entries


def _check_path(filepath):
    filepath = os.fspath(filepath)
    if not filepath.endswith(".h5"):
        raise ValueError(f"Adapter weight files end in '.h5'; got {filepath!r}.")
    return filepath


def save(model, filepath):
    filepath = _check_path(filepath)
    with h5py.File(filepath, "w") as f:
        f.attrs["num_members"] = model.num_members
        f.attrs["rank"] = model.rank
        for key, variable in _entries(model).items():
            f.create_dataset(key, data=np.asarray(keras.ops.convert_to_numpy(variable)))


def load(model, filepath):
    filepath = _check_path(filepath)
    if not os.path.exists(filepath):
        raise ValueError(f"Adapter weight file {filepath!r} does not exist.")
    try:
        f = h5py.File(filepath, "r")
    except OSError as error:
        raise ValueError(
            f"Adapter weight file {filepath!r} is not a readable HDF5 file: {error}"
        ) from None
    with f:
        for attr in ("num_members", "rank"):
            stored = int(f.attrs.get(attr, -1))
            if stored != getattr(model, attr):
                raise ValueError(
                    f"Adapter weight file {filepath!r} holds {attr}={stored}; "
                    f"the model has {attr}={getattr(model, attr)}."
                )
        entries = _entries(model)
        values = {}
        for key, variable in entries.items():
            if key not in f:
                raise ValueError(
                    f"Adapter weight file {filepath!r} has no '{key}'; it was "
                    "saved from a model with other adapters or targets."
                )
            value = f[key][()]
            if tuple(value.shape) != tuple(variable.shape):
                raise ValueError(
                    f"Adapter weight file {filepath!r}: '{key}' has shape "
                    f"{tuple(value.shape)}, the model needs {tuple(variable.shape)}."
                )
            values[key] = value
        stored_adapters = set(f["adapters"]) if "adapters" in f else set()
        expected = {key.split("/")[1] for key in entries if key.startswith("adapters/")}
        if stored_adapters != expected:
            extra = sorted(stored_adapters - expected)
            raise ValueError(
                f"Adapter weight file {filepath!r} has adapters the model lacks: {extra}."
            )
    for key, variable in entries.items():
        variable.assign(values[key])

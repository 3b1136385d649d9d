"""LoRA-Ensemble adapter files: one format for the image, text and causal-LM
ensembles.

An adapter file holds only what training changes, a few MB where the
frozen model is GB: save the base model once (or keep its keras-hub
preset) and the ensemble as its adapters. It is HDF5 with

- attributes `format` (`FORMAT`), `format_version`, `backbone_class`
  (the keras-hub class the adapters sit on) and `method_config` (JSON of
  the backbone's LoRA-Ensemble arguments: members, rank, targets, scaling,
  seed);
- `adapters/<i>/lora_a` and `lora_b`, float32 whatever the variables'
  dtype (exact for bfloat16 and float16, which h5py cannot tag), with the
  adapted layer's path as the group's `base_layer` attribute, in the
  model's `adapters` order;
- for a classifier, `head/kernel` and `head/bias`: the members' heads.

The classifiers' files from before this format (groups
`adapters/<index>_<name>`, attributes `num_members` and `rank`, no
`format`) still load.
"""

import json
import os

import h5py
import numpy as np
from keras import ops

#: Marks a file written by `save_adapters`.
FORMAT = "ensemble_zoo.lora_ensemble_adapters"
FORMAT_VERSION = 1

#: Arguments of the ensembles' `from_keras_hub` that a file records (its
#: backbone's `method_config`).
BUILD_ARGUMENTS = ("num_members", "rank", "targets", "lora_alpha", "a_gain", "seed")
#: A causal LM's also: the adapted blocks (`None`, every one, where a file
#: does not record them).
CAUSAL_LM_BUILD_ARGUMENTS = BUILD_ARGUMENTS + ("layers",)


def save_adapters(model, filepath, suffix=".lora_ensemble.h5", head=None):
    """Writes `model`'s adapters (and `head`'s kernel and bias, when given)
    to `filepath`, a name ending in `suffix`."""
    filepath = check_suffix(filepath, suffix)
    if any(getattr(adapter, "blob", None) is not None for adapter in model.adapters):
        raise ValueError(
            "The adapters are BLoB's Gaussians (`blob`), which an adapter file does not "
            "hold: save the whole model, or its samples "
            "(`ensemble_zoo.training.blob_samples`)."
        )
    with h5py.File(filepath, "w") as f:
        f.attrs["format"] = FORMAT
        f.attrs["format_version"] = FORMAT_VERSION
        f.attrs["backbone_class"] = model.base_backbone_class.__name__
        f.attrs["method_config"] = json.dumps(model.method_config)
        for i, adapter in enumerate(model.adapters):
            group = f.create_group(f"adapters/{i}")
            # The adapted layer's path; an expert kernel's factors name
            # the kernel themselves (`LoRAEnsembleExpertKernel`).
            adapted = getattr(adapter, "base_layer", adapter)
            group.attrs["base_layer"] = adapted.path
            group["lora_a"] = _float32(adapter.lora_a)
            group["lora_b"] = _float32(adapter.lora_b)
        for name, variable in _head_variables(head):
            f[f"head/{name}"] = _float32(variable)


def load_adapters(model, filepath, suffix=".lora_ensemble.h5", head=None):
    """Assigns the adapters (and `head`'s weights) of a file written by
    `save_adapters` to `model`, after checking that the file is one, for
    the same base class, members, targets and shapes (a `ValueError` names
    the file and what differs). Nothing is assigned unless everything
    matches."""
    filepath = check_suffix(filepath, suffix)
    with _open(filepath) as f:
        if f.attrs.get("format") == FORMAT:
            values = _read(f, model, filepath, head)
        elif head is not None and "num_members" in f.attrs:
            values = _read_classifier_file(f, model, filepath, head)
        else:
            raise ValueError(
                f"'{filepath}' is not a LoRA-Ensemble adapter file (written by "
                "`save_adapters` or `save_adapter_weights`); for a keras-hub "
                "`.lora.h5` file use `LoRAEnsembleCausalLM.from_keras_hub_lora`."
            )
    for variable, value in values:
        variable.assign(value)


def read_build_arguments(filepath):
    """`(backbone class name, from_keras_hub arguments)` of a file written
    by `save_adapters`: what an ensemble needs to be built alike before
    `load_adapters` fills it."""
    filepath = check_suffix(filepath, ".h5")
    try:
        with h5py.File(filepath, "r") as f:
            if f.attrs.get("format") != FORMAT:
                raise ValueError(
                    f"'{filepath}' is not a LoRA-Ensemble adapter file (written by "
                    "`save_adapters`)."
                )
            backbone_class = str(f.attrs["backbone_class"])
            config = json.loads(f.attrs["method_config"])
    except (OSError, KeyError) as error:
        raise ValueError(
            f"'{filepath}' is not a readable LoRA-Ensemble adapter file: {error}"
        ) from None
    missing = [key for key in ("num_members", "rank", "targets") if key not in config]
    if missing:
        raise ValueError(f"'{filepath}' does not record {missing}.")
    return backbone_class, {k: config[k] for k in CAUSAL_LM_BUILD_ARGUMENTS if k in config}


def check_suffix(filepath, suffix):
    """`filepath` as a string; a `ValueError` unless it ends in `suffix`."""
    filepath = os.fspath(filepath)
    if not isinstance(filepath, str) or not filepath.endswith(suffix):
        raise ValueError(f"The file name must end in `{suffix}`; got {filepath!r}.")
    return filepath


def _read(f, model, filepath, head):
    """`[(variable, value)]` of a file in this format, checked."""
    adapters = model.adapters
    saved = json.loads(f.attrs["method_config"])
    expected = model.method_config
    differences = [
        f"{key}: file {saved.get(key)!r}, model {expected.get(key)!r}"
        for key in ("num_members", "targets", "rank", "lora_alpha", "layers")
        if _normalized(saved.get(key)) != _normalized(expected.get(key))
    ]
    base_name = model.base_backbone_class.__name__
    if f.attrs["backbone_class"] != base_name:
        differences.insert(0, f"backbone: file {f.attrs['backbone_class']}, model {base_name}")
    count = len(f["adapters"]) if "adapters" in f else 0
    if count != len(adapters):
        differences.append(f"adapters: file {count}, model {len(adapters)}")
    entries = []
    if not differences:
        for i, adapter in enumerate(adapters):
            group = f[f"adapters/{i}"]
            label = f"adapters/{i}/{{}} ({group.attrs['base_layer']})"
            entries += [
                (label.format("lora_a"), group["lora_a"], adapter.lora_a),
                (label.format("lora_b"), group["lora_b"], adapter.lora_b),
            ]
    stored_head = sorted(f["head"]) if "head" in f else []
    head_names = sorted(name for name, _ in _head_variables(head))
    if stored_head != head_names:
        differences.append(f"head: file {stored_head or 'none'}, model {head_names or 'none'}")
    elif not differences:
        entries += [(f"head/{n}", f[f"head/{n}"], v) for n, v in _head_variables(head)]
    values = []
    for label, dataset, variable in entries:
        if tuple(dataset.shape) != tuple(variable.shape):
            differences.append(
                f"{label}: file {tuple(dataset.shape)}, model {tuple(variable.shape)}"
            )
        values.append((variable, dataset[()]))
    if differences:
        raise ValueError(
            f"The adapters in '{filepath}' do not fit this model: " + "; ".join(differences) + "."
        )
    return values


def _read_classifier_file(f, model, filepath, head):
    """`[(variable, value)]` of a classifier's file from before this format
    (groups `adapters/<index>_<name>`), checked."""
    for attr in ("num_members", "rank"):
        stored = int(f.attrs.get(attr, -1))
        if stored != getattr(model, attr):
            raise ValueError(
                f"Adapter weight file {filepath!r} holds {attr}={stored}; "
                f"the model has {attr}={getattr(model, attr)}."
            )
    entries = {}
    for index, adapter in enumerate(model.adapters):
        group = f"adapters/{index:03d}_{adapter.name}"
        entries[f"{group}/lora_a"] = adapter.lora_a
        entries[f"{group}/lora_b"] = adapter.lora_b
    for name, variable in _head_variables(head):
        entries[f"head/{name}"] = variable
    values = []
    for key, variable in entries.items():
        if key not in f:
            raise ValueError(
                f"Adapter weight file {filepath!r} has no '{key}'; it was saved "
                "from a model with other adapters or targets."
            )
        value = f[key][()]
        if tuple(value.shape) != tuple(variable.shape):
            raise ValueError(
                f"Adapter weight file {filepath!r}: '{key}' has shape "
                f"{tuple(value.shape)}, the model needs {tuple(variable.shape)}."
            )
        values.append((variable, value))
    stored = set(f["adapters"]) if "adapters" in f else set()
    extra = sorted(stored - {key.split("/")[1] for key in entries if key.startswith("adapters/")})
    if extra:
        raise ValueError(f"Adapter weight file {filepath!r} has adapters the model lacks: {extra}.")
    return values


def _open(filepath):
    if not os.path.exists(filepath):
        raise ValueError(f"Adapter file {filepath!r} does not exist.")
    try:
        return h5py.File(filepath, "r")
    except OSError as error:
        raise ValueError(
            f"Adapter file {filepath!r} is not a readable HDF5 file: {error}"
        ) from None


def _head_variables(head):
    if head is None:
        return []
    pairs = [("kernel", head.kernel)]
    if head.bias is not None:
        pairs.append(("bias", head.bias))
    return pairs


def _float32(variable):
    return np.asarray(ops.convert_to_numpy(ops.cast(variable, "float32")))


def _normalized(value):
    if isinstance(value, (list, tuple)):
        return [_normalized(v) for v in value]
    if isinstance(value, dict):
        return {k: _normalized(v) for k, v in sorted(value.items())}
    return value

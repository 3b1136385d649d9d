"""Adapter files of a causal-LM LoRA-Ensemble: its own (adapters only) and
keras-hub's `.lora.h5` (one adapter per file, imported as one member).

An adapter file holds only the members' `A_m` and `B_m`, a few MB where
the frozen model is GB: save the base model once (or keep its keras-hub
preset) and the ensemble as its adapters.

keras-hub's `Backbone.enable_lora(rank)` gives each adapted `Dense` /
`EinsumDense` Keras' own factorization: `lora_kernel_a` of shape
`kernel.shape[:-1] + (rank,)` and `lora_kernel_b` `(rank,
kernel.shape[-1])`, so that the update is `a @ b` in the kernel's shape.
For a kernel with heads among its leading axes (Gemma's query `(heads,
dim, head_dim)`, Llama's `(dim, heads, head_dim)`) that is one rank-r
update per head with a `b` shared by the heads, which as one `d_in x
d_out` matrix (what a LoRA-Ensemble adapter holds) has rank up to
`heads * rank`. `keras_hub_lora_factors` writes it exactly as such a
matrix factorization, of rank `heads * rank`: `A` stacks the heads'
`a`, and `B` is block-diagonal with `b` on each block.
"""

import json

import h5py
import numpy as np
from keras import ops

from ensemble_zoo.layers.lora_ensemble_adapter import kernel_layout

#: Marks a file written by `save_adapters`.
FORMAT = "ensemble_zoo.lora_ensemble_adapters"
FORMAT_VERSION = 1


def save_adapters(model, filepath):
    """Writes `model`'s adapters (`A_m`, `B_m` of every adapter, and what
    they need to match a model) to `filepath` (`*.lora_ensemble.h5`)."""
    filepath = _check_path(filepath, ".lora_ensemble.h5")
    backbone = model.backbone
    with h5py.File(filepath, "w") as f:
        f.attrs["format"] = FORMAT
        f.attrs["format_version"] = FORMAT_VERSION
        f.attrs["backbone_class"] = type(backbone).base_cls().__name__
        f.attrs["method_config"] = json.dumps(backbone.method_config)
        for i, adapter in enumerate(backbone.adapters):
            group = f.create_group(f"adapters/{i}")
            group.attrs["base_layer"] = adapter.base_layer.path
            # float32 whatever the variables' dtype: exact for bfloat16 and
            # float16, which h5py cannot tag.
            group["lora_a"] = ops.convert_to_numpy(ops.cast(adapter.lora_a, "float32"))
            group["lora_b"] = ops.convert_to_numpy(ops.cast(adapter.lora_b, "float32"))


def load_adapters(model, filepath):
    """Assigns the adapters saved by `save_adapters` to `model`, after
    checking that the file is one, for the same base class, members,
    targets and shapes (a `ValueError` names the file and what differs).
    Nothing is assigned unless everything matches."""
    filepath = _check_path(filepath, ".lora_ensemble.h5")
    backbone = model.backbone
    adapters = backbone.adapters
    with h5py.File(filepath, "r") as f:
        if f.attrs.get("format") != FORMAT:
            raise ValueError(
                f"'{filepath}' is not a LoRA-Ensemble adapter file (written "
                "by `save_adapters`); for a keras-hub `.lora.h5` file use "
                "`LoRAEnsembleCausalLM.from_keras_hub_lora`."
            )
        saved = json.loads(f.attrs["method_config"])
        expected = backbone.method_config
        base_name = type(backbone).base_cls().__name__
        differences = [
            f"{key}: file {saved.get(key)!r}, model {expected[key]!r}"
            for key in ("num_members", "targets", "rank", "lora_alpha")
            if _normalized(saved.get(key)) != _normalized(expected[key])
        ]
        if f.attrs["backbone_class"] != base_name:
            differences.insert(0, f"backbone: file {f.attrs['backbone_class']}, model {base_name}")
        count = len(f["adapters"]) if "adapters" in f else 0
        if count != len(adapters):
            differences.append(f"adapters: file {count}, model {len(adapters)}")
        arrays = []
        if not differences:
            for i, adapter in enumerate(adapters):
                group = f[f"adapters/{i}"]
                a, b = group["lora_a"][()], group["lora_b"][()]
                for name, array, variable in (
                    ("lora_a", a, adapter.lora_a),
                    ("lora_b", b, adapter.lora_b),
                ):
                    if tuple(array.shape) != tuple(variable.shape):
                        differences.append(
                            f"adapters/{i}/{name} ({group.attrs['base_layer']}): "
                            f"file {tuple(array.shape)}, model {tuple(variable.shape)}"
                        )
                arrays.append((a, b))
        if differences:
            raise ValueError(
                f"The adapters in '{filepath}' do not fit this model: "
                + "; ".join(differences)
                + "."
            )
    for adapter, (a, b) in zip(adapters, arrays):
        adapter.lora_a.assign(a)
        adapter.lora_b.assign(b)


#: Arguments of `LoRAEnsembleCausalLM.from_keras_hub` an adapter file
#: records (its backbone's `method_config`).
BUILD_ARGUMENTS = ("num_members", "rank", "targets", "lora_alpha", "a_gain", "seed")


def read_build_arguments(filepath):
    """`(backbone class name, from_keras_hub arguments)` of a file written
    by `save_adapters`: what an ensemble needs to be built alike before
    `load_adapters` fills it."""
    filepath = _check_path(filepath, ".lora_ensemble.h5")
    try:
        with h5py.File(filepath, "r") as f:
            if f.attrs.get("format") != FORMAT:
                raise ValueError(
                    f"'{filepath}' is not a LoRA-Ensemble adapter file (written "
                    "by `save_adapters`)."
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
    return backbone_class, {k: config[k] for k in BUILD_ARGUMENTS if k in config}


def read_keras_hub_lora(filepath):
    """`(rank, {layer_index: (lora_kernel_a, lora_kernel_b)})` of a file
    written by keras-hub's `Backbone.save_lora_weights` (layers indexed
    as keras-hub does: among the backbone's weighted layers, in
    `_flatten_layers` order)."""
    filepath = _check_path(filepath, ".lora.h5")
    try:
        with h5py.File(filepath, "r") as f:
            rank = int(f["lora/vars/rank"][()])
            layers = {
                int(key): (
                    _float32(f[f"lora/{key}/vars/lora_kernel_a"]),
                    _float32(f[f"lora/{key}/vars/lora_kernel_b"]),
                )
                for key in f["lora"]
                if key != "vars"
            }
    except (KeyError, ValueError, OSError) as error:
        raise ValueError(
            f"'{filepath}' is not a keras-hub LoRA file (written by "
            f"`Backbone.save_lora_weights`): {error}"
        ) from None
    if not layers:
        raise ValueError(f"'{filepath}' holds no adapted layer.")
    return rank, layers


def keras_hub_lora_factors(base_layer, lora_kernel_a, lora_kernel_b):
    """Keras' factorization of an update to `base_layer`'s kernel as the
    matrix factors `(A, B)`, `(d_in, R)` and `(R, d_out)`, of a
    LoRA-Ensemble adapter on it (exact: `B` has zeros off its blocks).

    `R` is `rank` times the size of the kernel's produced axes other than
    its last (the heads of an attention projection; 1 for `Dense`).
    """
    d_in, d_out, n_in, _, permutation = kernel_layout(base_layer)
    kernel_shape = tuple(base_layer.kernel.shape)
    last = len(kernel_shape) - 1
    a = np.asarray(lora_kernel_a)
    b = np.asarray(lora_kernel_b)
    rank = b.shape[0]
    if a.shape != kernel_shape[:-1] + (rank,) or b.shape != (rank, kernel_shape[-1]):
        raise ValueError(
            f"keras-hub LoRA factors {a.shape} and {b.shape} do not fit "
            f"'{base_layer.path}' (kernel {kernel_shape}): expected "
            f"{kernel_shape[:-1] + (rank,)} and {(rank, kernel_shape[-1])}."
        )
    contracted = list(permutation[:n_in])
    produced = list(permutation[n_in:])
    if last not in produced:
        raise ValueError(
            f"'{base_layer.path}' contracts its kernel's last axis; keras-hub "
            "LoRA factors of such a layer cannot be imported."
        )
    others = [k for k in produced if k != last]  # the heads
    heads = int(np.prod([kernel_shape[k] for k in others], dtype=np.int64))
    # A: (contracted..., others..., rank) -> (d_in, heads * rank).
    a_matrix = np.transpose(a, contracted + others + [last]).reshape(d_in, heads * rank)
    # B: block-diagonal over the heads, columns in the matrix's order.
    other_shape = tuple(kernel_shape[k] for k in others)
    eye = np.eye(heads, dtype=b.dtype).reshape((heads,) + other_shape)
    blocks = eye[:, None, ..., None] * b.reshape((1, rank) + (1,) * len(others) + (b.shape[1],))
    order = [others.index(k) if k != last else len(others) for k in produced]
    blocks = np.transpose(blocks, [0, 1] + [2 + i for i in order])
    b_matrix = blocks.reshape(heads * rank, d_out)
    return a_matrix, b_matrix


def _float32(dataset):
    """An h5py dataset as float32. Keras' `H5IOStore` writes bfloat16 as
    2-byte opaque data tagged `dtype="bfloat16"`, which h5py reads as raw
    bytes."""
    values = dataset[()]
    if dataset.attrs.get("dtype") == "bfloat16" or values.dtype.kind == "V":
        import ml_dtypes

        values = np.asarray(values).view(ml_dtypes.bfloat16)
    return np.asarray(values, "float32")


def _check_path(filepath, suffix):
    filepath = str(filepath)
    if not filepath.endswith(suffix):
        raise ValueError(f"The file name must end in `{suffix}`; got '{filepath}'.")
    return filepath


def _normalized(value):
    if isinstance(value, (list, tuple)):
        return [_normalized(v) for v in value]
    if isinstance(value, dict):
        return {k: _normalized(v) for k, v in sorted(value.items())}
    return value

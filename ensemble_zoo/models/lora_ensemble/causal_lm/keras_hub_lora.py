"""keras-hub's LoRA files (`Backbone.save_lora_weights`, `*.lora.h5`: one
adapter per file), read as LoRA-Ensemble members.

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

import h5py
import numpy as np

from ensemble_zoo.layers.lora_ensemble_adapter import kernel_layout
from ensemble_zoo.models.lora_ensemble.adapter_files import check_suffix


def read_keras_hub_lora(filepath):
    """`(rank, {layer_index: (lora_kernel_a, lora_kernel_b)})` of a file
    written by keras-hub's `Backbone.save_lora_weights` (layers indexed
    as keras-hub does: among the backbone's weighted layers, in
    `_flatten_layers` order)."""
    filepath = check_suffix(filepath, ".lora.h5")
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

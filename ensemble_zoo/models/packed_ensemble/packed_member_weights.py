"""Member `m` of a Packed-Ensembles ViT as plain keras-hub weights.

The fused model stores member `m`'s groups `m * gamma + j` side by side;
a member alone is a keras-hub ViT whose attention and MLP kernels are
block-diagonal with those `gamma` blocks (zeros elsewhere) and whose
embedding, layer norms and head are its slices.
"""

import numpy as np

from ensemble_zoo.models.hydra.member_weights import to_numpy


def block_diagonal(blocks, row_axis, col_axis):
    """Places `blocks` (equal shapes) on the diagonal of `(row_axis,
    col_axis)`; the other axes of the result are the blocks' own."""
    count = len(blocks)
    shape = list(blocks[0].shape)
    rows, cols = shape[row_axis], shape[col_axis]
    shape[row_axis] *= count
    shape[col_axis] *= count
    out = np.zeros(shape, blocks[0].dtype)
    for j, block in enumerate(blocks):
        index = [slice(None)] * len(shape)
        index[row_axis] = slice(j * rows, (j + 1) * rows)
        index[col_axis] = slice(j * cols, (j + 1) * cols)
        out[tuple(index)] = block
    return out


def _groups(variable, member, gamma):
    values = to_numpy(variable)
    return [values[member * gamma + j] for j in range(gamma)]


def _concat(variable, member, gamma, axis=0):
    return np.concatenate(_groups(variable, member, gamma), axis=axis)


def _assign(target, value):
    if tuple(target.shape) != tuple(value.shape):
        raise RuntimeError(
            f"Shape mismatch writing '{target.path}': {tuple(target.shape)} "
            f"vs {tuple(value.shape)}."
        )
    target.assign(value.astype(target.dtype))


def load_member_into_keras_hub(model, vit_classifier, member):
    """Writes member `member` of the `PackedEnsembleImageClassifier`
    `model` into a built keras-hub `ViTImageClassifier` of the member's
    geometry."""
    backbone = model.backbone
    gamma, width = backbone.gamma, backbone.member_hidden_dim
    columns = slice(member * width, (member + 1) * width)
    vit = vit_classifier.backbone
    embedding = vit.get_layer("vit_patching_and_embedding")
    for target, source in zip(embedding.weights, backbone.embedding.weights, strict=True):
        _assign(target, to_numpy(source)[..., columns])
    encoder = vit.get_layer("vit_encoder")
    for block, packed in zip(encoder.encoder_layers, backbone.encoder_blocks, strict=True):
        attention = packed.attention
        for target, norm in ((block.layer_norm_1, packed.ln_1), (block.layer_norm_2, packed.ln_2)):
            _assign(target.gamma, to_numpy(norm.gamma)[member])
            _assign(target.beta, to_numpy(norm.beta)[member])
        mha = block.mha
        for dense, name in (
            (mha._query_dense, "query"),
            (mha._key_dense, "key"),
            (mha._value_dense, "value"),
        ):
            kernel = getattr(attention, f"{name}_kernel")
            _assign(dense.kernel, block_diagonal(_groups(kernel, member, gamma), 0, 1))
            bias = getattr(attention, f"{name}_bias")
            if bias is not None:
                _assign(dense.bias, _concat(bias, member, gamma))
        out = mha._output_dense
        _assign(out.kernel, block_diagonal(_groups(attention.output_kernel, member, gamma), 0, 2))
        if attention.output_bias is not None:
            _assign(out.bias, _concat(attention.output_bias, member, gamma))
        for target, source in (
            (block.mlp.dense_1, packed.dense_1),
            (block.mlp.dense_2, packed.dense_2),
        ):
            _assign(target.kernel, block_diagonal(_groups(source.kernel, member, gamma), 0, 1))
            if source.bias is not None:
                _assign(target.bias, _concat(source.bias, member, gamma))
    _assign(encoder.layer_norm.gamma, to_numpy(backbone.layer_norm.gamma)[member])
    _assign(encoder.layer_norm.beta, to_numpy(backbone.layer_norm.beta)[member])
    _assign(vit_classifier.output_dense.kernel, to_numpy(model.head.kernel)[member])
    _assign(vit_classifier.output_dense.bias, to_numpy(model.head.bias)[member])

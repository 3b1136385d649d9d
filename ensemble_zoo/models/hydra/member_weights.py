"""Per-member weights of ViT-style Hydra models, as plain NumPy.

A *member spec* is what one ensemble member consists of, independent of
how it is stored: the shared embedding weights, per layer the layer norms,
its kept attention heads (query / key / value kernels `(dim, heads,
key_dim)` and biases `(heads, key_dim)`, output kernel `(heads, key_dim,
dim)` and bias `(dim,)`) and its MLP, the final layer norm and the
classifier. Conversions (keras-hub -> Hydra, fused -> members, members ->
fused) read and write member specs, so each is written once.
"""

import numpy as np
from keras import ops


def to_numpy(variable):
    return None if variable is None else np.asarray(ops.convert_to_numpy(variable))


def _mha_heads(mha, keep):
    """Kept heads (a list of indices) of a keras MultiHeadAttention."""
    out = {}
    for name, dense in (
        ("query", mha._query_dense),
        ("key", mha._key_dense),
        ("value", mha._value_dense),
    ):
        bias = to_numpy(dense.bias)
        out[name] = (to_numpy(dense.kernel)[:, keep], None if bias is None else bias[keep])
    out["output"] = (to_numpy(mha._output_dense.kernel)[keep], to_numpy(mha._output_dense.bias))
    return out


def _norm(layer):
    return (to_numpy(layer.gamma), to_numpy(layer.beta))


def _dense(layer):
    return (to_numpy(layer.kernel), to_numpy(layer.bias))


def _embedding_weights(layers):
    return [to_numpy(w) for layer in layers for w in layer.weights]


def check_head_masks(head_masks, num_layers, num_heads):
    """`(members, layers, heads)` 0/1 masks as a bool array, or raises."""
    masks = np.asarray(head_masks)
    if masks.ndim == 2:
        masks = masks[None]
    if masks.ndim != 3 or masks.shape[1:] != (num_layers, num_heads):
        raise ValueError(
            "`head_masks` must have shape (members, num_layers, num_heads) = "
            f"(M, {num_layers}, {num_heads}); got shape {masks.shape}."
        )
    if not np.isin(masks, (0, 1)).all():
        raise ValueError("`head_masks` must hold only 0/1 (or bool) values.")
    return masks.astype(bool)


def _pruned_specs(masks, blocks, embedding, key, weights, head):
    """Member specs of a keras-hub model pruned by `masks`.

    Args:
        masks: `(members, layers, heads)` bool head masks.
        blocks: per layer, its `(attention, ln_1, ln_2, dense_1, dense_2)`
            layers (a keras `MultiHeadAttention`, the two layer norms and
            the two MLP layers).
        embedding: the embedding weights, shared by every member.
        key, weights: the spec entry for the layer after the blocks (`"ln"`,
            the final layer norm, or `"pooler"`) and its weights.
        head: the classifier's weights.
    """
    specs = []
    for member_mask in masks:
        layers = []
        for (attention, ln_1, ln_2, dense_1, dense_2), keep in zip(blocks, member_mask):
            layer = _mha_heads(attention, np.flatnonzero(keep))
            layer["ln_1"] = _norm(ln_1)
            layer["ln_2"] = _norm(ln_2)
            layer["mlp"] = _dense(dense_1) + _dense(dense_2)
            layers.append(layer)
        specs.append({"embedding": embedding, "layers": layers, key: weights, "head": head})
    return specs


def specs_from_keras_hub(classifier, head_masks):
    """Member specs of a keras-hub `ViTImageClassifier` pruned by masks."""
    backbone = classifier.backbone
    encoder = backbone.get_layer("vit_encoder")
    embedding = backbone.get_layer("vit_patching_and_embedding")
    masks = check_head_masks(head_masks, backbone.num_layers, backbone.num_heads)
    blocks = [
        (block.mha, block.layer_norm_1, block.layer_norm_2, block.mlp.dense_1, block.mlp.dense_2)
        for block in encoder.encoder_layers
    ]
    return _pruned_specs(
        masks,
        blocks,
        _embedding_weights([embedding]),
        "ln",
        _norm(encoder.layer_norm),
        _dense(classifier.output_dense),
    )


def _block_spec(block, m):
    """Member `m`'s weights in one `HydraEncoderBlock`."""
    attention = block.attention
    count = attention.member_num_heads[m]
    active = np.flatnonzero(to_numpy(attention.head_mask)[m] > 0)
    if len(active) != count or (count and active[-1] != count - 1):
        raise ValueError(
            f"Layer '{block.name}', member {m}: the head mask was changed "
            "from the packed layout (first member_num_heads slots)."
        )
    layer = {}
    for name in ("query", "key", "value"):
        bias = to_numpy(getattr(attention, f"{name}_bias"))
        layer[name] = (
            to_numpy(getattr(attention, f"{name}_kernel"))[m, :, :count],
            None if bias is None else bias[m, :count],
        )
    out_bias = to_numpy(attention.output_bias)
    layer["output"] = (
        to_numpy(attention.output_kernel)[m, :count],
        None if out_bias is None else out_bias[m],
    )
    layer["ln_1"] = tuple(w[m] for w in _norm(block.ln_1))
    layer["ln_2"] = tuple(w[m] for w in _norm(block.ln_2))
    mlp = _dense(block.dense_1) + _dense(block.dense_2)
    if block.mlp == "grouped":
        mlp = tuple(None if w is None else w[m] for w in mlp)
    layer["mlp"] = mlp
    return layer


def _member_specs(model, embedding_layers, key, member_weights):
    """Member specs of a Hydra classifier: the shared embedding, member
    `m`'s blocks, its slice of the per-member `member_weights` (stored
    under `key`) and of the head."""
    backbone = model.backbone
    embedding = _embedding_weights(embedding_layers)
    head = _dense(model.head)
    return [
        {
            "embedding": embedding,
            "layers": [_block_spec(block, m) for block in backbone.encoder_blocks],
            key: tuple(w[m] for w in member_weights),
            "head": tuple(w[m] for w in head),
        }
        for m in range(model.num_members)
    ]


def specs_from_hydra(model):
    """Member specs of a `HydraImageClassifier` (one per member)."""
    backbone = model.backbone
    return _member_specs(model, [backbone.embedding], "ln", _norm(backbone.layer_norm))


def _stack_into(variable, values):
    variable.assign(np.stack(values).astype(variable.dtype))


def _load_shared_embedding(variables, specs):
    reference = specs[0]["embedding"]
    for m, spec in enumerate(specs[1:], start=1):
        if any(not np.array_equal(a, b) for a, b in zip(reference, spec["embedding"])):
            raise ValueError(
                f"Member {m}'s embedding differs from member 0's; Hydra "
                "members share one embedding (freeze it while fine-tuning "
                "members)."
            )
    for variable, value in zip(variables, reference):
        variable.assign(value)


def load_block_specs(blocks, specs):
    """Writes the members' per-layer specs into `HydraEncoderBlock`s.

    Member `m`'s kept heads go to its first head slots (unused slots are
    zeroed). A merged (`mlp="merge"`) MLP gets the mean of the members'
    MLP weights; a grouped one gets each member's own.
    """
    for index, block in enumerate(blocks):
        layers = [spec["layers"][index] for spec in specs]
        attention = block.attention
        for name in ("query", "key", "value", "output"):
            kernel_var = getattr(attention, f"{name}_kernel")
            bias_var = getattr(attention, f"{name}_bias")
            kernel = np.zeros(kernel_var.shape, "float32")
            bias = None if bias_var is None else np.zeros(bias_var.shape, "float32")
            for m, layer in enumerate(layers):
                k, b = layer[name]
                count = k.shape[0] if name == "output" else k.shape[1]
                if count != attention.member_num_heads[m]:
                    raise ValueError(
                        f"Layer {index}, member {m}: {count} heads given, the "
                        f"model keeps {attention.member_num_heads[m]}."
                    )
                if name == "output":
                    kernel[m, :count] = k
                    if bias is not None:
                        bias[m] = b
                else:
                    kernel[m, :, :count] = k
                    if bias is not None:
                        bias[m, :count] = b
            kernel_var.assign(kernel)
            if bias_var is not None:
                bias_var.assign(bias)
        attention.head_mask.assign(
            np.array(
                [
                    [1.0 if s < c else 0.0 for s in range(attention.num_heads)]
                    for c in attention.member_num_heads
                ],
                "float32",
            )
        )
        for norm_name in ("ln_1", "ln_2"):
            norm = getattr(block, norm_name)
            _stack_into(norm.gamma, [layer[norm_name][0] for layer in layers])
            _stack_into(norm.beta, [layer[norm_name][1] for layer in layers])
        dense_vars = [
            block.dense_1.kernel,
            block.dense_1.bias,
            block.dense_2.kernel,
            block.dense_2.bias,
        ]
        for position, variable in enumerate(dense_vars):
            if variable is None:
                continue
            values = [layer["mlp"][position] for layer in layers]
            if block.mlp == "merge":
                variable.assign(np.mean(values, axis=0).astype(variable.dtype))
            else:
                _stack_into(variable, values)


def _load_member_specs(model, specs, embedding_layers, key, member_variables):
    """Writes member specs into a built Hydra classifier: the shared
    embedding, the blocks, the per-member `member_variables` (from each
    spec's `key` entry) and the head."""
    backbone = model.backbone
    _load_shared_embedding([w for layer in embedding_layers for w in layer.weights], specs)
    load_block_specs(backbone.encoder_blocks, specs)
    for name, variables in (
        (key, member_variables),
        ("head", (model.head.kernel, model.head.bias)),
    ):
        for index, variable in enumerate(variables):
            _stack_into(variable, [s[name][index] for s in specs])


def load_specs(model, specs):
    """Writes member specs into a built `HydraImageClassifier`."""
    norm = model.backbone.layer_norm
    _load_member_specs(model, specs, [model.backbone.embedding], "ln", (norm.gamma, norm.beta))


def text_specs_from_keras_hub(classifier, head_masks):
    """Member specs of a keras-hub `BertTextClassifier` pruned by masks."""
    backbone = classifier.backbone
    masks = check_head_masks(head_masks, backbone.num_layers, backbone.num_heads)
    embedding = _embedding_weights(
        [
            backbone.get_layer(name)
            for name in (
                "token_embedding",
                "position_embedding",
                "segment_embedding",
                "embeddings_layer_norm",
            )
        ]
    )
    blocks = [
        (
            block._self_attention_layer,
            block._self_attention_layer_norm,
            block._feedforward_layer_norm,
            block._feedforward_intermediate_dense,
            block._feedforward_output_dense,
        )
        for block in backbone.transformer_layers
    ]
    return _pruned_specs(
        masks,
        blocks,
        embedding,
        "pooler",
        _dense(backbone.get_layer("pooled_dense")),
        _dense(classifier.output_dense),
    )


def text_specs_from_hydra(model):
    """Member specs of a `HydraTextClassifier` (one per member)."""
    backbone = model.backbone
    pooler = _dense(backbone.pooled_dense)
    return _member_specs(model, backbone.embedding_layers, "pooler", pooler)


def load_text_specs(model, specs):
    """Writes member specs into a built `HydraTextClassifier`."""
    backbone = model.backbone
    pooler = (backbone.pooled_dense.kernel, backbone.pooled_dense.bias)
    _load_member_specs(model, specs, backbone.embedding_layers, "pooler", pooler)

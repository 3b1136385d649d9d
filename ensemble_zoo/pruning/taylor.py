"""First-order Taylor importance of attention heads (the Hydra paper,
"Ensembling Pruned Attention Heads for Uncertainty-Aware Efficient
Transformers", App. D.1.1)."""

import numpy as np
from keras import ops

from ensemble_zoo.evaluation.prediction import iterate_batches
from ensemble_zoo.utils.gradients import loss_gradients

_PROJECTIONS = ("query", "key", "value")


def _summed_member_loss(y, member_logits):
    """Sum over members of each member's mean cross-entropy, so member
    `m`'s gradient is that of its own loss alone."""
    labels = ops.cast(ops.reshape(y, (-1,)), "int32")
    log_probs = ops.log_softmax(member_logits, axis=-1)
    one_hot = ops.one_hot(labels, ops.shape(member_logits)[-1])[:, None, :]
    return -ops.sum(ops.mean(ops.sum(one_hot * log_probs, axis=-1), axis=0))


def taylor_head_importance(model, data, batch_size=64, layers=None):
    """Taylor importance of every head slot: mean |weight x gradient|.

    For head `h` of layer `l` and member `m`, the score is the mean of
    `|W * dL/dW|` over the head's slice of the query, key and value kernels
    (`(dim, key_dim)` each), averaged over the three (App. D.1.1; biases
    and the output kernel are not used). `dL/dW` is the gradient of the
    member's **mean** cross-entropy over all of `data`, accumulated over
    batches (weighted by batch size), so the scores do not depend on how
    the data is split into batches. Masked head slots get score 0.

    Args:
        model: a `HydraImageClassifier` (use `from_keras_hub(vit)` for a
            keras-hub ViT; members are scored independently).
        data: labelled calibration data, `(x, y)` arrays or a
            `tf.data.Dataset`.
        batch_size: int, batch size for arrays. Defaults to `64`.
        layers: optional list of layer indices to score (others get 0).

    Returns:
        NumPy array `(members, num_layers, head_slots)`, where head_slots
        is the largest slot count over layers.
    """
    blocks = model.backbone.encoder_blocks
    layers = list(range(len(blocks))) if layers is None else list(layers)
    variables = []
    for layer in layers:
        attention = blocks[layer].attention
        variables += [getattr(attention, f"{p}_kernel") for p in _PROJECTIONS]
    sums = [np.zeros(v.shape, np.float64) for v in variables]
    total = 0
    rank = len(model.member_input_shape)
    for x, y in iterate_batches(data, batch_size, "data", rank):
        if y is None:
            raise ValueError("`data` needs labels: pass `(x, y)`.")
        n = x.shape[0]
        grads = loss_gradients(model, _summed_member_loss, x, y, variables)
        for s, g in zip(sums, grads):
            s += g * n
        total += n
    slots = max(b.attention.num_heads for b in blocks)
    scores = np.zeros((model.num_members, len(blocks), slots))
    for i, layer in enumerate(layers):
        attention = blocks[layer].attention
        per_projection = []
        for j in range(3):
            weight = np.asarray(ops.convert_to_numpy(variables[3 * i + j]))
            grad = sums[3 * i + j] / total
            # (members, dim, heads, key_dim) -> mean over dim and key_dim.
            per_projection.append(np.abs(weight * grad).mean(axis=(1, 3)))
        head_scores = np.mean(per_projection, axis=0)
        head_scores *= np.asarray(ops.convert_to_numpy(attention.head_mask))
        scores[:, layer, : attention.num_heads] = head_scores
    return scores


def _as_arrays(data):
    if isinstance(data, (tuple, list)) and len(data) == 2:
        return np.asarray(data[0]), np.asarray(data[1])
    raise ValueError("`data` must be `(x, y)` arrays for subset sampling.")


def taylor_member_masks(
    model, data, heads_to_prune, num_members=1, seed=0, calibration_size=None, batch_size=64
):
    """Member head masks by Taylor importance, pruned layer by layer.

    For each member: score the heads of layer 0 on the calibration data,
    prune the `heads_to_prune[0]` lowest, recompute the gradients of the
    partly pruned network, score layer 1, and so on (the paper's
    sequential prune-recompute, App. D.1.1). The paper does not say how
    Taylor members differ; here member `m` scores on its own random
    calibration subset of `calibration_size` samples drawn with seed
    `seed + m` (the recommendation of `../notes/hydra.md`). With
    `calibration_size=None` every member uses all of `data` and the
    members are identical.

    Args:
        model: a one-member `HydraImageClassifier` keeping every head
            (`HydraImageClassifier.from_keras_hub(vit)`); its head masks
            are used as scratch space and restored afterwards.
        data: labelled calibration data `(x, y)` arrays.
        heads_to_prune: int (every layer) or list of ints per layer.
        num_members: int. Defaults to `1`.
        seed: int. Defaults to `0`.
        calibration_size: optional int, samples per member.
        batch_size: int.

    Returns:
        bool array `(num_members, num_layers, num_heads)`, True = kept.
    """
    blocks = model.backbone.encoder_blocks
    num_layers, num_heads = len(blocks), model.backbone.num_heads
    if model.num_members != 1 or any(b.attention.num_heads != num_heads for b in blocks):
        raise ValueError(
            "`model` must be a one-member HydraImageClassifier keeping every "
            "head; build it with HydraImageClassifier.from_keras_hub(vit)."
        )
    if isinstance(heads_to_prune, int):
        heads_to_prune = [heads_to_prune] * num_layers
    heads_to_prune = list(heads_to_prune)
    if len(heads_to_prune) != num_layers or not all(0 <= r <= num_heads for r in heads_to_prune):
        raise ValueError(
            f"`heads_to_prune` must be an int or {num_layers} ints in [0, "
            f"{num_heads}]; got {heads_to_prune!r}."
        )
    x, y = _as_arrays(data)
    if calibration_size is not None and not 0 < calibration_size <= len(x):
        raise ValueError(f"`calibration_size` must be in [1, {len(x)}]; got {calibration_size}.")
    saved = [np.asarray(ops.convert_to_numpy(b.attention.head_mask)) for b in blocks]
    masks = np.ones((num_members, num_layers, num_heads), bool)
    try:
        for m in range(num_members):
            if calibration_size is None:
                subset = (x, y)
            else:
                rng = np.random.default_rng(seed + m)
                index = rng.choice(len(x), calibration_size, replace=False)
                subset = (x[index], y[index])
            for block in blocks:
                block.attention.head_mask.assign(np.ones((1, num_heads), "float32"))
            for layer, block in enumerate(blocks):
                scores = taylor_head_importance(
                    model, subset, batch_size=batch_size, layers=[layer]
                )[0, layer]
                drop = np.argsort(scores, kind="stable")[: heads_to_prune[layer]]
                masks[m, layer, drop] = False
                block.attention.head_mask.assign(masks[m, layer][None].astype("float32"))
    finally:
        for block, value in zip(blocks, saved):
            block.attention.head_mask.assign(value)
    return masks

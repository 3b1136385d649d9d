"""Turning a keras-hub transformer into a BatchEnsemble, in place."""

import keras
import numpy as np

from ensemble_zoo.layers.batch_ensemble_dense import BatchEnsembleDense
from ensemble_zoo.layers.lora_ensemble_adapter import projection_layout
from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import ATTENTION_PROJECTIONS
from ensemble_zoo.utils.naming import path_scope
from ensemble_zoo.utils.sublayers import replace_sublayer
from ensemble_zoo.utils.validation import check_positive_int


def projection_sites(backbone):
    """`(parent, attribute)` of every dense projection BatchEnsemble
    replaces, in a fixed order: the query, key, value and output
    projections of each `keras.layers.MultiHeadAttention`, and every
    `keras.layers.Dense` held by a (non-functional) layer inside the
    backbone, i.e. the MLP of keras-hub's ViT and BERT blocks. Embeddings,
    layer norms, the patch convolution and a functional pooler stay
    shared."""
    sites = []
    for layer in backbone._flatten_layers(include_self=False):
        if isinstance(layer, keras.layers.MultiHeadAttention):
            for attribute in ATTENTION_PROJECTIONS.values():
                sites.append((layer, attribute))
        elif not isinstance(layer, keras.Model):
            # Under PyTorch, sublayers live in torch's `_modules`, not in
            # the instance `__dict__`.
            names = set(vars(layer)) | set(getattr(layer, "_modules", None) or {})
            for attribute in sorted(names):
                value = getattr(layer, attribute, None)
                if isinstance(value, (keras.layers.Dense, BatchEnsembleDense)):
                    sites.append((layer, attribute))
    return sites


def batch_ensemble_layers(model):
    """The `BatchEnsembleDense` layers that replaced the backbone's
    projections, in `projection_sites` order."""
    return [
        getattr(parent, attribute)
        for parent, attribute in projection_sites(model)
        if isinstance(getattr(parent, attribute), BatchEnsembleDense)
    ]


def batch_ensemble_from(
    layer, num_members, fast_weight_initializer="normal", fast_weight_stddev=0.5, seed=None
):
    """A built `BatchEnsembleDense` computing `layer` (a built `Dense` or
    `EinsumDense`) for every member: its kernel is the shared `W`, its bias
    every member's starting bias; only the fast weights are new."""
    d_in, d_out, n_in, _ = projection_layout(layer)
    activation = getattr(layer, "activation", None)
    kernel_shape = tuple(layer.kernel.shape)
    units = kernel_shape[n_in:]
    new = BatchEnsembleDense(
        units if len(units) > 1 else units[0],
        num_members,
        num_input_axes=n_in,
        activation=activation,
        fast_weight_initializer=fast_weight_initializer,
        fast_weight_stddev=fast_weight_stddev,
        seed=seed,
        dtype=layer.dtype_policy,
        name=f"{layer.name}_batch_ensemble",
    )
    new.build((None,) + kernel_shape[:n_in])
    kernel = np.asarray(keras.ops.convert_to_numpy(layer.kernel))
    new.kernel.assign(kernel.reshape(d_in, d_out))
    bias = getattr(layer, "bias", None)
    if bias is not None:
        bias = np.broadcast_to(np.asarray(keras.ops.convert_to_numpy(bias)), units)
        new.bias.assign(np.broadcast_to(bias.reshape(1, d_out), (num_members, d_out)))
    else:
        new.bias.assign(np.zeros((num_members, d_out)))
    return new


def apply_batch_ensemble(
    backbone, num_members, fast_weight_initializer="normal", fast_weight_stddev=0.5, seed=None
):
    """Replaces every dense projection of a keras-hub backbone by a
    `BatchEnsembleDense` (shared `W`, per-member `r_m`, `s_m`, `b_m`).

    BatchEnsemble (Wen et al., 2020) on a transformer: the query, key,
    value and output projections of every attention layer and both MLP
    layers of every block (`projection_sites`). Afterwards the backbone
    expects member-major batches `(num_members * batch, ...)`
    (`ensemble_zoo.ops.tile_members`). Every weight stays trainable, as in
    the paper. The backbone is changed in place, and its `get_config`
    does not describe the change: save it through
    `BatchEnsembleImageClassifier`, whose config applies it again.

    Args:
        backbone: a built keras-hub backbone (`ViTBackbone`, `BertBackbone`).
        num_members: int, the number of members M.
        fast_weight_initializer: `"normal"` (`N(1, fast_weight_stddev)`,
            default) or `"random_sign"`.
        fast_weight_stddev: float. Defaults to `0.5`.
        seed: optional int; projection `i` uses seeds `seed + 2 i` and
            `seed + 2 i + 1` for its fast weights.

    Returns:
        The list of `BatchEnsembleDense` layers created.
    """
    num_members = check_positive_int(num_members, "num_members")
    if not getattr(backbone, "built", False):
        raise ValueError("`backbone` must be built before BatchEnsemble is applied.")
    if batch_ensemble_layers(backbone):
        raise ValueError(f"`backbone` '{backbone.name}' is already a BatchEnsemble.")
    sites = projection_sites(backbone)
    if not sites:
        raise ValueError(f"`backbone` '{backbone.name}' has no dense projection to replace.")
    return replace_projections(
        sites, num_members, fast_weight_initializer, fast_weight_stddev, seed
    )


def replace_projections(sites, num_members, fast_weight_initializer, fast_weight_stddev, seed):
    """Replaces the projection `getattr(parent, attribute)` of every site
    (`(parent, attribute)` pairs, in order) by its `batch_ensemble_from`
    (site `i` seeded `seed + 2 i`, under its parent's name scope).
    Returns the `BatchEnsembleDense` layers."""
    layers = []
    for i, (parent, attribute) in enumerate(sites):
        with path_scope(parent.path):
            new = batch_ensemble_from(
                getattr(parent, attribute),
                num_members,
                fast_weight_initializer,
                fast_weight_stddev,
                None if seed is None else seed + 2 * i,
            )
        replace_sublayer(parent, attribute, new)
        layers.append(new)
    return layers

"""Analytic parameter and multiply-add counts of Packed-Ensembles ViTs.

Packed-Ensembles (Laurent et al., 2023, §3) scale a layer with `n_in`
inputs and `n_out` outputs to `alpha^2 * n_in * n_out / (M * gamma)`
weights: `M` members of width `alpha / M` times the base's, each split into
`gamma` block-diagonal groups. In a ViT the attention and MLP projections
are such layers; the patch embedding (the "first" layer, which sees the
whole image), the classifier (the "last" layer, `M` heads) and the
per-member class token, position embedding and layer norms scale by
`alpha` only. Multiply-adds are counted as in `hydra_cost`.
"""

from ensemble_zoo.models.hydra.hydra_cost import _geometry
from ensemble_zoo.models.packed_ensemble.packed_ensemble_backbone import (
    packed_member_geometry,
)


def _member_sizes(hidden_dim, num_heads, mlp_dim, num_members, alpha, gamma):
    width, _, member_mlp = packed_member_geometry(
        hidden_dim, num_heads, mlp_dim, num_members, alpha, gamma
    )
    return width, member_mlp


def packed_ensemble_parameter_count(
    image_shape,
    patch_size,
    num_layers,
    num_heads,
    hidden_dim,
    mlp_dim,
    num_classes,
    num_members,
    alpha=2,
    gamma=1,
):
    """Parameters of a `PackedEnsembleImageClassifier` (biases included);
    with `num_members=1, alpha=1, gamma=1`, of the keras-hub ViT."""
    w, f = _member_sizes(hidden_dim, num_heads, mlp_dim, num_members, alpha, gamma)
    patch, patches = _geometry(image_shape, patch_size)
    member = patch[0] * patch[1] * image_shape[2] * w + w  # patch embedding
    member += w + (patches + 1) * w  # class token, position embedding
    per_layer = 4 * w * w // gamma + 4 * w  # q, k, v, output: weights, biases
    per_layer += 2 * w * f // gamma + f + w  # MLP
    per_layer += 4 * w  # two layer norms
    member += num_layers * per_layer + 2 * w  # final layer norm
    member += w * num_classes + num_classes
    return int(num_members * member)


def packed_ensemble_multiply_adds(
    image_shape,
    patch_size,
    num_layers,
    num_heads,
    hidden_dim,
    mlp_dim,
    num_classes,
    num_members,
    alpha=2,
    gamma=1,
):
    """Multiply-adds of one forward pass of one image (all members)."""
    w, f = _member_sizes(hidden_dim, num_heads, mlp_dim, num_members, alpha, gamma)
    patch, patches = _geometry(image_shape, patch_size)
    tokens = patches + 1
    member = patches * patch[0] * patch[1] * image_shape[2] * w
    member += num_layers * (
        4 * tokens * w * w // gamma  # q, k, v and output projections
        + 2 * tokens * tokens * w  # Q K^T and A V
        + 2 * tokens * w * f // gamma  # MLP
    )
    member += w * num_classes
    return int(num_members * member)

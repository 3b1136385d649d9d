"""Analytic parameter and multiply-add counts of Packed-Ensembles ViTs.

Packed-Ensembles (Laurent et al., 2023, §3) scale a layer with `n_in`
inputs and `n_out` outputs to `alpha^2 * n_in * n_out / (M * gamma)`
weights: `M` members of width `alpha / M` times the base's, each split into
`gamma` block-diagonal groups. In a ViT the attention and MLP projections
are such layers; the patch embedding (the "first" layer, which sees the
whole image), the classifier (the "last" layer, `M` heads) and the
per-member class token, position embedding and layer norms scale by
`alpha` only. Each member is counted as a ViT of its width with the
formulas of `ensemble_zoo.models.vit_cost` (as `hydra_cost` is), its
projections split into `gamma` groups.
"""

from ensemble_zoo.models.packed_ensemble.packed_ensemble_backbone import packed_member_geometry
from ensemble_zoo.models.vit_cost import encoder_block_multiply_adds
from ensemble_zoo.models.vit_cost import encoder_block_parameter_count
from ensemble_zoo.models.vit_cost import layer_norm_parameter_count
from ensemble_zoo.models.vit_cost import num_tokens
from ensemble_zoo.models.vit_cost import patch_embedding_multiply_adds
from ensemble_zoo.models.vit_cost import patch_embedding_parameter_count


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
    member = patch_embedding_parameter_count(image_shape, patch_size, w)
    member += num_layers * encoder_block_parameter_count(w, f, groups=gamma)
    member += layer_norm_parameter_count(w)  # final layer norm
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
    tokens = num_tokens(image_shape, patch_size)
    member = patch_embedding_multiply_adds(image_shape, patch_size, w)
    member += num_layers * encoder_block_multiply_adds(tokens, w, f, groups=gamma)
    member += w * num_classes
    return int(num_members * member)

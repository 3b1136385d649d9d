"""Analytic parameter and multiply-add counts of (Hydra) ViTs.

The paper's cost model (App. B.4, Table 7) counted directly from the
architecture, so costs of ViT-B/16-sized configurations can be checked
without building them. Multiply-adds count the linear layers (patch
embedding, query/key/value/output projections, MLP, classifier) and the
two attention matmuls (`Q K^T` and `A V`); softmax, layer norm, GELU and
additions are ignored, as in the paper's torchinfo-style numbers.
"""

import numpy as np


def _counts(member_num_heads, num_layers, num_heads, num_members):
    if member_num_heads is None:
        return np.full((num_layers, num_members), num_heads)
    counts = np.asarray(member_num_heads)
    if counts.shape != (num_layers, num_members):
        raise ValueError(
            "`member_num_heads` must have shape (num_layers, num_members) = "
            f"({num_layers}, {num_members}); got {counts.shape}."
        )
    return counts


def _geometry(image_shape, patch_size):
    patch = (patch_size, patch_size) if isinstance(patch_size, int) else tuple(patch_size)
    patches = (image_shape[0] // patch[0]) * (image_shape[1] // patch[1])
    return patch, patches


def hydra_parameter_count(
    image_shape,
    patch_size,
    num_layers,
    num_heads,
    hidden_dim,
    mlp_dim,
    num_classes,
    num_members=1,
    member_num_heads=None,
    mlp="merge",
):
    """Parameters of a `HydraImageClassifier` (biases included, head masks
    excluded); with one member keeping every head, of a keras-hub ViT.

    Member-specific: kept heads (`4 * k * key_dim * d` weights plus
    `3 * k * key_dim + d` biases per layer), layer norms, the classifier;
    shared: the embedding and, with `mlp="merge"`, the MLPs. Head slots that
    some member leaves empty still hold (zero) weights in the fused model
    and are counted, as `model.count_params()` does.
    """
    d, key_dim = hidden_dim, hidden_dim // num_heads
    patch, patches = _geometry(image_shape, patch_size)
    counts = _counts(member_num_heads, num_layers, num_heads, num_members)
    total = patch[0] * patch[1] * image_shape[2] * d + d  # patch embedding
    total += d + (patches + 1) * d  # class token, position embedding
    mlp_params = d * mlp_dim + mlp_dim + mlp_dim * d + d
    for layer in range(num_layers):
        slots = max(1, int(counts[layer].max()))
        total += num_members * (4 * d * slots * key_dim + 3 * slots * key_dim + d)
        total += num_members * 4 * d  # two layer norms
        total += mlp_params * (num_members if mlp == "grouped" else 1)
    total += num_members * 2 * d  # final layer norm
    total += num_members * (d * num_classes + num_classes)
    return int(total)


def hydra_multiply_adds(
    image_shape,
    patch_size,
    num_layers,
    num_heads,
    hidden_dim,
    mlp_dim,
    num_classes,
    num_members=1,
    member_num_heads=None,
):
    """Multiply-adds of one forward pass of one image.

    Counts each member's kept heads only (the padded, masked slots of the
    fused model are extra work that `member_num_heads` hides; with equal
    head counts there are none). The MLP runs on every member's stream,
    merged or not, so its cost is `num_members` times a single model's
    (the paper's 46.19G for ViT-B/16 8x3 confirms this).
    """
    d, key_dim = hidden_dim, hidden_dim // num_heads
    patch, patches = _geometry(image_shape, patch_size)
    tokens = patches + 1
    counts = _counts(member_num_heads, num_layers, num_heads, num_members)
    total = patches * patch[0] * patch[1] * image_shape[2] * d
    for layer in range(num_layers):
        kept_width = int(counts[layer].sum()) * key_dim
        total += 4 * tokens * d * kept_width  # q, k, v and output projections
        total += 2 * tokens * tokens * kept_width  # Q K^T and A V
        total += num_members * 2 * tokens * d * mlp_dim
    total += num_members * d * num_classes
    return int(total)


def hydra_text_parameter_count(
    vocabulary_size,
    num_layers,
    num_heads,
    hidden_dim,
    intermediate_dim,
    num_classes,
    max_sequence_length=512,
    num_segments=2,
    num_members=1,
    member_num_heads=None,
    mlp="merge",
):
    """Parameters of a `HydraTextClassifier` (head masks excluded); with
    one member keeping every head, of a keras-hub `BertTextClassifier`."""
    d, key_dim = hidden_dim, hidden_dim // num_heads
    counts = _counts(member_num_heads, num_layers, num_heads, num_members)
    total = (vocabulary_size + max_sequence_length + num_segments) * d + 2 * d
    mlp_params = d * intermediate_dim + intermediate_dim + intermediate_dim * d + d
    for layer in range(num_layers):
        slots = max(1, int(counts[layer].max()))
        total += num_members * (4 * d * slots * key_dim + 3 * slots * key_dim + d)
        total += num_members * 4 * d
        total += mlp_params * (num_members if mlp == "grouped" else 1)
    total += num_members * (d * d + d)  # per-member pooler
    total += num_members * (d * num_classes + num_classes)
    return int(total)


def hydra_text_multiply_adds(
    sequence_length,
    num_layers,
    num_heads,
    hidden_dim,
    intermediate_dim,
    num_classes,
    num_members=1,
    member_num_heads=None,
):
    """Multiply-adds of one forward pass of one sequence of
    `sequence_length` tokens (embedding lookups cost none)."""
    d, key_dim = hidden_dim, hidden_dim // num_heads
    counts = _counts(member_num_heads, num_layers, num_heads, num_members)
    t = sequence_length
    total = 0
    for layer in range(num_layers):
        kept_width = int(counts[layer].sum()) * key_dim
        total += 4 * t * d * kept_width + 2 * t * t * kept_width
        total += num_members * 2 * t * d * intermediate_dim
    total += num_members * (d * d + d * num_classes)
    return int(total)

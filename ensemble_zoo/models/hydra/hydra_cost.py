"""Analytic parameter and multiply-add counts of (Hydra) ViTs.

The paper's cost model (App. B.4, Table 7) counted directly from the
architecture, so costs of ViT-B/16-sized configurations can be checked
without building them. Multiply-adds count the linear layers (patch
embedding, query/key/value/output projections, MLP, classifier) and the
two attention matmuls (`Q K^T` and `A V`); softmax, layer norm, GELU and
additions are ignored, as in the paper's torchinfo-style numbers.
"""

import numpy as np

from ensemble_zoo.models.vit_cost import attention_parameter_count
from ensemble_zoo.models.vit_cost import attention_projection_multiply_adds
from ensemble_zoo.models.vit_cost import attention_score_multiply_adds
from ensemble_zoo.models.vit_cost import layer_norm_parameter_count
from ensemble_zoo.models.vit_cost import mlp_multiply_adds
from ensemble_zoo.models.vit_cost import mlp_parameter_count
from ensemble_zoo.models.vit_cost import num_tokens
from ensemble_zoo.models.vit_cost import patch_embedding_multiply_adds
from ensemble_zoo.models.vit_cost import patch_embedding_parameter_count


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


def _encoder_parameter_count(d, mlp_dim, num_layers, num_heads, num_members, member_num_heads, mlp):
    """The encoder blocks of a Hydra ViT or BERT: per member, attention
    with `max` kept heads' slots and two layer norms; MLPs shared
    (`mlp="merge"`) or per member (`"grouped"`)."""
    key_dim = d // num_heads
    counts = _counts(member_num_heads, num_layers, num_heads, num_members)
    total = 0
    for layer in range(num_layers):
        slots = max(1, int(counts[layer].max()))
        total += num_members * attention_parameter_count(d, slots * key_dim)
        total += num_members * 2 * layer_norm_parameter_count(d)
        total += mlp_parameter_count(d, mlp_dim) * (num_members if mlp == "grouped" else 1)
    return total


def _encoder_multiply_adds(
    tokens, d, mlp_dim, num_layers, num_heads, num_members, member_num_heads
):
    """The encoder blocks on `tokens` tokens: the kept heads of all members
    (attention projections and matmuls), and every member's MLP."""
    key_dim = d // num_heads
    counts = _counts(member_num_heads, num_layers, num_heads, num_members)
    total = 0
    for layer in range(num_layers):
        kept_width = int(counts[layer].sum()) * key_dim
        total += attention_projection_multiply_adds(tokens, d, kept_width)
        total += attention_score_multiply_adds(tokens, kept_width)
        total += num_members * mlp_multiply_adds(tokens, d, mlp_dim)
    return total


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
    d = hidden_dim
    total = patch_embedding_parameter_count(image_shape, patch_size, d)
    total += _encoder_parameter_count(
        d, mlp_dim, num_layers, num_heads, num_members, member_num_heads, mlp
    )
    total += num_members * layer_norm_parameter_count(d)  # final layer norm
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
    d = hidden_dim
    total = patch_embedding_multiply_adds(image_shape, patch_size, d)
    total += _encoder_multiply_adds(
        num_tokens(image_shape, patch_size),
        d,
        mlp_dim,
        num_layers,
        num_heads,
        num_members,
        member_num_heads,
    )
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
    d = hidden_dim
    # Token, position and segment embeddings and their layer norm.
    total = (vocabulary_size + max_sequence_length + num_segments) * d
    total += layer_norm_parameter_count(d)
    total += _encoder_parameter_count(
        d, intermediate_dim, num_layers, num_heads, num_members, member_num_heads, mlp
    )
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
    d = hidden_dim
    total = _encoder_multiply_adds(
        sequence_length, d, intermediate_dim, num_layers, num_heads, num_members, member_num_heads
    )
    total += num_members * (d * d + d * num_classes)
    return int(total)

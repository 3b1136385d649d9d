"""Patch geometry, parameter counts and multiply-adds of ViT parts.

The zoo's analytic cost counters (`hydra_cost`, `packed_ensemble_cost`,
`moe_cost`, and through them the architecture presets' metadata) build
their totals from these functions, so a formula is written once. Counts
follow keras-hub's `ViTBackbone` (and `BertBackbone` for the encoder
blocks): every linear layer has a bias, a block has two layer norms, the
attention projects `hidden_dim` to `attention_width` for the queries, keys
and values and back. Multiply-adds count linear layers and the two
attention matmuls (`Q K^T` and `A V`), per input; softmax, layer norm,
GELU and additions cost none, as in torchinfo-style counts.

`groups` splits a projection into that many block-diagonal groups (the
Packed-Ensembles `gamma`), dividing its weights and multiply-adds.

Example:

```python
from ensemble_zoo.models import vit_cost

# ViT-B/16 at 224 px: 14 x 14 patches and a class token.
assert vit_cost.num_tokens((224, 224, 3), 16) == 197
block = vit_cost.encoder_block_multiply_adds(197, 768, 3072)
assert block == 4 * 197 * 768 * 768 + 2 * 197 * 197 * 768 + 2 * 197 * 768 * 3072
assert vit_cost.encoder_block_parameter_count(768, 3072) == 7_087_872
```
"""

import numbers


def patch_grid(image_shape, patch_size):
    """The patch size as a pair and the number of patches.

    The patch embedding is a "valid" strided convolution, so a remainder of
    the image that does not fill a patch is dropped.

    Args:
        image_shape: `(height, width)` or `(height, width, channels)`.
        patch_size: int or `(height, width)`.

    Returns:
        `(patch, patches)`: `patch` a `(height, width)` tuple, `patches` the
        int number of patches.
    """
    if isinstance(patch_size, numbers.Integral):
        patch = (patch_size, patch_size)
    else:
        patch = tuple(patch_size)
    patches = (image_shape[0] // patch[0]) * (image_shape[1] // patch[1])
    return patch, patches


def num_tokens(image_shape, patch_size, use_class_token=True):
    """Tokens of one image: its patches, plus the class token if used."""
    return patch_grid(image_shape, patch_size)[1] + (1 if use_class_token else 0)


def patch_embedding_multiply_adds(image_shape, patch_size, width):
    """Multiply-adds of the patch-embedding convolution of one
    `(height, width, channels)` image to `width` channels."""
    patch, patches = patch_grid(image_shape, patch_size)
    return patches * patch[0] * patch[1] * image_shape[2] * width


def patch_embedding_parameter_count(image_shape, patch_size, width, use_class_token=True):
    """Parameters of a ViT's embedding of `(height, width, channels)`
    images to `width`: the patch convolution's kernel and bias, the class
    token (if used) and one position embedding per token."""
    patch, _ = patch_grid(image_shape, patch_size)
    total = patch[0] * patch[1] * image_shape[2] * width + width
    if use_class_token:
        total += width
    return total + num_tokens(image_shape, patch_size, use_class_token) * width


def attention_projection_multiply_adds(tokens, hidden_dim, attention_width=None, groups=1):
    """Multiply-adds of the query, key, value and output projections of
    `tokens` tokens (`attention_width`: heads times head size, default
    `hidden_dim`)."""
    attention_width = hidden_dim if attention_width is None else attention_width
    return 4 * tokens * hidden_dim * attention_width // groups


def attention_score_multiply_adds(tokens, attention_width):
    """Multiply-adds of `Q K^T` and `A V` over `tokens` tokens, summed over
    heads of total width `attention_width`."""
    return 2 * tokens * tokens * attention_width


def mlp_multiply_adds(tokens, hidden_dim, mlp_dim, groups=1):
    """Multiply-adds of a two-layer MLP `hidden_dim -> mlp_dim ->
    hidden_dim` on `tokens` tokens."""
    return 2 * tokens * hidden_dim * mlp_dim // groups


def encoder_block_multiply_adds(tokens, hidden_dim, mlp_dim, attention_width=None, groups=1):
    """Multiply-adds of one transformer block (attention and MLP)."""
    attention_width = hidden_dim if attention_width is None else attention_width
    return (
        attention_projection_multiply_adds(tokens, hidden_dim, attention_width, groups)
        + attention_score_multiply_adds(tokens, attention_width)
        + mlp_multiply_adds(tokens, hidden_dim, mlp_dim, groups)
    )


def attention_parameter_count(hidden_dim, attention_width=None, groups=1):
    """Parameters of an attention layer: query, key, value and output
    kernels, the three input biases (`attention_width`) and the output
    bias (`hidden_dim`)."""
    attention_width = hidden_dim if attention_width is None else attention_width
    return 4 * hidden_dim * attention_width // groups + 3 * attention_width + hidden_dim


def mlp_parameter_count(hidden_dim, mlp_dim, groups=1):
    """Parameters of a two-layer MLP `hidden_dim -> mlp_dim -> hidden_dim`,
    biases included."""
    return 2 * hidden_dim * mlp_dim // groups + mlp_dim + hidden_dim


def layer_norm_parameter_count(width):
    """Parameters of a layer norm (scale and offset)."""
    return 2 * width


def encoder_block_parameter_count(hidden_dim, mlp_dim, attention_width=None, groups=1):
    """Parameters of one transformer block: attention, MLP and its two
    layer norms."""
    return (
        attention_parameter_count(hidden_dim, attention_width, groups)
        + mlp_parameter_count(hidden_dim, mlp_dim, groups)
        + 2 * layer_norm_parameter_count(hidden_dim)
    )

"""Argument checks and config entries shared by the zoo's hand-written ViT
backbones (Hydra, Packed-Ensembles, ViT-MoE)."""

from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import is_integer


def check_vit_geometry(image_shape, patch_size, num_layers, num_heads, hidden_dim):
    """Validates a ViT's shape arguments.

    Returns:
        `(image_shape, patch_size, num_layers, num_heads)`: the image shape
        as a 3-tuple of ints, the patch size as a `(height, width)` tuple,
        and the checked layer and head counts.

    Raises:
        ValueError: naming the argument, for a non-3-d image shape, a patch
            size that does not divide the image, or a hidden size that the
            heads do not divide.
    """
    num_layers = check_positive_int(num_layers, "num_layers")
    num_heads = check_positive_int(num_heads, "num_heads")
    hidden_dim = check_positive_int(hidden_dim, "hidden_dim")
    if hidden_dim % num_heads:
        raise ValueError(
            f"`hidden_dim` ({hidden_dim}) must be divisible by `num_heads` ({num_heads})."
        )
    if (
        isinstance(image_shape, (str, bytes))
        or not hasattr(image_shape, "__len__")
        or len(image_shape) != 3
    ):
        raise ValueError(f"`image_shape` must be (height, width, channels); got {image_shape!r}.")
    image_shape = tuple(check_positive_int(d, "image_shape") for d in image_shape)
    if is_integer(patch_size):
        patch_size = (patch_size, patch_size)
    if (
        isinstance(patch_size, (str, bytes))
        or not hasattr(patch_size, "__len__")
        or len(patch_size) != 2
    ):
        raise ValueError(
            f"`patch_size` must be a positive int or a (height, width) pair; got {patch_size!r}."
        )
    patch = tuple(check_positive_int(p, "patch_size") for p in patch_size)
    if image_shape[0] % patch[0] or image_shape[1] % patch[1]:
        raise ValueError(
            f"`image_shape` {image_shape[:2]} must be divisible by `patch_size` {patch}."
        )
    return image_shape, patch, num_layers, num_heads


#: The arguments the zoo's hand-written ViT backbones share with keras-hub's
#: `ViTBackbone`, with its names and meanings.
VIT_ARGUMENTS = (
    "image_shape",
    "patch_size",
    "num_layers",
    "num_heads",
    "hidden_dim",
    "mlp_dim",
    "dropout_rate",
    "attention_dropout",
    "layer_norm_epsilon",
    "use_mha_bias",
    "use_mlp_bias",
    "use_class_token",
    "use_patch_bias",
)


def vit_config(backbone):
    """The `VIT_ARGUMENTS` entries of a backbone's config, read from its
    attributes (image and patch sizes as lists, as keras-hub writes them).

    Example:

    ```python
    import types
    from ensemble_zoo.models.vit_geometry import VIT_ARGUMENTS, vit_config

    backbone = types.SimpleNamespace(**{name: 1 for name in VIT_ARGUMENTS})
    backbone.image_shape, backbone.patch_size = (8, 8, 1), (2, 2)
    vit_config(backbone)["patch_size"]  # [2, 2]
    ```
    """
    config = {name: getattr(backbone, name) for name in VIT_ARGUMENTS}
    config["image_shape"] = list(config["image_shape"])
    config["patch_size"] = list(config["patch_size"])
    return config

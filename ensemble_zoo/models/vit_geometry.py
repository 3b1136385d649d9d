"""Argument checks shared by the zoo's ViT backbones."""

from ensemble_zoo.utils.validation import check_positive_int


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
    if hidden_dim % num_heads:
        raise ValueError(
            f"`hidden_dim` ({hidden_dim}) must be divisible by `num_heads` "
            f"({num_heads})."
        )
    image_shape = tuple(int(d) for d in image_shape)
    if len(image_shape) != 3:
        raise ValueError(
            f"`image_shape` must be (height, width, channels); got {image_shape}."
        )
    patch = (patch_size, patch_size) if isinstance(patch_size, int) else tuple(patch_size)
    if image_shape[0] % patch[0] or image_shape[1] % patch[1]:
        raise ValueError(
            f"`image_shape` {image_shape[:2]} must be divisible by "
            f"`patch_size` {patch}."
        )
    return image_shape, patch, num_layers, num_heads

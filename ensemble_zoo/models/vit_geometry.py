"""Argument checks, the patch-embedding stem and config entries shared by
the zoo's hand-written ViT backbones (Hydra, Packed-Ensembles, ViT-MoE)."""

import collections

import keras
from keras_hub.src.models.vit.vit_layers import ViTPatchingAndEmbedding

from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_rate
from ensemble_zoo.utils.validation import check_real
from ensemble_zoo.utils.validation import is_integer


def check_heads_divide(hidden_dim, num_heads):
    """Raises a `ValueError` unless `num_heads` divides `hidden_dim` (a
    transformer's heads split its width)."""
    if hidden_dim % num_heads:
        raise ValueError(
            f"`hidden_dim` ({hidden_dim}) must be divisible by `num_heads` ({num_heads})."
        )


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
    check_heads_divide(check_positive_int(hidden_dim, "hidden_dim"), num_heads)
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

#: The `VIT_ARGUMENTS` of one backbone, checked (see `check_vit_arguments`).
ViTArguments = collections.namedtuple("ViTArguments", VIT_ARGUMENTS)

#: keras-hub `ViTBackbone`'s defaults of the optional `VIT_ARGUMENTS`; the
#: first six (`image_shape` to `mlp_dim`) are required.
VIT_DEFAULTS = {
    "dropout_rate": 0.0,
    "attention_dropout": 0.0,
    "layer_norm_epsilon": 1e-6,
    "use_mha_bias": True,
    "use_mlp_bias": True,
    "use_class_token": True,
    "use_patch_bias": True,
}

#: The keyword arguments a hand-written ViT backbone passes on to
#: `keras_hub.models.Backbone` (its config holds them beside `dtype`).
BACKBONE_KEYWORDS = ("name", "trainable")


def split_vit_arguments(owner, kwargs):
    """Splits a hand-written ViT backbone's `**kwargs` into its ViT
    arguments and the `keras_hub.models.Backbone` ones.

    The zoo's hand-written ViT backbones (Hydra, Packed-Ensembles, ViT-MoE)
    take keras-hub `ViTBackbone`'s arguments (`VIT_ARGUMENTS`) by keyword,
    with its defaults (`VIT_DEFAULTS`), so that the names, defaults and
    checks live here once. Keras' functional models drop keyword arguments
    they do not know without a word; a backbone that takes `**kwargs`
    refuses them here instead.

    Args:
        owner: str, the backbone's class name, for the messages.
        kwargs: dict, the constructor's `**kwargs`.

    Returns:
        `(vit, backbone_kwargs)`: the checked `ViTArguments`
        (`check_vit_arguments`) and the `BACKBONE_KEYWORDS` entries of
        `kwargs`.

    Raises:
        TypeError: for a missing required ViT argument, or a keyword that
            is neither a ViT argument nor a `BACKBONE_KEYWORDS` name.
        ValueError: see `check_vit_arguments`.

    Example:

    ```python
    from ensemble_zoo.models.vit_geometry import split_vit_arguments

    vit, rest = split_vit_arguments("MyViT", {
        "image_shape": (8, 8, 1), "patch_size": 2, "num_layers": 2,
        "num_heads": 2, "hidden_dim": 16, "mlp_dim": 32, "name": "vit",
    })
    vit.patch_size, rest  # ((2, 2), {'name': 'vit'})
    ```
    """
    missing = [name for name in VIT_ARGUMENTS if name not in kwargs and name not in VIT_DEFAULTS]
    if missing:
        raise TypeError(
            f"{owner}() is missing the ViT argument(s) {missing}: it takes "
            f"`keras_hub.models.ViTBackbone`'s arguments by keyword, {list(VIT_ARGUMENTS)} "
            f"(the first six required)."
        )
    unknown = sorted(set(kwargs) - set(VIT_ARGUMENTS) - set(BACKBONE_KEYWORDS))
    if unknown:
        raise TypeError(
            f"{owner}() got the unexpected keyword argument(s) {unknown}; besides its "
            f"own it takes the ViT arguments {list(VIT_ARGUMENTS)} and "
            f"{list(BACKBONE_KEYWORDS)}."
        )
    vit = check_vit_arguments({**VIT_DEFAULTS, **kwargs})
    return vit, {name: kwargs[name] for name in BACKBONE_KEYWORDS if name in kwargs}


def check_vit_arguments(arguments):
    """Checks the `VIT_ARGUMENTS` of a ViT backbone's constructor.

    Args:
        arguments: a mapping holding (at least) every name of
            `VIT_ARGUMENTS` (`split_vit_arguments` passes the keywords of
            a backbone's constructor, completed with `VIT_DEFAULTS`).

    Returns:
        A `ViTArguments`: the image shape as a 3-tuple of ints, the patch
        size as a `(height, width)` tuple, the layer and head counts and
        `mlp_dim` as ints, the dropout rates and `layer_norm_epsilon` as
        floats; `hidden_dim` and the `use_*` flags as given.

    Raises:
        ValueError: see `check_vit_geometry`, or for an `mlp_dim` below 1,
            a dropout rate outside [0, 1) or a `layer_norm_epsilon` that is
            not positive.
        TypeError: for a dropout rate or `layer_norm_epsilon` that is not a
            number.

    Example:

    ```python
    from ensemble_zoo.models.vit_geometry import VIT_ARGUMENTS, check_vit_arguments

    arguments = {name: 1 for name in VIT_ARGUMENTS}
    arguments.update(image_shape=(8, 8, 1), patch_size=2, dropout_rate=0.0)
    arguments.update(attention_dropout=0.0, layer_norm_epsilon=1e-6)
    check_vit_arguments(arguments).patch_size  # (2, 2)
    ```
    """
    vit = {name: arguments[name] for name in VIT_ARGUMENTS}
    geometry = ("image_shape", "patch_size", "num_layers", "num_heads")
    checked = check_vit_geometry(*(vit[name] for name in geometry), vit["hidden_dim"])
    vit.update(zip(geometry, checked))
    vit["mlp_dim"] = check_positive_int(vit["mlp_dim"], "mlp_dim")
    vit["dropout_rate"] = check_rate(vit["dropout_rate"], "dropout_rate")
    vit["attention_dropout"] = check_rate(vit["attention_dropout"], "attention_dropout")
    vit["layer_norm_epsilon"] = check_real(
        vit["layer_norm_epsilon"], "layer_norm_epsilon", low=0.0, low_open=True
    )
    return ViTArguments(**vit)


def vit_block_arguments(vit):
    """The arguments that every encoder block of a ViT backbone takes
    unchanged from its `ViTArguments` `vit`: dropout rates, layer norm
    epsilon and bias flags (keyword arguments of keras-hub's
    `ViTEncoderBlock` and of the zoo's blocks)."""
    return {
        "dropout_rate": vit.dropout_rate,
        "attention_dropout": vit.attention_dropout,
        "layer_norm_epsilon": vit.layer_norm_epsilon,
        "use_mha_bias": vit.use_mha_bias,
        "use_mlp_bias": vit.use_mlp_bias,
    }


def vit_embedding_layers(vit, width=None, dtype=None):
    """keras-hub ViT's stem for `ViTArguments` `vit`: the patch embedding
    (`"vit_patching_and_embedding"`, to `width` channels, default
    `vit.hidden_dim`) and the dropout after it (`"dropout"`), created in
    that order.

    Returns:
        `(embedding, dropout)`.
    """
    embedding = ViTPatchingAndEmbedding(
        image_size=vit.image_shape[:2],
        patch_size=vit.patch_size,
        hidden_dim=vit.hidden_dim if width is None else width,
        num_channels=vit.image_shape[2],
        use_class_token=vit.use_class_token,
        use_patch_bias=vit.use_patch_bias,
        dtype=dtype,
        name="vit_patching_and_embedding",
    )
    dropout = keras.layers.Dropout(vit.dropout_rate, dtype=dtype, name="dropout")
    return embedding, dropout


def set_vit_attributes(backbone, vit, embedding, encoder_blocks, layer_norm, attributes=None):
    """Sets a ViT backbone's main layers, its `ViTArguments` `vit` and the
    optional mapping `attributes` (e.g. its own arguments) as attributes
    (`vit_config` reads the latter two back). Call it after
    `keras.Model.__init__` (the torch backend forbids layer attributes
    before)."""
    backbone.embedding = embedding
    backbone.encoder_blocks = encoder_blocks
    backbone.layer_norm = layer_norm
    for name, value in {**vit._asdict(), **(attributes or {})}.items():
        setattr(backbone, name, value)


def vit_config(backbone, names=()):
    """The `VIT_ARGUMENTS` entries of a backbone's config, then those of
    `names` (its own arguments), read from its attributes (image and patch
    sizes as lists, as keras-hub writes them).

    Example:

    ```python
    import types
    from ensemble_zoo.models.vit_geometry import VIT_ARGUMENTS, vit_config

    backbone = types.SimpleNamespace(**{name: 1 for name in VIT_ARGUMENTS})
    backbone.image_shape, backbone.patch_size = (8, 8, 1), (2, 2)
    vit_config(backbone)["patch_size"]  # [2, 2]
    ```
    """
    config = {name: getattr(backbone, name) for name in VIT_ARGUMENTS + tuple(names)}
    config["image_shape"] = list(config["image_shape"])
    config["patch_size"] = list(config["patch_size"])
    return config

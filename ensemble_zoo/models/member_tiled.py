"""The graph pieces of the classifiers that run one keras-hub network on
the member-major batch (LoRA-Ensemble, BatchEnsemble and Masksembles on a
ViT or BERT backbone).

Such a task tiles its inputs once to `(members * batch, ...)`
(`member_rows`), runs its converted backbone (adapters, fast weights or
masks per member) once on them, pools each row, and returns member logits
`(batch, members, classes)` after its head (`members_of_rows` moves the
rows back onto the member axis). The tiling and untiling are layers that
follow `single_member`, so `EnsembleClassifier` can run the same graph one
member at a time (`member_batching`, `ensemble_zoo.models.member_passes`).
"""

import keras

from ensemble_zoo.layers.member_tiling import TileMembers
from ensemble_zoo.layers.member_tiling import UntileMembers
from ensemble_zoo.models.head_reuse import resolve_head
from ensemble_zoo.models.member_head import pool_tokens


def member_rows(backbone, inputs, num_members, pooling):
    """The backbone run once on the member-major batch, pooled.

    Args:
        backbone: the converted keras-hub backbone.
        inputs: its inputs (`backbone.input`: images, or a dict of token
            tensors), not tiled.
        num_members: int.
        pooling: `"token"` (the class token) or `"gap"` (the mean of the
            tokens) of `(rows, tokens, dim)` features, or `None` for a
            backbone whose output dict holds a `pooled_output` (BERT's).

    Returns:
        The pooled features `(num_members * batch, dim)`, member-major.
    """
    tile = TileMembers(num_members, autocast=False, name="tile_members")
    outputs = backbone(keras.tree.map_structure(tile, inputs))
    if pooling is None:
        return outputs["pooled_output"]
    return pool_tokens(outputs, pooling)


def members_of_rows(x, num_members):
    """Member-major rows `(num_members * batch, ...)` -> `(batch,
    num_members, ...)` (an `UntileMembers` layer)."""
    return UntileMembers(num_members, autocast=False, name="untile_members")(x)


def from_keras_hub_parts(cls, parts, model, num_classes, reuse_head, kwargs):
    """A member-tiled task of class `cls` on a copy of the keras-hub
    `model` (`model` is not changed).

    Args:
        cls: the task class.
        parts: `(model, kwargs) -> (backbone, head, num_classes)` of the
            family's classifier or backbone (e.g. `vit_parts`); it fills
            `kwargs` with the classifier's `dropout`, `preprocessor` and
            pooling unless set, and raises a `TypeError` for another class.
        model: the keras-hub classifier or backbone.
        num_classes: int or `None` (the classifier's).
        reuse_head: bool or `None` (`head_reuse.resolve_head`).
        kwargs: dict, the other constructor arguments.

    Returns:
        `(task, head)`: the new task and the classifier's `Dense` head
        to start the task's head from, or `None` when it is not reused.
    """
    try:
        backbone, head, classes = parts(model, kwargs)
    except TypeError as error:
        raise TypeError(
            f"{error} For a classifier of another keras-hub family, "
            "`LoRAEnsembleClassifier.from_model`, `BatchEnsembleClassifier.from_model` "
            "and `MasksemblesClassifier.from_model` take any."
        ) from None
    num_classes, reuse_head = resolve_head(classes, num_classes, reuse_head)
    return cls(backbone, num_classes, **kwargs), head if reuse_head else None

"""The classifier end shared by the zoo's functional tasks.

Every ensemble backbone returns per-member token features
`(batch, members, tokens, dim)`; the task pools the tokens of each member,
applies dropout and a head (one `GroupedDense` per member, or one shared
`Dense`), and returns float32 member logits `(batch, members, classes)`.
"""

import keras
from keras import ops

from ensemble_zoo.utils.validation import check_choice

POOLINGS = ("token", "gap")


def check_pooling(pooling):
    """Validates a `pooling` argument (`"token"` or `"gap"`); returns it."""
    return check_choice(pooling, "pooling", POOLINGS)


def pool_member_tokens(x, pooling):
    """`(batch, members, tokens, dim)` -> `(batch, members, dim)`: the
    class token (`"token"`) or the mean of the tokens (`"gap"`) of every
    member, as keras-hub's `ViTImageClassifier` pools one model."""
    if pooling == "token":
        return x[:, :, 0]
    return ops.mean(x, axis=2)


def member_logits(x):
    """The task's output layer: member logits in float32.

    Under mixed precision the members compute in float16 / bfloat16; their
    combination (`ensemble_zoo.ops.predictive_probabilities`), the
    uncertainty decomposition and the losses see float32.
    """
    return keras.layers.Activation("linear", dtype="float32", name="member_logits")(x)


def pool_tokens(x, pooling):
    """`(batch, tokens, dim)` -> `(batch, dim)`: the class token
    (`"token"`) or the mean of the tokens (`"gap"`) of one model's output,
    as keras-hub's `ViTImageClassifier` pools it."""
    if pooling == "token":
        return x[:, 0]
    return ops.mean(x, axis=1)

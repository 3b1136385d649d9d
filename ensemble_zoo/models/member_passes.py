"""How a member-tiled task runs at inference: one pass or one per member.

BatchEnsemble, Masksembles and LoRA-Ensemble run a keras-hub network once
on the member-major batch `(members * batch, ...)`. That single large
batch is what an accelerator wants (on an H200 the tiled pass of 3
members takes 0.51-0.67x three separate passes; docs/benchmarks.md). On a CPU under
JAX it is not: XLA:CPU (jax 0.10) runs a ViT-B/16 on 12 rows at 1.17x
the time of 3 passes of 4 rows and on 64 rows at 1.32x 16 passes of 4,
so the tiled methods took 1.18-1.38x the explicit ensemble of the same
members (`benchmarks/tiled_batch.py`), although they do the same backbone
work. TensorFlow (with or without XLA) and PyTorch show no such penalty
on the same machine.

`member_batching="sequential"` runs the members one after another, each
over the whole batch, as an explicit ensemble does: the backbone computes
member `m`'s rows alone with member `m`'s fast weights, masks or adapters
(`ensemble_zoo.layers.member_selection.single_member`; a `keras.ops.map`
over the members in a JAX program, one loop body), and the task's head
then runs once on every member's features. Every layer computes what it
computes in the tiled pass, row for row (same numbers up to float
round-off). `"auto"` (the default) picks `"sequential"` for JAX on a CPU
and `"tiled"` everywhere else. Training always runs the tiled pass, so
that the dropout draws and the gradients are those of the whole tiled
batch, and so does a batch whose size is unknown when the graph is
traced (an exported model's `serve`, for any batch size).

A task using this implements `_member_features(tiled_inputs)` (the
backbone and pooling: member-major rows -> member-major pooled features)
and `_member_outputs(features)` (the head: pooled features -> member
logits), and builds its graph as `_member_outputs(_member_features(
tile_members(inputs, M)))`.
"""

import keras
from keras import ops

from ensemble_zoo.layers.member_selection import single_member
from ensemble_zoo.models.member_head import pool_tokens
from ensemble_zoo.utils import backend as backend_utils
from ensemble_zoo.utils.validation import check_choice

MEMBER_BATCHING = ("auto", "tiled", "sequential")


def check_member_batching(value):
    """Validates a `member_batching` argument; returns it."""
    return check_choice(value, "member_batching", MEMBER_BATCHING)


def resolve_member_batching(value):
    """`"tiled"` or `"sequential"` for a `member_batching` argument on the
    current backend and device (see the module docstring)."""
    value = check_member_batching(value)
    if value != "auto":
        return value
    if backend_utils.backend() == "jax" and backend_utils.accelerator() == "cpu":
        return "sequential"
    return "tiled"


def run_members_sequentially(features_fn, outputs_fn, inputs, num_members):
    """`outputs_fn(features)`, the features computed member by member.

    Args:
        features_fn: member-major inputs -> member-major features (the
            backbone and pooling of a member-tiled task); called on the
            untiled `inputs` within `single_member(m)` for each member.
        outputs_fn: member-major features `(members * batch, ...)` -> the
            task's outputs.
        inputs: the batch (a tensor or a dict of them), not tiled.
        num_members: int.

    Returns:
        What the tiled graph `outputs_fn(features_fn(tile_members(inputs,
        num_members)))` returns.
    """

    def member(m):
        with single_member(m):
            return features_fn(inputs)

    first = keras.tree.flatten(inputs)[0]
    if backend_utils.backend() == "jax" and backend_utils.is_tracing(first):
        stacked = ops.map(member, ops.arange(num_members, dtype="int32"))
    else:
        stacked = ops.stack([member(m) for m in range(num_members)])
    features = ops.reshape(stacked, (-1,) + tuple(stacked.shape[2:]))
    return outputs_fn(features)


class MemberPassesMixin:
    """The `member_batching` behaviour of a member-tiled zoo task (no Keras
    base; listed before `EnsembleClassifier`).

    The task validates its `member_batching` argument with
    `check_member_batching` before building its graph and sets
    `self.member_batching` afterwards; inference then runs as
    `resolve_member_batching` says.
    """

    # A class default, so that `dir()` lists it whether or not an instance
    # set its own (keras-hub's harness compares `dir` of revived models).
    _member_batching = "auto"

    @property
    def member_batching(self):
        """`"auto"`, `"tiled"` or `"sequential"` (see the module docstring)."""
        return self.__dict__.get("_member_batching", "auto")

    @member_batching.setter
    def member_batching(self, value):
        object.__setattr__(self, "_member_batching", check_member_batching(value))
        # Compiled predict / evaluate functions hold the previous choice.
        for name in ("predict_function", "test_function"):
            if getattr(self, name, None) is not None:
                setattr(self, name, None)

    def _run_graph(self, inputs, training=None, **kwargs):
        batching = resolve_member_batching(self.member_batching)
        batch = tuple(keras.tree.flatten(inputs)[0].shape)[0]
        if training or batching == "tiled" or not isinstance(batch, int):
            # A batch of unknown size (a SavedModel's `serve`, traced for
            # any batch) runs the tiled pass too.
            return super()._run_graph(inputs, training=training, **kwargs)
        return run_members_sequentially(
            lambda x: self._member_features(x, training=False),
            self._member_outputs,
            inputs,
            self.num_members,
        )

    def get_config(self):
        config = super().get_config()
        config["member_batching"] = self.member_batching
        return config


class PooledTokensFeatures:
    """`_member_features` of an image task: the backbone's tokens pooled
    as the task's `_pooling` says (`pool_tokens`)."""

    def _member_features(self, x, training=None):
        return pool_tokens(self.backbone(x, training=training), self._pooling)


class PooledOutputFeatures:
    """`_member_features` of a text task: the backbone's `pooled_output`."""

    def _member_features(self, x, training=None):
        return self.backbone(x, training=training)["pooled_output"]

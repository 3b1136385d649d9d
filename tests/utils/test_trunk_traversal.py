"""The shared trunk's own traversal of an operation's arguments agrees with
`keras.tree` on every container (plain ones without it, so that
`torch.compile` traces the walk in one graph)."""

import collections

import keras
import numpy as np

from ensemble_zoo.models.shared_trunk import _leaves
from ensemble_zoo.models.shared_trunk import _map_tensors

Pair = collections.namedtuple("Pair", "a b")


def test_leaves_and_mapping_equal_keras_tree():
    t = keras.ops.ones((2,))
    for structure in [
        (t, [t, {"x": t, "y": None}], 3),
        Pair(t, 2),
        collections.defaultdict(list, {"a": t}),
        {"k": Pair(t, [t])},
        t,
    ]:
        assert len(_leaves(structure)) == len(keras.tree.flatten(structure))
        got = _map_tensors(lambda x: x * 2, structure)
        expected = keras.tree.map_structure(
            lambda x: x * 2 if keras.ops.is_tensor(x) else x, structure
        )
        assert type(got) is type(expected)
        for a, b in zip(keras.tree.flatten(got), keras.tree.flatten(expected), strict=True):
            if keras.ops.is_tensor(a):
                np.testing.assert_array_equal(
                    keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b)
                )
            else:
                assert a == b

import keras
import numpy as np

from ensemble_zoo.utils.backend import DeferredInitialization


def _dense(seed):
    layer = keras.layers.Dense(
        3, kernel_initializer=keras.initializers.GlorotUniform(seed=seed),
        bias_initializer="ones",
    )
    layer.build((None, 5))
    return layer


def test_unassigned_variables_get_their_initializer_values():
    reference = _dense(seed=7)
    deferred = DeferredInitialization()
    with deferred:
        layer = _dense(seed=7)
    assigned = np.arange(15, dtype="float32").reshape(5, 3)
    layer.kernel.assign(assigned)
    deferred.finish()
    # The assigned kernel keeps its value; the bias runs its initializer.
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer.kernel), assigned)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer.bias), np.ones(3))
    # Nothing assigned: the same values as an eager build (same seed).
    deferred = DeferredInitialization()
    with deferred:
        fresh = _dense(seed=7)
    deferred.finish()
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(fresh.kernel),
        keras.ops.convert_to_numpy(reference.kernel),
    )


def test_an_error_inside_initializes_what_was_built():
    deferred = DeferredInitialization()
    try:
        with deferred:
            layer = _dense(seed=1)
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer.bias), np.ones(3))
    # The context is left: new layers initialize eagerly again.
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(_dense(seed=1).bias), np.ones(3)
    )

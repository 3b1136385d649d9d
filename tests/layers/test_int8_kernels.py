import keras
import numpy as np
import pytest
from zoo_testing import to_np

from ensemble_zoo.layers import BatchEnsembleDense
from ensemble_zoo.layers import GroupedDense
from ensemble_zoo.layers import HydraAttention
from ensemble_zoo.layers.int8_kernels import int8_quantize
from ensemble_zoo.models.quantization_modes import QuantizationModesMixin

BACKEND = keras.config.backend()
RNG = np.random.default_rng(0)

# (layer factory, input, {kernel: contracted axes}) for the three layers.
CASES = {
    "grouped_dense": (lambda: GroupedDense(5, 3), RNG.normal(size=(2, 3, 4, 8)), {"kernel": (1,)}),
    "hydra_attention": (
        lambda: HydraAttention(3, 4, 8, member_num_heads=[4, 3, 2]),
        RNG.normal(size=(2, 3, 5, 16)),
        {"query_kernel": (1,), "key_kernel": (1,), "value_kernel": (1,), "output_kernel": (1, 2)},
    ),
    "batch_ensemble_dense": (
        lambda: BatchEnsembleDense((2, 3), 4),
        RNG.normal(size=(8, 5, 6)),
        {"kernel": (0,)},
    ),
}


def numpy_dequantized(kernel, axes):
    """Independent reference: AbsMax int8 per output channel, dequantized."""
    amax = np.abs(kernel).max(axis=axes, keepdims=True)
    scale = 127.0 / (amax + 1e-7)
    return np.clip(np.round(kernel * scale), -127, 127) / scale


@pytest.mark.parametrize("case", sorted(CASES))
def test_int8_equals_the_float_layer_on_dequantized_kernels(case):
    make, x, kernels = CASES[case]
    x = x.astype("float32")
    layer = make()
    layer(x)
    reference = make()
    reference(x)
    reference.set_weights(layer.get_weights())
    for name, axes in kernels.items():
        getattr(reference, name).assign(
            numpy_dequantized(to_np(getattr(layer, name)).astype("float64"), axes)
        )
    layer.quantize("int8")
    assert layer.dtype_policy.name == "int8_from_float32"
    for name in kernels:
        assert keras.backend.standardize_dtype(getattr(layer, name).dtype) == "int8"
    np.testing.assert_allclose(to_np(layer(x)), to_np(reference(x)), atol=2e-5)
    # Rebuilt from its config, the layer is int8 with the same variables.
    revived = type(layer).from_config(layer.get_config())
    revived.build(x.shape)
    assert [v.name for v in revived.weights] == [v.name for v in layer.weights]
    revived.set_weights(layer.get_weights())
    np.testing.assert_array_equal(to_np(revived(x)), to_np(layer(x)))
    with pytest.raises(ValueError, match="already quantized"):
        layer.quantize("int8")


def test_other_modes_raise_naming_the_layer_and_the_model():
    q, scale = int8_quantize(np.array([[0.25, -2.0], [-1.0, 0.5]]), axes=(0,))
    assert q.tolist() == [[32, -127], [-127, 32]] and scale.shape == (1, 2)
    layer = GroupedDense(4, 2, name="heads")
    layer.build((None, 2, 3))
    with pytest.raises(NotImplementedError, match="GroupedDense 'heads' .*'float8'"):
        layer.quantize("float8")

    class ZooModel(QuantizationModesMixin, keras.Model):
        pass

    inputs = keras.Input((2, 3))
    outputs = GroupedDense(4, 2, name="heads")(keras.layers.Dense(3, name="d")(inputs))
    model = ZooModel(inputs, outputs)
    with pytest.raises(NotImplementedError, match="ZooModel .*'int4'.*GroupedDense"):
        model.quantize("int4")
    # `filters` that leave the zoo layer out quantize the rest.
    model.quantize("int4", filters="^d$")
    assert model.get_layer("d").quantization_mode == "int4"
    assert model.get_layer("heads").quantization_mode is None
    model.quantize("int8", filters="heads")
    assert model.get_layer("heads").quantization_mode == "int8"

import keras
import numpy as np
import pytest
from conftest import jit_compile
from conftest import requires_jit
from zoo_testing import to_np

from ensemble_zoo.layers import HydraAttention


def keras_mha(num_heads, key_dim, dim, rng):
    """A keras MultiHeadAttention with random weights and biases."""
    mha = keras.layers.MultiHeadAttention(num_heads=num_heads, key_dim=key_dim)
    mha.build((None, None, dim), (None, None, dim))
    for w in mha.weights:
        w.assign(rng.normal(scale=0.3, size=w.shape).astype("float32"))
    return mha


def mha_weights(mha):
    return {
        "query": (mha._query_dense.kernel, mha._query_dense.bias),
        "key": (mha._key_dense.kernel, mha._key_dense.bias),
        "value": (mha._value_dense.kernel, mha._value_dense.bias),
        "output": (mha._output_dense.kernel, mha._output_dense.bias),
    }


def load_member(layer, m, weights, slots):
    """Copies a keras MHA's heads into member m's first head slots."""
    for name in ("query", "key", "value"):
        kernel, bias = (to_np(w) for w in weights[name])
        k = to_np(getattr(layer, f"{name}_kernel"))
        b = to_np(getattr(layer, f"{name}_bias"))
        k[m, :, :slots], b[m, :slots] = kernel, bias
        getattr(layer, f"{name}_kernel").assign(k)
        getattr(layer, f"{name}_bias").assign(b)
    kernel, bias = (to_np(w) for w in weights["output"])
    k, b = to_np(layer.output_kernel), to_np(layer.output_bias)
    k[m, :slots], b[m] = kernel, bias
    layer.output_kernel.assign(k)
    layer.output_bias.assign(b)


def test_equals_separate_attention_layers_with_unequal_heads(rng):
    dim, key_dim, heads = 24, 6, [4, 2, 0]
    layer = HydraAttention(3, num_heads=4, key_dim=key_dim, member_num_heads=heads)
    layer.build((None, 3, None, dim))
    # Random values everywhere first: unused slots hold garbage that the
    # mask must remove.
    for w in layer.trainable_weights:
        w.assign(rng.normal(size=w.shape).astype("float32"))
    members = [keras_mha(h, key_dim, dim, rng) if h else None for h in heads]
    for m, mha in enumerate(members):
        if mha is not None:
            load_member(layer, m, mha_weights(mha), heads[m])
    x = rng.normal(size=(2, 3, 9, dim)).astype("float32")
    padding = np.ones((2, 9), bool)
    padding[1, 6:] = False
    for attention_mask in (None, padding):
        fused = to_np(layer(x, attention_mask=attention_mask))
        for m, mha in enumerate(members):
            if mha is None:  # no heads: only the output bias remains
                expected = np.broadcast_to(to_np(layer.output_bias)[m], (2, 9, dim))
            else:
                mask = (
                    None
                    if attention_mask is None
                    else padding[:, None, :] & np.ones((2, 9, 1), bool)
                )
                expected = to_np(mha(x[:, m], x[:, m], attention_mask=mask))
            np.testing.assert_allclose(fused[:, m], expected, atol=1e-5)


def test_mask_equals_zeroed_output_block_equals_structural_slice(rng):
    dim, key_dim = 16, 4
    mha = keras_mha(4, key_dim, dim, rng)
    x = rng.normal(size=(2, 1, 7, dim)).astype("float32")

    def hydra_with(weights, slots, mask=None):
        layer = HydraAttention(1, num_heads=slots, key_dim=key_dim)
        layer.build((None, 1, None, dim))
        load_member(layer, 0, weights, slots)
        if mask is not None:
            layer.head_mask.assign(np.array([mask], "float32"))
        return to_np(layer(x))[:, 0]

    weights = mha_weights(mha)
    masked = hydra_with(weights, 4, mask=[1, 0, 1, 1])
    zeroed = dict(weights)
    out_kernel = to_np(weights["output"][0]).copy()
    out_kernel[1] = 0.0
    zeroed["output"] = (out_kernel, weights["output"][1])
    zero_block = hydra_with(zeroed, 4)
    keep = [0, 2, 3]
    sliced = {
        name: (to_np(k)[:, keep], to_np(b)[keep])
        for name, (k, b) in weights.items()
        if name != "output"
    }
    sliced["output"] = (to_np(weights["output"][0])[keep], to_np(weights["output"][1]))
    structural = hydra_with(sliced, 3)
    np.testing.assert_allclose(masked, zero_block, atol=1e-5)
    np.testing.assert_allclose(masked, structural, atol=1e-5)
    # And the keras layer with the same head's output block zeroed.
    mha._output_dense.kernel.assign(out_kernel)
    np.testing.assert_allclose(masked, to_np(mha(x[:, 0], x[:, 0])), atol=1e-5)


def test_dropout_only_in_training_and_config_round_trip(rng):
    layer = HydraAttention(2, num_heads=3, key_dim=4, member_num_heads=[3, 1], dropout=0.5)
    x = rng.normal(size=(2, 2, 5, 12)).astype("float32")
    inference = to_np(layer(x, training=False))
    np.testing.assert_allclose(to_np(layer(x)), inference)
    assert np.abs(to_np(layer(x, training=True)) - inference).max() > 1e-3
    clone = HydraAttention.from_config(layer.get_config())
    clone.build((None, 2, None, 12))
    clone.set_weights(layer.get_weights())
    np.testing.assert_allclose(to_np(clone(x)), inference, atol=1e-6)
    assert clone.member_num_heads == [3, 1]
    assert [w.name for w in layer.non_trainable_weights] == ["head_mask"]


@pytest.mark.parametrize("mask_rank", [None, 2, 3])
def test_fused_kernel_equals_einsums(rng, mask_rank):
    """`ops.dot_product_attention` over members * heads == head-major einsums,
    with unequal kept heads and padding masks (BERT's) of either form."""
    layer = HydraAttention(3, num_heads=4, key_dim=6, member_num_heads=[4, 2, 0])
    layer.build((None, 3, None, 24))
    for w in layer.trainable_weights:
        w.assign(rng.normal(scale=0.3, size=w.shape).astype("float32"))
    x = rng.normal(size=(2, 3, 9, 24)).astype("float32")
    padding = np.ones((2, 9), bool)
    padding[1, 6:] = False
    mask = {None: None, 2: padding, 3: padding[:, None, :] & np.ones((2, 9, 1), bool)}
    outputs = {}
    for implementation in ("einsum", "fused"):
        layer.attention_implementation = implementation
        outputs[implementation] = to_np(layer(x, attention_mask=mask[mask_rank]))
    np.testing.assert_allclose(outputs["fused"], outputs["einsum"], atol=2e-5)
    assert np.abs(outputs["einsum"]).max() > 0.1


def test_attention_implementation_choice_and_config():
    from ensemble_zoo.utils.backend import accelerator
    from ensemble_zoo.utils.backend import resolve_attention_implementation

    expected = "einsum" if accelerator() == "cpu" else "fused"
    assert resolve_attention_implementation("auto") == expected
    assert resolve_attention_implementation("fused") == "fused"
    layer = HydraAttention(2, num_heads=3, key_dim=4, dropout=0.1, attention_implementation="fused")
    assert HydraAttention.from_config(layer.get_config()).attention_implementation == "fused"
    # Dropout on the probabilities needs the einsums in training.
    assert layer._implementation(training=True) == "einsum"
    assert layer._implementation(training=False) == "fused"
    with pytest.raises(ValueError, match="attention_implementation"):
        HydraAttention(2, num_heads=3, key_dim=4, attention_implementation="flash")


@requires_jit
@pytest.mark.parametrize("implementation", ["einsum", "fused"])
def test_compiles_with_xla(rng, implementation):
    inputs = keras.Input((2, 5, 12))
    outputs = HydraAttention(2, num_heads=3, key_dim=4, attention_implementation=implementation)(
        inputs
    )
    model = keras.Model(inputs, outputs)
    model.compile(loss="mse", optimizer="sgd", jit_compile=jit_compile())
    x = rng.normal(size=(4, 2, 5, 12)).astype("float32")
    before = model.predict(x, verbose=0)
    model.fit(x, x, epochs=1, verbose=0)
    assert np.abs(model.predict(x, verbose=0) - before).max() > 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="member_num_heads"):
        HydraAttention(2, num_heads=3, key_dim=4, member_num_heads=[3, 4])
    with pytest.raises(ValueError, match="member_num_heads"):
        HydraAttention(2, num_heads=3, key_dim=4, member_num_heads=[3])
    layer = HydraAttention(2, num_heads=3, key_dim=4)
    with pytest.raises(ValueError, match="num_members=2"):
        layer(np.zeros((1, 3, 5, 12), "float32"))
    with pytest.raises(ValueError, match=r"\(batch, members, tokens, dim\)"):
        HydraAttention(2, num_heads=3, key_dim=4)(np.zeros((1, 2, 12), "float32"))

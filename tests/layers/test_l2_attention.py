"""L2 self-attention against Kim et al.'s formula in NumPy (the explicit
`A_h = W_h W_h^T / sqrt(d)` form), LRFormer's Lipschitz-regularized
attention against its formula, and their conversion from Keras'
`MultiHeadAttention`."""

import keras
import numpy as np
import pytest
from zoo_testing import to_np

from ensemble_zoo.layers import L2MultiHeadAttention
from ensemble_zoo.layers import LipschitzRegularizedAttention


def np_l2_attention(x, wq, wv, bv, wo, bo):
    """The paper's L2-MHA: per head softmax of minus the scaled squared
    distances, times X A_h W^V_h, heads concatenated, times W^O."""
    heads, d = wq.shape[1], wq.shape[2]
    out = np.zeros(x.shape[:2] + (heads, d))
    for h in range(heads):
        q = x @ wq[:, h]  # (batch, tokens, d)
        logits = -((q[:, :, None] - q[:, None, :]) ** 2).sum(-1) / np.sqrt(d)
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        a = wq[:, h] @ wq[:, h].T / np.sqrt(d)
        out[:, :, h] = p @ (x @ a @ wv[:, h]) + bv[h]
    return np.einsum("bthv,hvd->btd", out, wo) + bo


def test_equals_the_papers_formula_and_converts_from_multi_head_attention():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 5, 8)).astype("float32")
    layer = L2MultiHeadAttention(num_heads=2, key_dim=3)
    layer.build(x.shape)
    for w in layer.weights:
        w.assign(rng.normal(size=w.shape).astype("float32") * 0.5)
    expected = np_l2_attention(
        x,
        *(to_np(w) for w in (layer.query_kernel, layer.value_kernel)),
        to_np(layer.value_bias),
        to_np(layer.output_kernel),
        to_np(layer.output_bias),
    )
    np.testing.assert_allclose(to_np(layer(x, x)), expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(to_np(layer(x)), expected, rtol=1e-4, atol=1e-4)
    restored = L2MultiHeadAttention.from_config(layer.get_config())
    assert restored.get_config() == layer.get_config()

    mha = keras.layers.MultiHeadAttention(num_heads=2, key_dim=3, dropout=0.1)
    mha(x, x)
    converted = L2MultiHeadAttention.from_multi_head_attention(mha)
    assert (converted.num_heads, converted.key_dim, converted.dropout) == (2, 3, 0.1)
    for ours, theirs in (
        (converted.query_kernel, mha.query_dense.kernel),
        (converted.value_kernel, mha.value_dense.kernel),
        (converted.value_bias, mha.value_dense.bias),
        (converted.output_kernel, mha.output_dense.kernel),
        (converted.output_bias, mha.output_dense.bias),
    ):
        np.testing.assert_array_equal(to_np(ours), to_np(theirs))
    # Low precision: the distances stay float32 and a fully masked row
    # gives uniform weights, not NaN.
    mask = np.ones((3, 5, 5), bool)
    mask[0, 2] = False
    low = L2MultiHeadAttention(num_heads=2, key_dim=3, dtype="mixed_float16")
    low.build(x.shape)
    low.set_weights(layer.get_weights())
    out = to_np(keras.ops.cast(low(x, x, attention_mask=mask), "float32"))
    assert np.isfinite(out).all()
    full = to_np(layer(x, x, attention_mask=mask))
    np.testing.assert_allclose(out[1:], full[1:], rtol=2e-2, atol=2e-2)
    with pytest.raises(ValueError, match="is self-attention"):
        layer(x, x[:, ::-1])
    with pytest.raises(TypeError, match="built keras MultiHeadAttention"):
        L2MultiHeadAttention.from_multi_head_attention(keras.layers.Dense(3))
    with pytest.raises(ValueError, match="`num_heads` must be a positive integer"):
        L2MultiHeadAttention(num_heads=0, key_dim=3)


def np_lipschitz_regularized_attention(x, alpha, wq, wv, bv, wo, bo):
    """LRFormer's LRSA: per head softmax of minus alpha times the squared
    distances over ||X W_h||_F max_t ||x_t||, times X W^V_h, heads
    concatenated, times W^O."""
    heads = wq.shape[1]
    out = np.zeros(x.shape[:2] + (heads, wv.shape[2]))
    largest = np.linalg.norm(x, axis=-1).max(-1)  # (batch,)
    for b in range(x.shape[0]):
        for h in range(heads):
            q = x[b] @ wq[:, h]
            bound = np.linalg.norm(q) * largest[b] + 1e-10
            logits = -alpha * ((q[:, None] - q[None, :]) ** 2).sum(-1) / bound
            p = np.exp(logits - logits.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            out[b, :, h] = p @ (x[b] @ wv[:, h] + bv[h])
    return np.einsum("bthv,hvd->btd", out, wo) + bo


def test_lipschitz_regularized_attention_equals_lrformers_formula():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 5, 8)).astype("float32")
    x[1] *= 4.0  # another input scale: the bound is per input
    layer = LipschitzRegularizedAttention(num_heads=2, key_dim=3, alpha=7.0)
    layer.build(x.shape)
    for w in layer.weights:
        w.assign(rng.normal(size=w.shape).astype("float32") * 0.5)
    expected = np_lipschitz_regularized_attention(
        x.astype("float64"),
        7.0,
        *(to_np(w).astype("float64") for w in (layer.query_kernel, layer.value_kernel)),
        to_np(layer.value_bias),
        to_np(layer.output_kernel),
        to_np(layer.output_bias),
    )
    np.testing.assert_allclose(to_np(layer(x)), expected, rtol=1e-4, atol=1e-4)
    # Each input's attention depends on itself alone.
    np.testing.assert_allclose(to_np(layer(x[1:2])), expected[1:2], rtol=1e-4, atol=1e-4)
    restored = LipschitzRegularizedAttention.from_config(layer.get_config())
    assert restored.get_config() == layer.get_config()
    assert restored.alpha == 7.0
    mha = keras.layers.MultiHeadAttention(num_heads=2, key_dim=3)
    mha(x, x)
    converted = LipschitzRegularizedAttention.from_multi_head_attention(mha, alpha=3.0)
    assert isinstance(converted, LipschitzRegularizedAttention) and converted.alpha == 3.0
    np.testing.assert_array_equal(to_np(converted.value_kernel), to_np(mha.value_dense.kernel))
    with pytest.raises(ValueError, match="LipschitzRegularizedAttention is self-attention"):
        layer(x, x[:, ::-1])
    with pytest.raises(ValueError, match="`alpha` must lie in"):
        LipschitzRegularizedAttention(num_heads=2, key_dim=3, alpha=0.0)
    # An all-zero input trains to finite weights (the norms' square roots
    # at 0 gave NaN gradients).
    model = keras.Sequential([keras.Input((5, 8)), LipschitzRegularizedAttention(2, 3)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    model.fit(np.zeros((2, 5, 8), "float32"), np.ones((2, 5, 8), "float32"), verbose=0)
    assert all(np.isfinite(to_np(w)).all() for w in model.weights)

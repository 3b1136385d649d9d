"""`utils.gradients.remat`: the gradients of the plain function, and under
JAX the memory that `jax.checkpoint` does not save on XLA:CPU."""

import keras
import numpy as np
import pytest
from keras import ops
from zoo_testing import to_np

from ensemble_zoo.utils.gradients import remat


def blocks(remat_block, layers):
    """A stack of attention-like blocks, one per layer of `layers`, each
    through `remat_block` (a function wrapper)."""

    def block(layer):
        def run(x):
            scores = ops.softmax(ops.einsum("bqd,bkd->bqk", layer(x), x) / 8.0, axis=-1)
            return x + ops.tanh(ops.einsum("bqk,bkd->bqd", scores, x))

        return run

    def forward(x):
        for layer in layers:
            x = remat_block(block(layer))(x)
        return x

    return forward


def test_remat_gives_the_plain_gradients_and_saves_memory_under_jax():
    x = np.random.default_rng(0).normal(size=(4, 128, 32)).astype("float32")
    layers = [keras.layers.Dense(32, use_bias=False) for _ in range(6)]
    for layer in layers:
        layer.build((None, 32))
    forward, plain = blocks(remat, layers), blocks(lambda f: f, layers)
    backend = keras.config.backend()
    if backend != "jax":  # keras.remat itself: the same values and gradients
        kernels = [layer.kernel for layer in layers]
        x = ops.convert_to_tensor(x)
        if backend == "tensorflow":
            import tensorflow as tf

            def gradients(run):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum(run(x) ** 2)
                return [g.numpy() for g in tape.gradient(loss, [k.value for k in kernels])]
        else:
            import torch

            def gradients(run):
                loss = torch.sum(run(x) ** 2)
                return [g.numpy() for g in torch.autograd.grad(loss, [k.value for k in kernels])]

        np.testing.assert_allclose(to_np(forward(x)), to_np(plain(x)), atol=1e-6)
        for ours, theirs in zip(gradients(forward), gradients(plain), strict=True):
            np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5 * np.abs(theirs).max())
        return
    import jax

    variables = [layer.kernel for layer in layers]

    def loss(values, run):
        with keras.StatelessScope(list(zip(variables, values))):
            return jax.numpy.sum(run(x) ** 2)

    values = [v.value for v in variables]
    temps, grads = {}, {}
    checkpoint = blocks(jax.checkpoint, layers)
    for name, run in (("remat", forward), ("plain", plain), ("checkpoint", checkpoint)):
        f = jax.jit(jax.grad(lambda v, run=run: loss(v, run)))
        temps[name] = f.lower(values).compile().memory_analysis().temp_size_in_bytes
        grads[name] = f(values)
    for ours, theirs in zip(grads["remat"], grads["plain"], strict=True):
        # float32 round-off of sums fused differently: relative to the largest
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5 * np.abs(theirs).max())
    # jax.checkpoint keeps about what the plain step keeps on a CPU
    # (XLA:CPU runs its recomputation early, jax-ml/jax#19822); ours a
    # block's worth.
    assert temps["remat"] < 0.5 * temps["plain"], temps
    if jax.default_backend() == "cpu" and temps["checkpoint"] < 0.5 * temps["plain"]:
        pytest.fail(
            f"jax.checkpoint saves memory on this jaxlib ({temps}): `utils.gradients.remat` "
            "may go back to `keras.remat`."
        )

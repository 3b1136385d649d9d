"""Gradients per backend: of a loss with respect to chosen variables
(Keras 3 has no backend-neutral `gradient()` function; Taylor head
importance, `ensemble_zoo.pruning`), and rematerialisation that saves
memory under JAX on a CPU as well (`remat`).
"""

import weakref

import keras
import numpy as np

# model -> {loss_fn: jitted gradient function}: one XLA compilation per
# model, loss and batch shape instead of eager op-by-op differentiation
# (the Taylor-importance tests: 59 s -> 19 s on 2 CPU cores).
_JAX_GRADIENTS = weakref.WeakKeyDictionary()


def loss_gradients(model, loss_fn, x, y, variables):
    """`d loss_fn(y, model(x)) / d v` for each `v` in `variables` (NumPy).

    Args:
        model: a built Keras model (called in inference mode).
        loss_fn: callable `(y, y_pred) -> scalar tensor`.
        x, y: one batch of inputs and targets.
        variables: list of the model's trainable variables.

    Returns:
        list of NumPy arrays, one per variable.
    """
    backend = keras.config.backend()
    if backend == "jax":
        trainable = model.trainable_variables
        positions = [_index_of(trainable, v) for v in variables]
        grads = _jax_gradient_function(model, loss_fn)(
            [v.value for v in trainable], [v.value for v in model.non_trainable_variables], x, y
        )
        return [np.asarray(grads[p]) for p in positions]
    if backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=False))
        # Gathers (embeddings) give IndexedSlices; densify them. A variable
        # the loss does not reach gets None: report zeros, as JAX does.
        return [
            np.zeros(v.shape, v.dtype) if g is None else np.asarray(tf.convert_to_tensor(g))
            for g, v in zip(tape.gradient(loss, variables), variables)
        ]
    if backend == "torch":
        import torch

        for v in variables:
            v.value.grad = None
        with torch.enable_grad():
            loss = loss_fn(y, model(x, training=False))
            grads = torch.autograd.grad(loss, [v.value for v in variables], allow_unused=True)
        return [
            np.zeros(v.shape, v.dtype) if g is None else g.detach().cpu().numpy()
            for g, v in zip(grads, variables)
        ]
    raise ValueError(f"Gradients are not implemented for backend {backend!r}.")


def _jax_gradient_function(model, loss_fn):
    import jax

    functions = _JAX_GRADIENTS.setdefault(model, {})
    if loss_fn not in functions:
        # A weak reference: a strong one in the cached value would keep the
        # model (the cache's key) alive forever.
        model_ref = weakref.ref(model)

        def compute(values, non_trainable, x, y):
            y_pred, _ = model_ref().stateless_call(values, non_trainable, x, training=False)
            return loss_fn(y, y_pred)

        functions[loss_fn] = jax.jit(jax.grad(compute))
    return functions[loss_fn]


def _index_of(variables, variable):
    for i, v in enumerate(variables):
        if v is variable:
            return i
    raise ValueError(f"Variable {variable.path} is not trainable in this model.")


def remat(function):
    """`keras.remat(function)`: the backward pass recomputes `function`'s
    intermediate values from its inputs instead of keeping them.

    Under JAX, XLA:CPU (jaxlib 0.10.2) runs what `jax.checkpoint`
    recomputes as soon as its inputs exist, in the forward pass, so every
    checkpointed block's internals are live at once and nothing is saved
    (jax-ml/jax#19822, open; XLA drops the optimisation barriers JAX puts
    on the recomputation's inputs). Here the recomputation reads its
    float inputs through the incoming cotangent (`x + 0 * g[0]`), so it
    cannot start before the backward pass reaches the block: XLA's
    temporaries of a 4-layer Gemma 3's training step at 512 tokens went
    from 478 MiB (with `jax.checkpoint` or without) to 132 MiB, and
    Gemma 3 270M's fit step of 1,024 tokens from +9.1 to +1.2 GB
    (`benchmarks/llm_memory.py`). `0 * g[0]` is zero for every finite
    cotangent (a NaN or infinite one already spoils the gradient).
    Elsewhere this is `keras.remat`.

    Args:
        function: a callable taking tensors as positional arguments only
            and returning a structure of tensors; the variables it reads
            (a Keras layer's) are found by tracing it.

    Returns:
        A callable with `function`'s signature.
    """
    if keras.config.backend() != "jax":
        return keras.remat(function)
    import jax
    import jax.numpy as jnp

    def inexact(x):
        return jnp.issubdtype(x.dtype, jnp.inexact)

    def run(*args):
        converted, constants = jax.closure_convert(function, *args)

        @jax.custom_vjp
        def call(*values):
            return converted(*values)

        def forward(*values):
            return converted(*values), values

        def backward(values, cotangent):
            leaves = [g for g in jax.tree.leaves(cotangent) if inexact(g) and g.size]
            if leaves:
                zero = jnp.ravel(leaves[0])[0] * 0
                values = [v + zero.astype(v.dtype) if inexact(v) else v for v in values]
            return jax.vjp(converted, *values)[1](cotangent)

        call.defvjp(forward, backward)
        return call(*args, *constants)

    return run

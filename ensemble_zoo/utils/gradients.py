"""Gradients of a loss with respect to chosen variables, per backend.

The one place where ensemble_zoo needs backend-specific code: Keras 3 has
no backend-neutral `gradient()` function. Used by Taylor head importance
(`ensemble_zoo.pruning`).
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

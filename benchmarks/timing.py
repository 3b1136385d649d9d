"""Timing helpers shared by the benchmark scripts."""

import time

import keras
import numpy as np


def compiled_call(model):
    """A function running one forward pass, compiled the backend's best way.

    `jax.jit` of `stateless_call` under JAX, `tf.function(jit_compile=True)`
    under TensorFlow, eager `torch.no_grad()` under PyTorch. Returns NumPy,
    so the time includes waiting for the result.
    """
    backend = keras.config.backend()
    if backend == "jax":
        import jax

        trainable = [v.value for v in model.trainable_variables]
        non_trainable = [v.value for v in model.non_trainable_variables]
        fn = jax.jit(lambda x: model.stateless_call(trainable, non_trainable, x)[0])
        return lambda x: np.asarray(fn(x))
    if backend == "tensorflow":
        import tensorflow as tf

        fn = tf.function(lambda x: model(x, training=False), jit_compile=True)
        return lambda x: fn(x).numpy()
    import torch

    def call(x):
        with torch.no_grad():
            return keras.ops.convert_to_numpy(model(x, training=False))

    return call


def interleaved_ms(groups, x, repeats, *args):
    """Median ms of each group of fns (the group's fns summed), the groups
    timed in turn within every repeat so that a change in the load of a
    shared machine hits them alike; two warm-up rounds first.

    Args:
        groups: dict mapping a name to a list of functions of `(x, *args)`.
        x: the input.
        repeats: int, the number of timed rounds.

    Returns:
        dict mapping each name to its median milliseconds.
    """
    for fns in groups.values():
        for fn in fns:
            fn(x, *args)
            fn(x, *args)
    times = {name: [] for name in groups}
    for _ in range(repeats):
        for name, fns in groups.items():
            start = time.perf_counter()
            for fn in fns:
                fn(x, *args)
            times[name].append(time.perf_counter() - start)
    return {name: 1000.0 * float(np.median(t)) for name, t in times.items()}


def median_ms(fns, x, repeats, *args):
    """Median over `repeats` of the summed time of running every fn once
    on `x` (and `args`), after two warm-up rounds."""
    return interleaved_ms({"fns": fns}, x, repeats, *args)["fns"]

"""The active Keras backend and the kind of device it computes on (a leaf
module: `ensemble_zoo.utils.backend` and `ensemble_zoo.utils.workarounds`
both read it)."""

import keras


def backend():
    """The active Keras backend name: `"jax"`, `"tensorflow"` or `"torch"`."""
    return keras.config.backend()


def accelerator():
    """The kind of device the backend computes on: `"gpu"`, `"tpu"` or `"cpu"`."""
    name = backend()
    if name == "torch":
        import torch

        return "gpu" if torch.cuda.is_available() else "cpu"
    if name == "jax":
        import jax

        kinds = {device.platform for device in jax.devices()}
    else:
        import tensorflow as tf

        kinds = {d.device_type.lower() for d in tf.config.list_logical_devices()}
    for kind in ("tpu", "gpu", "cuda", "rocm"):
        if kind in kinds:
            return "tpu" if kind == "tpu" else "gpu"
    return "cpu"

"""The one place where the zoo's code differs by Keras backend."""

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


ATTENTION_IMPLEMENTATIONS = ("auto", "einsum", "fused")


def check_attention_implementation(value):
    """Validates an `attention_implementation` argument; returns it."""
    if value not in ATTENTION_IMPLEMENTATIONS:
        raise ValueError(
            "`attention_implementation` must be one of "
            f"{ATTENTION_IMPLEMENTATIONS}; got {value!r}."
        )
    return value


def resolve_attention_implementation(value):
    """`"einsum"` or `"fused"` for an `attention_implementation` argument.

    `"auto"` picks the fused kernel (`keras.ops.dot_product_attention`:
    cuDNN / flash attention on GPU, XLA's fused attention on TPU) on
    accelerators, and the head-major einsums on CPU, where XLA runs them
    faster than the fused op and its transposes.
    """
    value = check_attention_implementation(value)
    if value != "auto":
        return value
    return "einsum" if accelerator() == "cpu" else "fused"


def supports_saved_model_export():
    """Whether `model.export(format="tf_saved_model")` works here.

    TensorFlow exports natively and JAX through jax2tf; the PyTorch backend
    has no SavedModel path (it would need `torch_xla`).
    """
    return backend() in ("tensorflow", "jax")


TORCH_EXPORT_HELP = (
    "The PyTorch backend cannot write a TensorFlow SavedModel. Save the "
    "model with `model.save_to_preset(directory)` (or `save_weights`), then "
    "in a process with KERAS_BACKEND=tensorflow (or jax) load it with "
    "`ensemble_zoo.models.EnsembleClassifier.from_preset(directory)` and "
    "call `export(...)` there. The weights files are backend-independent."
)


def torch_parameter_dict(variables):
    """A `torch.nn.ParameterDict` holding every variable, keyed uniquely.

    Keras' PyTorch backend registers a model's variables as parameters
    keyed by `variable.path`. Members built from one config (a deep
    ensemble of keras-hub models, MC dropout copies) share paths, so all
    but one of them would be left out of `model.parameters()`, and
    `zero_grad()` before each training step would not reach them: their
    gradients would accumulate across steps. Repeated paths get a
    `__<n>` suffix here.
    """
    import torch

    params = {}
    for variable in variables:
        key, n = variable.path, 1
        while key in params:
            key, n = f"{variable.path}__{n}", n + 1
        params[key] = variable.value
    return torch.nn.ParameterDict(params)


def write_saved_model(model, filepath, serve, input_signature, verbose=None, **kwargs):
    """Writes a SavedModel of `model` with one endpoint, `serve`.

    The one export path of the zoo's models (TensorFlow and JAX backends);
    under PyTorch it raises with `TORCH_EXPORT_HELP`.
    """
    if not supports_saved_model_export():
        raise ValueError(TORCH_EXPORT_HELP)
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        name="serve", fn=serve, input_signature=input_signature, **kwargs
    )
    archive.write_out(filepath, verbose=bool(verbose))


def _patch_jax_float16_attention_on_cpu():
    """Lets `keras.ops.dot_product_attention` run float16 under JAX on CPU.

    Keras' JAX backend calls `jax.nn.dot_product_attention`, which computes
    float16 scores with `preferred_element_type=float32`: a dot that XLA:CPU
    cannot compile ("The precision 'F16_F16_F32' is not supported by
    dot_general on CPU"), so every keras-hub attention fails under
    `mixed_float16` on a CPU. There, and for float16 inputs only, the
    attention runs in float32 and its output is cast back to float16
    (scores and softmax were float32 already); GPUs and TPUs keep Keras'
    kernel unchanged.
    """
    from keras.src.backend.jax import nn as jax_nn

    original = jax_nn.dot_product_attention
    if getattr(original, "_ensemble_zoo_patch", False):
        return

    def dot_product_attention(query, key, value, *args, **kwargs):
        import jax.numpy as jnp

        query = jnp.asarray(query)
        if query.dtype != jnp.float16 or accelerator() != "cpu":
            return original(query, key, value, *args, **kwargs)
        out = original(
            query.astype(jnp.float32), jnp.asarray(key).astype(jnp.float32),
            jnp.asarray(value).astype(jnp.float32), *args, **kwargs,
        )
        return out.astype(jnp.float16)

    dot_product_attention._ensemble_zoo_patch = True
    jax_nn.dot_product_attention = dot_product_attention


def _patch_torch_flash_attention_check():
    """Keeps `keras.ops.dot_product_attention` traceable by `torch.compile`.

    With `flash_attention=None` (the default of every `MultiHeadAttention`,
    so of every keras-hub attention), Keras' torch backend asks
    `torch.backends.cuda.can_use_flash_attention(SDPAParams(...))` on each
    call. Dynamo cannot trace the `SDPAParams` extension type: it breaks the
    graph inside Keras' `name_scope` context manager, which makes it give up
    on every enclosing frame, so a compiled model runs mostly eagerly (and
    the deep ensemble's member loop crashed dynamo with `NameError:
    ___tuple_iterator_getitem`). While dynamo traces, this returns `False`
    ("do not force the flash kernel") without building `SDPAParams`;
    `scaled_dot_product_attention` still picks the flash or memory-efficient
    kernel by itself when the inputs allow it, so outputs and kernels are
    unchanged. Eager calls and `flash_attention=True` keep Keras' check.
    """
    from keras.src.backend.torch import nn as torch_nn

    original = torch_nn._can_use_flash_attention
    if getattr(original, "_ensemble_zoo_patch", False):
        return

    def _can_use_flash_attention(*args, raise_error=False, **kwargs):
        import torch

        if not raise_error and torch.compiler.is_compiling():
            return False
        return original(*args, raise_error=raise_error, **kwargs)

    _can_use_flash_attention._ensemble_zoo_patch = True
    torch_nn._can_use_flash_attention = _can_use_flash_attention


if backend() == "jax":
    _patch_jax_float16_attention_on_cpu()
elif backend() == "torch":
    _patch_torch_flash_attention_check()

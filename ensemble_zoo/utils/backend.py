"""The one place where the zoo's code differs by Keras backend.

Importing it changes nothing in Keras, keras-hub or a backend: the
workarounds for dependency bugs are installed only while a zoo model
computes (`zoo_workarounds`, `ZooWorkaroundsMixin`, defined in
`ensemble_zoo.utils.workarounds`).
"""

import contextlib
import functools

import keras

from ensemble_zoo.utils.devices import accelerator  # noqa: F401
from ensemble_zoo.utils.devices import backend  # noqa: F401
from ensemble_zoo.utils.workarounds import ZooWorkaroundsMixin  # noqa: F401
from ensemble_zoo.utils.workarounds import installed_workarounds  # noqa: F401
from ensemble_zoo.utils.workarounds import workarounds_for
from ensemble_zoo.utils.workarounds import zoo_workarounds

ATTENTION_IMPLEMENTATIONS = ("auto", "einsum", "fused")


def check_attention_implementation(value):
    """Validates an `attention_implementation` argument; returns it."""
    if value not in ATTENTION_IMPLEMENTATIONS:
        raise ValueError(
            f"`attention_implementation` must be one of {ATTENTION_IMPLEMENTATIONS}; got {value!r}."
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


def argmax_int32(x, axis=-1):
    """`keras.ops.argmax(x, axis)` as int32, for `x` without negative zeros.

    Keras' TensorFlow and JAX (CPU) `argmax` of a float tensor first maps
    -0.0 below +0.0 (keras-team/keras, for jax-ml/jax#24280) with
    `signbit`, a bitcast to integers that ONNX (no `BitCast` op before
    opset 26, which ONNX Runtime 1.32 lacks) cannot carry, so a router
    using it does not export. For tensors without -0.0 (MoE gates:
    softmax outputs, or -1 where masked) the plain `argmax` of the
    backend is the same (first index of the largest value).
    """
    name = backend()
    if name == "tensorflow":
        import tensorflow as tf

        return tf.argmax(x, axis=axis, output_type=tf.int32)
    if name == "jax":
        import jax.numpy as jnp

        return jnp.argmax(x, axis=axis).astype(jnp.int32)
    return keras.ops.cast(keras.ops.argmax(x, axis=axis), "int32")


def top_k_values(x, k):
    """The `k` largest values of `x` along its last axis, in decreasing
    order: `keras.ops.top_k(x, k)[0]`. Under PyTorch that returns
    `torch.topk`'s named tuple, which `torch.compile` (torch 2.13) cannot
    take apart in one graph ("isinstance() cannot determine type of
    argument", a graph break in the compiled decode step), so the values
    are read from `torch.topk` itself there."""
    if backend() == "torch":
        import torch

        return torch.topk(keras.ops.convert_to_tensor(x), k).values
    return keras.ops.top_k(x, k)[0]


def no_gradients():
    """A context in which the backend records no gradients: PyTorch's
    `torch.no_grad()` (outside `fit`, Keras' PyTorch backend runs with
    autograd on, so an eager pass keeps every intermediate tensor that a
    backward pass could need); nothing elsewhere (JAX and TensorFlow record
    gradients only when asked)."""
    if backend() == "torch":
        import torch

        return torch.no_grad()
    return contextlib.nullcontext()


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
    archive.add_endpoint(name="serve", fn=serve, input_signature=input_signature, **kwargs)
    archive.write_out(filepath, verbose=bool(verbose))


def _prepare_torch_compiled_training(model):
    """Keras' torch train step starts with `zero_grad()`, which reads
    whether each parameter has a gradient, and AdamW's weight decay fills a
    cache on its first update: dynamo guards on both, so the first step (no
    gradients, empty cache) and every later one compiled separately.
    Giving every trainable variable a zero gradient (which `zero_grad`
    drops before the step computes anything) and filling the cache first
    makes the first step look like the others."""
    import torch

    optimizer = getattr(model, "optimizer", None)
    variables = model.trainable_variables
    if optimizer is not None and hasattr(optimizer, "_use_weight_decay"):
        for variable in variables:
            optimizer._use_weight_decay(variable)
    with torch.no_grad():
        for variable in variables:
            value = variable.value
            if value.grad is None:
                value.grad = torch.zeros_like(value)


def _after_one_eager_call(model, step):
    """`step`, whose first call runs `model` eagerly on the batch first.

    A layer's first call sets Python state (its name-scope parent path,
    `_called`) that dynamo guards on, so a step traced on the first batch
    failed its guards on the second and compiled again. The eager call (in
    inference mode, without gradients) sets that state before the trace.
    """
    import torch

    done = []

    def first_call_eagerly(data):
        if not done:
            done.append(True)
            x, _, _ = keras.utils.unpack_x_y_sample_weight(data[0])
            with torch.no_grad():
                model(x, training=False)
        return step(data)

    return first_call_eagerly


def _in_zoo_workarounds(step):
    """`step`, run inside `zoo_workarounds()`: the whole step (forward,
    loss, backward) is traced by `jax.jit` / `torch.compile` with the
    workarounds in place, also for a task whose own `call` does not enter
    them."""

    def step_in_zoo_workarounds(*args, **kwargs):
        with zoo_workarounds():
            return step(*args, **kwargs)

    return step_in_zoo_workarounds


_TRACING_RECURSION_LIMIT = 5000


def with_tracing_depth(step):
    """`step` run with Python's recursion limit at least
    `_TRACING_RECURSION_LIMIT`, restored after each call.

    torch.compile's tracer (dynamo) inlines every nested call with Python
    recursion, about ten frames per Keras call level; a deep ensemble of
    keras-hub classifiers (task, member task, member backbone, encoder,
    block, attention, ...) exceeded the default limit of 1000 while
    tracing its predict step (`tests/models/test_torch_compile.py`).
    Scoped to the zoo's compiled steps; dynamo has no depth setting of its
    own to raise instead (torch 2.13).
    """
    import sys

    @functools.wraps(step)
    def run(*args, **kwargs):
        previous = sys.getrecursionlimit()
        sys.setrecursionlimit(max(previous, _TRACING_RECURSION_LIMIT))
        try:
            return step(*args, **kwargs)
        finally:
            sys.setrecursionlimit(previous)

    return run


def track_torch_parameters(model):
    """Registers every variable of a functional zoo task as a PyTorch
    parameter of `model` (what a zoo task's `_track_variables` and
    `named_parameters` call; Keras calls neither under JAX or TensorFlow).

    Keras tracks a functional model's variables while
    `Functional.__init__` builds it, before keras-hub's `Task` lets
    attributes reach `torch.nn.Module` (a keras-hub `ViTImageClassifier`
    under keras 3.15.1 has no parameters at all): `zero_grad()` then missed
    every variable and gradients piled up across steps
    (`tests/models/test_torch_parameters.py`). Keys are unique even where
    members share variable paths (`torch_parameter_dict`).
    """
    import torch

    torch.nn.Module.__setattr__(model, "_torch_params", torch_parameter_dict(model.variables))


def torch_named_parameters(model, named_parameters, *args, **kwargs):
    """`named_parameters(*args, **kwargs)` (the `torch.nn.Module` method
    of `model`) with every variable tracked afresh
    (`track_torch_parameters`), so variables built or loaded after
    construction are parameters too. Not while dynamo traces (`zero_grad()`
    in a compiled train step): collecting `model.variables` there broke
    the graph ("sort with non-constant keys") and made each step guard on
    the previous step's tensors; the eager first call tracked them."""
    import torch

    if not torch.compiler.is_compiling():
        track_torch_parameters(model)
    return named_parameters(*args, **kwargs)


def torch_compiles(model):
    """Whether `model`'s steps run under `torch.compile`."""
    return backend() == "torch" and model._should_torch_compile()


def clear_compiled_losses(model):
    """After `compute_loss` of a step under `torch.compile`: layers'
    `add_loss` tensors (the MoE auxiliary losses) stay in their lists until
    the next call clears them, and dynamo guards on those lists: every step
    saw the previous step's tensor and compiled again. They are summed into
    the loss already, and cleared here."""
    if torch_compiles(model):
        model._clear_losses()


def zoo_step_function(model, kind, force, make, train=False):
    """A zoo task's step function `kind` (`"train"`, `"test"`,
    `"predict"`): Keras' own (`make`, the `keras.Model` method) under
    TensorFlow, which needs no workaround; under JAX and PyTorch Keras'
    step run inside `zoo_workarounds()`, and under `compile(jit_compile=
    True)` with PyTorch compiled once per step and shape.

    With `zoo_workarounds()` around the steps and the zoo models' `call`
    (no graph break in attention or random ops; see
    `ensemble_zoo.utils.workarounds`), what is left is Python-side state
    that Keras and its optimizers set on the first call or the first
    update, or keep from one step to the next, and that dynamo guards on:
    each step function was traced on the first batch, again on the second,
    and (with auxiliary losses) on every step until dynamo's limit of 8.
    This sets that state first and clears what a step leaves behind: see
    `_prepare_torch_compiled_training`, `_after_one_eager_call` and
    `clear_compiled_losses`. A step still compiles again for a new batch
    shape (an odd last batch), as `torch.compile` does for any function.
    """
    if not workarounds_for():
        return make(force=force)
    attribute = f"{kind}_function"
    if getattr(model, attribute) is not None and not force:
        return getattr(model, attribute)
    make(force=force)
    step = getattr(model, attribute)
    if torch_compiles(model):
        if train:
            _prepare_torch_compiled_training(model)
        step = with_tracing_depth(_after_one_eager_call(model, step))
    setattr(model, attribute, _in_zoo_workarounds(step))
    return getattr(model, attribute)


def concrete_value(x):
    """`x` as a NumPy array when its values exist now, else `None`.

    NumPy arrays, Python lists and eager tensors have values; a
    `KerasTensor`, a JAX tracer, a TensorFlow graph tensor and a tensor
    seen by `torch.compile` do not (value checks are skipped there, like
    Keras' own ops, which let NaN through a compiled graph).
    """
    import numpy as np

    if isinstance(x, (np.ndarray, np.generic, list, tuple, int, float)):
        return np.asarray(x)
    if isinstance(x, keras.KerasTensor):
        return None
    module = type(x).__module__
    if module.startswith("jax"):
        import jax

        return None if isinstance(x, jax.core.Tracer) else np.asarray(x)
    if module.startswith("tensorflow"):
        import tensorflow as tf

        if tf.is_symbolic_tensor(x) or not tf.executing_eagerly():
            return None
        return x.numpy()
    if module.startswith("torch"):
        import torch

        if torch.compiler.is_compiling() or x.device.type == "meta":
            return None
        x = x.detach().cpu()
        if x.dtype == torch.bfloat16:  # NumPy has no bfloat16
            x = x.float()
        return x.numpy()
    return None


def is_tracing(x):
    """Whether `x` is being traced into a compiled program (a JAX tracer, a
    TensorFlow graph tensor, a tensor under `torch.compile`) rather than
    an eager value."""
    if isinstance(x, keras.KerasTensor):
        return True
    module = type(x).__module__
    if module.startswith("jax"):
        import jax

        return isinstance(x, jax.core.Tracer)
    if module.startswith("tensorflow"):
        import tensorflow as tf

        return tf.is_symbolic_tensor(x) or not tf.executing_eagerly()
    if module.startswith("torch"):
        import torch

        return torch.compiler.is_compiling()
    return False

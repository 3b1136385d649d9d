"""Workarounds for dependency bugs, scoped to the zoo's own models.

Importing `ensemble_zoo` changes nothing in Keras, keras-hub or a backend.
Where a dependency has a bug that the zoo's models hit, the fix is a
replacement of one Keras function that is installed only while a zoo model
computes: `zoo_workarounds()` is a context manager entered around the
models' forward computation (`ZooWorkaroundsMixin.call`,
`EnsembleClassifier.call`, and the step functions of
`ensemble_zoo.utils.backend.zoo_step_function`). Keras runs `call` when it
traces a step
function (`jax.jit`, `tf.function`, `torch.compile`) and on every eager
call, so the replacement is in place wherever the bug would be hit, and
other models in the same process (a plain keras-hub model, a user's own)
run Keras' unchanged code before, during and after.

The workarounds, each with the upstream fix that removes it (checked with
keras 3.15.1, keras-hub 0.32.0, jax 0.10.2, torch 2.13.0; the tests in
`tests/utils/test_backend_workarounds.py` fail once a dependency no longer
has the bug, which is the signal to delete the workaround):

- `jax_float16_attention_on_cpu` (JAX, CPU only): XLA:CPU cannot compile
  the float16 x float16 -> float32 dot (`The precision 'F16_F16_F32' is not
  supported by dot_general on CPU`) that `jax.nn.dot_product_attention`,
  and so Keras' `ops.dot_product_attention`, emits for float16 inputs; under
  `jit` every keras-hub attention fails with `mixed_float16` on a CPU. The
  replacement computes float16 attention in float32 on CPU (the scores and
  the softmax were float32 already) and casts the output back. Upstream:
  keras-team/keras-hub#2338 (open pull request: "the new version of JAX
  doesn't support float16 x float16 -> float32 in
  nn.dot_product_attention"; reverted once as #2344), whose fix
  keras-team/keras-hub#2354 covers only Stable Diffusion 3; no Keras issue,
  and no fix in Keras' `dot_product_attention` as of 3.15.1. Remove it
  once Keras' JAX backend (or XLA:CPU) runs float16 attention on CPU.
- `jax_cudnn_attention_per_shape` (JAX, GPU only): Keras'
  `dot_product_attention` asks `_can_use_flash_attention` whether cuDNN's
  fused attention may run, which checks the device and the layout only;
  for shapes cuDNN then refuses (ViT's 197 tokens on an H200, JAX 0.11)
  Keras calls it anyway, catches the refusal and logs an `ERROR` with a
  traceback on every call before falling back to XLA's attention (48 of
  them in one `run_all.py --only hydra` run). The replacement also traces
  cuDNN's attention once per shape with `jax.eval_shape` (no compilation)
  and answers "no" where that raises, so XLA's attention is picked without
  a log line, and cuDNN's is kept wherever it runs. No upstream issue yet
  (Keras 3.15.1); remove it once Keras checks the shape before trying.
- `torch_flash_attention_check_under_compile` (PyTorch): Keras'
  `dot_product_attention` (every keras-hub attention) asks whether to
  force flash attention by building a `torch.backends.cuda.SDPAParams`
  pybind object, which dynamo cannot trace: a graph break at every
  attention, inside Keras' `name_scope`, after which dynamo gave up on the
  enclosing frames (the model ran layer by layer, recompiling). While
  dynamo traces, the replacement answers "do not force flash attention";
  `scaled_dot_product_attention` still picks the flash or memory-efficient
  kernel by itself. Upstream: keras-team/keras#23327 (merged after 3.15.1,
  the same early return in Keras); remove it with the first Keras release
  that contains it.
- `torch_seeded_random_under_compile` (PyTorch): Keras draws seeded random
  numbers (dropout, `keras.random.*` with a `SeedGenerator`, the V-MoE
  router noise) from a `torch.Generator` made by `torch_seed_generator`,
  which Keras marks `torch._dynamo.disable` because dynamo cannot trace
  generators: a graph break at every seeded random op. While dynamo
  traces, the replacement returns `None`, so the op draws from torch's
  global generator, which compiled graphs support and
  `keras.utils.set_random_seed` seeds (a compiled step's noise is
  reproducible, but not the same numbers as the eager step's). Upstream:
  pytorch/pytorch#88576 ("Dynamo handling for all methods of
  torch.Generator", open, cited in Keras' source); no Keras issue.
- `torch_numpy_scalars_under_compile` (PyTorch): keras-hub's Gemma
  attention scales queries by `ops.cast(1 / np.sqrt(head_dim), dtype)`;
  Keras' torch `convert_to_tensor` reads the NumPy value's `dtype`, and
  dynamo, which traces NumPy values as arrays, cannot trace `ndarray.dtype`:
  the causal-LM decode step failed to compile. While dynamo traces, the
  replacement converts NumPy values with `torch.as_tensor` first. No
  upstream issue yet (Keras 3.15.1, keras-hub 0.32.0, torch 2.13); remove
  it once Keras' `convert_to_tensor` handles traced NumPy values or
  keras-hub computes the scale in Python.
- `torch_tensor_slice_start_under_compile` (PyTorch): Gemma 3's attention
  reads its cache with `ops.slice` at the decode step's index; given a
  tensor start, Keras' torch `slice` calls `torch.narrow`, whose
  data-dependent bounds dynamo cannot trace ("pending unbacked symbols").
  While dynamo traces, the replacement gathers the same elements with
  `torch.index_select` at `start + arange(size)` (static sizes). No
  upstream issue yet (Keras 3.15.1, torch 2.13).
- `torch_cpu_einsum_contractions` (PyTorch, CPU only): inductor (torch
  2.13) compiles a contraction written as `torch.einsum`, such as
  `EinsumDense`'s `"btd,df->btf"` in keras-hub's decoders, into its own
  C++ reduction kernel instead of calling the BLAS matrix product: at one
  token per step (Gemma-2B's MLP shapes) the compiled step ran 3x slower
  than the eager one. While dynamo traces on a CPU, the replacement
  writes a two-operand pure contraction as `torch.tensordot` and a
  permutation, which inductor hands to the BLAS kernel; other equations
  keep `torch.einsum`. No upstream issue yet; remove that part once
  inductor lowers such einsums to `mm` on CPU. Eagerly, on a CPU where
  MKL is slow (not Intel's), the same contractions of float32 activations
  and a weight that need no gradient run through oneDNN's linear
  (`ensemble_zoo.utils.onednn_products`: 2x faster from two rows up).
- `torch_cpu_matmul_through_onednn` (PyTorch, CPU only, eager): the same
  for `ops.matmul` by a 2-D weight (Keras' `Dense`, keras-hub's tied
  output embedding). MKL's SGEMM has no fast kernel for AMD processors
  (pytorch/builder#504); remove both eager parts once PyTorch's CPU
  matrix product is as fast there as oneDNN's.

Eager calls keep Keras' code paths under every backend but one: the JAX
replacement changes only float16 attention on a CPU, the PyTorch ones only
what dynamo traces, except the eager oneDNN products on a non-Intel CPU,
which change float32 round-off only.

A workaround whose function the installed Keras no longer has (a Keras
that moved or fixed it) is skipped; its test then fails and says so.

The replacements are process-wide while installed (Python looks a module's
functions up at call time): a model computing in another thread at the
same moment as a zoo model sees them too. They are installed by the first
`zoo_workarounds()` entered and removed when the last one is left.
"""

import importlib
import threading

import keras

from ensemble_zoo.utils.workaround_replacements import cpu_einsum_contractions
from ensemble_zoo.utils.workaround_replacements import cudnn_attention_only_where_it_traces
from ensemble_zoo.utils.workaround_replacements import float32_attention_for_float16_on_cpu
from ensemble_zoo.utils.workaround_replacements import gathered_slices_while_compiling
from ensemble_zoo.utils.workaround_replacements import global_generator_while_compiling
from ensemble_zoo.utils.workaround_replacements import no_forced_flash_attention_while_compiling
from ensemble_zoo.utils.workaround_replacements import (
    numpy_scalars_as_python_numbers_while_compiling,
)
from ensemble_zoo.utils.workaround_replacements import onednn_matmul_on_cpu


class Workaround:
    """One Keras function replaced while a zoo model computes.

    Args:
        name: str. A short name, as `installed_workarounds()` lists it.
        backend: str. The Keras backend the bug is in (`"jax"`, `"torch"`).
        module: str. The dotted name of the module holding the function.
        attribute: str. The function's name in that module.
        make_replacement: callable taking the original function and
            returning its replacement.
        upstream: str. The upstream issue or release that removes it.
    """

    def __init__(self, name, backend, module, attribute, make_replacement, upstream):
        self.name = name
        self.backend = backend
        self.module = module
        self.attribute = attribute
        self.make_replacement = make_replacement
        self.upstream = upstream
        self._target = None  # (module object, original, replacement)

    def _resolve(self):
        """(module, original, replacement), or `None` where the function no
        longer exists (a Keras that moved or fixed it)."""
        if self._target is None:
            try:
                module = importlib.import_module(self.module)
            except ImportError:
                return None
            original = getattr(module, self.attribute, None)
            if original is None:
                return None
            self._target = (module, original, self.make_replacement(original))
        return self._target

    def install(self):
        """Puts the replacement in place; returns whether it did."""
        target = self._resolve()
        if target is None:
            return False
        module, original, replacement = target
        if getattr(module, self.attribute) is not original:
            # Someone else replaced the function since we resolved it
            # (a test's monkeypatch, another library): leave theirs alone.
            return False
        setattr(module, self.attribute, replacement)
        return True

    def uninstall(self):
        """Puts Keras' function back (if ours is still the one in place)."""
        if self._target is None:
            return
        module, original, replacement = self._target
        if getattr(module, self.attribute) is replacement:
            setattr(module, self.attribute, original)

    def original(self):
        """Keras' function, or `None` where it does not exist."""
        target = self._resolve()
        return None if target is None else target[1]

    def replacement(self):
        """The zoo's replacement, or `None` where Keras has no such function."""
        target = self._resolve()
        return None if target is None else target[2]

    def __repr__(self):
        return f"Workaround({self.name!r}, {self.module}.{self.attribute})"


# See the module docstring for each one's reason and upstream fix.
WORKAROUNDS = (
    Workaround(
        "jax_float16_attention_on_cpu",
        "jax",
        "keras.src.backend.jax.nn",
        "dot_product_attention",
        float32_attention_for_float16_on_cpu,
        "keras-team/keras-hub#2338 (open); no fix in Keras 3.15.1",
    ),
    Workaround(
        "jax_cudnn_attention_per_shape",
        "jax",
        "keras.src.backend.jax.nn",
        "_can_use_flash_attention",
        cudnn_attention_only_where_it_traces,
        "no upstream issue yet (keras 3.15.1, jax 0.10-0.11)",
    ),
    Workaround(
        "torch_flash_attention_check_under_compile",
        "torch",
        "keras.src.backend.torch.nn",
        "_can_use_flash_attention",
        no_forced_flash_attention_while_compiling,
        "keras-team/keras#23327 (merged after Keras 3.15.1)",
    ),
    Workaround(
        "torch_seeded_random_under_compile",
        "torch",
        "keras.src.backend.torch.random",
        "torch_seed_generator",
        global_generator_while_compiling,
        "pytorch/pytorch#88576 (open); no Keras issue",
    ),
    Workaround(
        "torch_numpy_scalars_under_compile",
        "torch",
        "keras.src.backend.torch.core",
        "convert_to_tensor",
        numpy_scalars_as_python_numbers_while_compiling,
        "no upstream issue yet (keras 3.15.1, torch 2.13)",
    ),
    Workaround(
        "torch_tensor_slice_start_under_compile",
        "torch",
        "keras.src.backend.torch.core",
        "slice",
        gathered_slices_while_compiling,
        "no upstream issue yet (keras 3.15.1, torch 2.13)",
    ),
    Workaround(
        "torch_cpu_einsum_contractions",
        "torch",
        "keras.src.backend.torch.numpy",
        "einsum",
        cpu_einsum_contractions,
        "no upstream issue yet (torch 2.13 inductor, CPU); pytorch/builder#504 (MKL on AMD)",
    ),
    Workaround(
        "torch_cpu_matmul_through_onednn",
        "torch",
        "keras.src.backend.torch.numpy",
        "matmul",
        onednn_matmul_on_cpu,
        "pytorch/builder#504 (MKL's SGEMM on AMD CPUs; open as of torch 2.13)",
    ),
)


def workarounds_for(backend=None):
    """The workarounds that apply under a Keras backend.

    Args:
        backend: str or `None`. A Keras backend name; `None` means the
            active one.

    Returns:
        A tuple of `Workaround`s (empty under TensorFlow).
    """
    backend = backend or keras.config.backend()
    return tuple(w for w in WORKAROUNDS if w.backend == backend)


# Look the functions up now (reading them changes nothing), so that
# entering the scope under `torch.compile` has no import for dynamo to trace.
for _workaround in workarounds_for():
    _workaround._resolve()


class _State:
    depth = 0
    installed = ()


_lock = threading.Lock()


if keras.config.backend() == "torch":
    import torch

    _tracing_with_dynamo = torch.compiler.is_compiling
else:

    def _tracing_with_dynamo():
        return False


def _enter():
    _State.depth += 1
    if _State.depth == 1:
        _State.installed = tuple(w for w in workarounds_for() if w.install())


def _exit():
    _State.depth -= 1
    if _State.depth == 0:
        for workaround in _State.installed:
            workaround.uninstall()
        _State.installed = ()


class zoo_workarounds:
    """Context manager: the zoo's workarounds installed inside, none outside.

    Entered around a zoo model's forward computation (see
    `ZooWorkaroundsMixin`); see this module's docstring for the
    workarounds and the upstream fixes that remove them. Re-entrant (a zoo
    model inside a zoo model): the replacements are installed by the
    outermost entry and removed when it is left, also when the body raises.
    Under `torch.compile` dynamo traces it like the model code around it
    (no graph break).

    Example:

    ```python
    import keras
    from ensemble_zoo.utils.backend import installed_workarounds
    from ensemble_zoo.utils.backend import zoo_workarounds

    q = keras.ops.ones((1, 4, 2, 8), dtype="float16")
    with zoo_workarounds():
        # e.g. ('jax_float16_attention_on_cpu',) under JAX
        print(installed_workarounds())
        out = keras.ops.dot_product_attention(q, q, q)
    assert installed_workarounds() == ()  # Keras' own functions again
    ```
    """

    def __enter__(self):
        if _tracing_with_dynamo():
            # No lock while dynamo traces (it cannot trace one); the
            # compiled frame's side effects replay in one thread anyway.
            _enter()
        else:
            with _lock:
                _enter()
        return self

    def __exit__(self, *exc_info):
        if _tracing_with_dynamo():
            _exit()
        else:
            with _lock:
                _exit()
        return False


def installed_workarounds():
    """The names of the workarounds in place now (inside `zoo_workarounds()`).

    Returns:
        A tuple of names; empty outside every `zoo_workarounds()`.
    """
    return tuple(w.name for w in _State.installed)


class ZooWorkaroundsMixin:
    """Runs a model's `call` inside `zoo_workarounds()`.

    Put it before the Keras / keras-hub base class (`class
    MyTask(ZooWorkaroundsMixin, keras_hub.models.ImageClassifier)`); a
    subclass that overrides `call` itself wraps its body in
    `with zoo_workarounds():` instead (or calls `super().call`).

    Example:

    ```python
    import keras
    from ensemble_zoo.utils.backend import ZooWorkaroundsMixin
    from ensemble_zoo.utils.backend import installed_workarounds
    from ensemble_zoo.utils.workarounds import workarounds_for

    seen = []

    class Probe(keras.layers.Layer):
        def call(self, x):
            seen.append(installed_workarounds())
            return x

    class ScopedModel(ZooWorkaroundsMixin, keras.Model):
        pass

    inputs = keras.Input((3,))
    model = ScopedModel(inputs, Probe()(inputs))
    model(keras.ops.ones((1, 3)))
    # Inside the call: the backend's workarounds (none under TensorFlow).
    assert seen[-1] == tuple(w.name for w in workarounds_for())
    assert installed_workarounds() == ()
    ```
    """

    def call(self, *args, **kwargs):
        with zoo_workarounds():
            return super().call(*args, **kwargs)

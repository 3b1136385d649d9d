"""PyTorch steps compiled by inductor from a recording of their operations.

`torch.compile` traces a Keras model's Python with dynamo: on Gemma 3
270M (18 blocks, about 9,800 operations a decode step) the first decode
step compiled in about 219 s, and every process compiled it again (its
weights frozen into the graph, which inductor's on-disk cache does not
keep). `InductorStep` records the operations one call runs instead
(`make_fx` on fake tensors: no arithmetic, about 10 s for that step on
2 cores) and hands the graph to inductor (`compile_fx`), with the
weights as inputs of the graph rather than constants:

- the compiled program depends on the shapes only, so inductor's FX graph
  cache (on disk, `TORCHINDUCTOR_CACHE_DIR`) serves a second process,
  and another model of the same architecture: on Gemma 3 270M the first
  compile took 105 s and a second process's 5.7 s (torch 2.13, 2 cores,
  `benchmarks/llm_decoding.py`);
- a weight written in place (`Variable.assign`, an optimizer's step) or
  replaced reaches the next call without compiling again.

The graph runs inductor's C++ kernels with ATen's matrix products (MKL):
freezing the weights (which lets inductor pack them and pick its own GEMM
kernels) would tie the program to their values and keep it out of the
cache. A step that reads a tensor's value on the host (`.item()`,
`bool(tensor)`) cannot be recorded on fake tensors, and one that draws
random numbers is refused as `captured_steps.replayable` refuses it: such
a step, or one inductor cannot compile (no C++ compiler on the machine),
runs as `fallback` runs it, with one warning saying why. Checked with
torch 2.13 (CPU).
"""

import threading
import warnings

import keras

from ensemble_zoo.utils.captured_steps import _RECORDING
from ensemble_zoo.utils.captured_steps import input_signature
from ensemble_zoo.utils.captured_steps import replayable

#: Inductor's configuration for the zoo's compiled steps: weights are
#: graph inputs (never frozen), and autotuning's per-GEMM table stays off.
INDUCTOR_OPTIONS = {"freezing": False, "max_autotune": False}


class InductorStep:
    """A step of tensors recorded once per input signature and compiled by
    inductor, with the weights it reads as inputs (see the module
    docstring).

    Args:
        function: the step, a function of tensors (nested in tuples,
            lists and dicts, or hashable Python values) returning tensors,
            with no side effect but its outputs. It reads `variables`
            through Keras (`variable.value`).
        variables: the Keras variables the step reads.
        fallback: the callable that runs a step that cannot be compiled
            (e.g. `function` itself, or a `captured_steps.CapturedStep`
            of it).
        compiler: `(graph, example_inputs) -> callable`, the compiler of a
            recorded graph (`None`: inductor's `compile_fx`).

    Example:

    ```python
    import keras
    import torch
    from ensemble_zoo.utils.inductor_steps import InductorStep

    weight = keras.Variable(torch.randn(4, 4))
    step = InductorStep(
        lambda x: torch.relu(x @ weight.value), [weight], fallback=None,
        compiler=lambda graph, inputs: graph,
    )
    x = torch.randn(2, 4)
    assert torch.allclose(step(x), torch.relu(x @ weight.value))
    ```
    """

    def __init__(self, function, variables, fallback, compiler=None):
        if not callable(function):
            raise TypeError(f"`function` must be callable; got {function!r}.")
        if fallback is not None and not callable(fallback):
            raise TypeError(f"`fallback` must be callable or None; got {fallback!r}.")
        self.function = function
        self.variables = list(variables)
        self.fallback = fallback if fallback is not None else function
        self.compiler = compiler
        self._programs = {}  # signature -> (program, output structure) or None
        self._lock = threading.Lock()

    def __call__(self, *args):
        values = [v.value for v in self.variables]
        key = input_signature(args, values, by_identity=False)
        with self._lock:
            if key not in self._programs:
                self._programs[key] = self._compile(values, args)
            entry = self._programs[key]
        if entry is None:
            return self.fallback(*args)
        from torch.utils import _pytree

        program, structure = entry
        outputs = program(*values, *_tensors(_pytree.tree_leaves(args)))
        return _pytree.tree_unflatten(list(outputs), structure)

    def programs(self):
        """`(compiled, refused)`: the signatures with a compiled program,
        and those that run `fallback`."""
        refused = sum(entry is None for entry in self._programs.values())
        return len(self._programs) - refused, refused

    def _compile(self, values, args):
        """The compiled program of one signature and its output structure,
        or `None` (with a warning) where it cannot be compiled."""
        try:
            graph, structure = self._record(values, args)
        except Exception as error:  # noqa: BLE001 - what cannot be recorded runs eagerly
            return _refuse(f"it could not be recorded ({type(error).__name__}: {error})")
        if not replayable(graph):
            return _refuse("it reads a value on the host or draws random numbers")
        from torch.utils import _pytree

        inputs = list(values) + _tensors(_pytree.tree_leaves(args))
        try:
            program = _compile_graph(graph, inputs, self.compiler)
        except Exception as error:  # noqa: BLE001 - no compiler, or inductor failed
            return _refuse(f"inductor could not compile it ({type(error).__name__}: {error})")
        return program, structure

    def _record(self, values, args):
        """The graph of `function` over flat inputs (the weights' values,
        then the arguments' tensors; its Python values are constants of
        the graph, and part of its signature) returning flat outputs,
        recorded on fake tensors, and the outputs' structure."""
        from torch.fx.experimental.proxy_tensor import make_fx
        from torch.utils import _pytree

        leaves, spec = _pytree.tree_flatten(args)
        tensors = _tensors(leaves)
        count = len(values)
        structure = []

        def flat(*inputs):
            given = iter(inputs[count:])
            rebuilt = [next(given) if _is_tensor(x) else x for x in leaves]
            with keras.StatelessScope(state_mapping=zip(self.variables, inputs[:count])):
                outputs = self.function(*_pytree.tree_unflatten(rebuilt, spec))
            outputs, out_spec = _pytree.tree_flatten(outputs)
            structure.append(out_spec)
            return tuple(outputs)

        with _RECORDING:
            graph = make_fx(flat, tracing_mode="fake", _allow_non_fake_inputs=True)(
                *values, *tensors
            )
        graph.graph.eliminate_dead_code()
        graph.recompile()
        return graph, structure[-1]


def _is_tensor(x):
    import torch

    return isinstance(x, torch.Tensor)


def _tensors(leaves):
    return [x for x in leaves if _is_tensor(x)]


def _compile_graph(graph, inputs, compiler):
    """`compiler(graph, inputs)`, by default inductor's `compile_fx` under
    `INDUCTOR_OPTIONS`, inside a tracing context whose fake tensors carry
    a shape environment (without one inductor bypasses its FX graph
    cache, torch 2.13)."""
    if compiler is not None:
        return compiler(graph, inputs)
    import torch._inductor.config
    from torch._guards import TracingContext
    from torch._guards import tracing
    from torch._inductor.compile_fx import compile_fx
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    context = TracingContext(FakeTensorMode(shape_env=ShapeEnv()))
    with torch._inductor.config.patch(INDUCTOR_OPTIONS), tracing(context):
        return compile_fx(graph, inputs)


def _refuse(why):
    warnings.warn(
        f"ensemble_zoo: the step is not compiled and runs eagerly: {why}.",
        RuntimeWarning,
        stacklevel=4,
    )
    return None

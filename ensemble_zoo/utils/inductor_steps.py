"""PyTorch steps compiled by inductor from a recording of their operations.

`torch.compile` traces a Keras model's Python with dynamo: on Gemma 3
270M (18 blocks, about 9,800 operations a decode step) the first decode
step compiled in about 219 s, every new sequence length compiled again,
and every process did (its weights frozen into the graph, which
inductor's on-disk cache does not keep). `InductorStep` records the
operations one call runs instead (`make_fx` on fake tensors: no
arithmetic, about 10 s for that step on 2 cores) and hands the graph to
inductor (`compile_fx`), with the weights as inputs of the program:

- the program depends on the shapes only, so AOT autograd's and
  inductor's FX graph caches (on disk, `TORCHINDUCTOR_CACHE_DIR`) serve a
  second process, and another model of the same architecture, which then
  records again but compiles nothing;
- a weight written in place (`Variable.assign`, an optimizer's step) or
  replaced by one of its shape reaches the next call without compiling
  again;
- sizes the caller names (`dynamic`: a sequence length) are symbols of
  the program, as are the strides and offsets of strided views that they
  imply; the symbols are integer inputs of the program, which then
  serves every call whose arguments keep the guards the recording and
  inductor placed on them (kept by the caches with the program).

The program runs inductor's C++ kernels with ATen's matrix products
(MKL): freezing the weights (which lets inductor pack them and pick its
own GEMM kernels) would tie the program to their values and keep it out
of the cache. A step that reads a tensor's value on the host (`.item()`,
`bool(tensor)`) cannot be recorded on fake tensors, and one that draws
random numbers is refused as `captured_steps.replayable` refuses it:
such a step, or one inductor cannot compile (no C++ compiler on the
machine), runs `fallback`, with one warning saying why; programs already
compiled for other lengths keep serving theirs. A process records and
compiles one program at a time, under the lock `captured_steps` records
under (`make_fx` keeps its tracer in a module global, and inductor's
configuration is process-wide), while other threads calling the step
run `fallback`; programs are kept in the step, never in module state.
Checked with torch 2.13 (CPU).
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
            lists and dicts, or hashable Python values, which become
            constants of the program) returning tensors, with no side
            effect but its outputs. It reads `variables` through Keras
            (`variable.value`).
        variables: the Keras variables the step reads.
        fallback: the callable that runs a step that cannot be compiled
            (`None`: `function` itself).
        compiler: `(graph, example_inputs) -> callable`, the compiler of a
            recorded graph (`None`: inductor's `compile_fx`). The example
            inputs are the weights' fake values, the arguments' fake
            tensors, then SymInts (the symbols of their sizes, strides and
            offsets); the callable gets plain ints in their place.
        dynamic: `None`, or a function of the step's arguments returning
            the sizes that a program takes as symbols (a sequence length):
            every dimension of the arguments of such a size is recorded as
            a symbol, and the program serves every later call whose
            arguments keep the recording's guards (checked at each call).

    Example:

    ```python
    import keras
    import torch
    from ensemble_zoo.utils.inductor_steps import InductorStep

    weight = keras.Variable(torch.randn(4, 4))
    step = InductorStep(
        lambda x: torch.relu(x @ weight.value), [weight], fallback=None,
        compiler=lambda graph, inputs: graph, dynamic=lambda x: [x.shape[0]],
    )
    with torch.no_grad():
        for rows in (2, 3):
            x = torch.randn(rows, 4)
            assert torch.allclose(step(x), torch.relu(x @ weight.value))
    assert step.programs() == (1, 0)
    ```
    """

    def __init__(self, function, variables, fallback, compiler=None, dynamic=None):
        if not callable(function):
            raise TypeError(f"`function` must be callable; got {function!r}.")
        for name, value in (("fallback", fallback), ("compiler", compiler), ("dynamic", dynamic)):
            if value is not None and not callable(value):
                raise TypeError(f"`{name}` must be callable or None; got {value!r}.")
        variables = list(variables)
        for variable in variables:
            if not isinstance(variable, keras.Variable):
                raise TypeError(
                    f"`variables` must be Keras variables; got {type(variable).__name__}."
                )
        self.function = function
        self.variables = variables
        self.fallback = fallback if fallback is not None else function
        self.compiler = compiler
        self.dynamic = dynamic
        self._programs = {}  # signature -> the programs recorded for it
        self._refused = set()  # signatures whose last recording was refused
        self._compiling = set()  # signatures a thread is compiling
        self._lock = threading.Lock()

    def __call__(self, *args):
        from torch.utils import _pytree

        values = [v.value for v in self.variables]
        tensors = _tensors(_pytree.tree_leaves(args))
        sizes = self._dynamic_sizes(args)
        key = (
            input_signature(args, values, by_identity=False, dynamic_sizes=sizes),
            _aliasing(values + tensors),
        )
        with self._lock:
            programs = self._programs.get(key, [])
            program = next((p for p in programs if p.accepts(tensors)), None)
            compiles = program is None and key not in self._refused | self._compiling
            if compiles:
                self._compiling.add(key)
        if compiles:
            # Other threads run `fallback` meanwhile.
            refused = False  # an interrupt neither refuses nor keeps
            try:
                program = self._compile(values, args, sizes)
                refused = program is None
            finally:
                with self._lock:
                    self._compiling.discard(key)
                    if refused:
                        self._refused.add(key)  # the programs kept still serve
                    elif program is not None:
                        self._programs[key] = self._programs.get(key, []) + [program]
        if program is None:
            return self.fallback(*args)
        return program(values, tensors)

    def _dynamic_sizes(self, args):
        if self.dynamic is None:
            return ()
        sizes = set()
        for size in self.dynamic(*args):
            if isinstance(size, bool) or not isinstance(size, int):
                raise TypeError(f"`dynamic` must return ints; got {size!r}.")
            sizes.add(size)
        return tuple(sorted(sizes))

    def programs(self):
        """`(compiled, refused)`: the programs compiled, and the signatures
        whose calls no program accepts run `fallback`."""
        with self._lock:
            return sum(len(p) for p in self._programs.values()), len(self._refused)

    def _compile(self, values, args, sizes):
        """The program of one signature, or `None` (with a warning) where it
        cannot be compiled."""
        try:
            graph, structure, inputs, symbols, mode = self._record(values, args, sizes)
        except Exception as error:  # noqa: BLE001 - what cannot be recorded runs eagerly
            return _refuse(f"it could not be recorded ({type(error).__name__}: {error})")
        if not replayable(graph):
            return _refuse("it reads a value on the host or draws random numbers")
        try:
            compiled = _compile_graph(graph, inputs, mode, self.compiler)
        except Exception as error:  # noqa: BLE001 - no compiler, or inductor failed
            return _refuse(f"inductor could not compile it ({type(error).__name__}: {error})")
        guards = None
        if sizes:
            arguments = inputs[len(values) : len(inputs) - len(symbols)]  # the tensors
            guards = mode.shape_env.produce_guards_expression(arguments, ignore_static=False)
        return _Program(compiled, structure, guards, symbols)

    def _record(self, values, args, sizes):
        """The graph of `function` over flat inputs (the weights' values,
        the arguments' tensors, then the symbols of their layouts) returning
        flat outputs, recorded on fake tensors (the dimensions of `sizes` as
        symbols); its outputs' structure, its fake inputs, the places of the
        symbols (`_layout_symbols`), and their fake-tensor mode."""
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.proxy_tensor import make_fx
        from torch.fx.experimental.symbolic_shapes import DimDynamic
        from torch.fx.experimental.symbolic_shapes import ShapeEnv
        from torch.fx.experimental.symbolic_shapes import StatelessSymbolicContext
        from torch.utils import _pytree

        mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)

        def fake(x, dynamic=()):
            dims = [DimDynamic.DYNAMIC if n in dynamic else DimDynamic.STATIC for n in x.shape]
            context = StatelessSymbolicContext(dynamic_sizes=dims)
            return mode.from_tensor(x, symbolic_context=context)

        leaves, spec = _pytree.tree_flatten(args)
        tensors = [fake(x, sizes) for x in _tensors(leaves)]
        symbols = _layout_symbols(tensors)
        inputs = [fake(v) for v in values] + tensors + [_integer(tensors, p) for p in symbols]
        count = len(values)
        structure = []

        def flat(*given):
            arguments = iter(given[count : count + len(tensors)])
            rebuilt = [next(arguments) if _is_tensor(x) else x for x in leaves]
            with keras.StatelessScope(state_mapping=zip(self.variables, given[:count])):
                outputs = self.function(*_pytree.tree_unflatten(rebuilt, spec))
            outputs, out_spec = _pytree.tree_flatten(outputs)
            structure.append(out_spec)
            return tuple(outputs)

        with _RECORDING:
            graph = make_fx(flat, tracing_mode="symbolic", _allow_non_fake_inputs=True)(*inputs)
        graph.graph.eliminate_dead_code()
        graph.recompile()
        # The shape environment travels in the tracing context (`mode`); kept
        # on the graph, it makes AOT autograd's cache key unpicklable and
        # bypasses its on-disk cache (torch 2.13).
        graph.shape_env = None
        return graph, structure[-1], inputs, symbols, mode


class _Program:
    """A compiled program, its outputs' structure, the places of its
    integer inputs (`_layout_symbols`), and the guards its arguments must
    keep, compiled once as Python (`None`: static shapes, which the
    signature checks)."""

    def __init__(self, compiled, structure, guards, symbols):
        self.compiled, self.structure, self.symbols = compiled, structure, symbols
        self.guards = None if not guards else compile(guards, "<guards>", "eval")

    def accepts(self, tensors):
        if self.guards is None:
            return True
        from torch.fx.experimental.symbolic_shapes import SYMPY_INTERP

        # As `ShapeEnv.evaluate_guards_expression` evaluates them (torch 2.13).
        names = {f"t{i}": x for i, x in enumerate(tensors)}
        return bool(eval(self.guards, SYMPY_INTERP, {"L": names}))  # noqa: S307

    def __call__(self, values, tensors):
        from torch.utils import _pytree

        integers = [_integer(tensors, place) for place in self.symbols]
        outputs = self.compiled(*values, *tensors, *integers)
        return _pytree.tree_unflatten(list(outputs), self.structure)


def _is_tensor(x):
    import torch

    return isinstance(x, torch.Tensor)


def _tensors(leaves):
    return [x for x in leaves if _is_tensor(x)]


def _layout_symbols(tensors):
    """`(tensor, kind, dimension)`: the first place of each symbol among the
    fake tensors' sizes, strides (a strided view's) and storage offsets.
    The program takes these integers as inputs, as dynamo's graphs do: AOT
    autograd's and inductor's caches keep the guards that compiling placed
    on a program's integer inputs only, and add them to the shape
    environment when they serve it (torch 2.13); without such inputs a
    program served from the cache would drop them (a bound on the length,
    say)."""
    import torch

    seen, places = set(), []
    for i, x in enumerate(tensors):
        for kind, values in (
            ("size", x.shape),
            ("stride", x.stride()),
            ("offset", [x.storage_offset()]),
        ):
            for d, value in enumerate(values):
                if isinstance(value, torch.SymInt) and value.node.expr.is_symbol:
                    if value.node.expr not in seen:
                        seen.add(value.node.expr)
                        places.append((i, kind, d))
    return places


def _integer(tensors, place):
    """The integer at `place` (`_layout_symbols`) of the tensors."""
    i, kind, d = place
    x = tensors[i]
    return x.shape[d] if kind == "size" else x.stride(d) if kind == "stride" else x.storage_offset()


def _aliasing(tensors):
    """Which of the tensors are one tensor: a recording makes them one
    input of its program, which must not serve distinct tensors."""
    first = {}
    return tuple(first.setdefault(id(x), i) for i, x in enumerate(tensors))


def _compile_graph(graph, inputs, mode, compiler):
    """`compiler(graph, inputs)`, by default inductor's `compile_fx` under
    `INDUCTOR_OPTIONS`, inside a tracing context of the recording's
    fake-tensor mode, whose shape environment inductor's FX graph cache
    needs (without one it bypasses the cache, torch 2.13)."""
    if compiler is not None:
        return compiler(graph, inputs)
    import torch._inductor.config
    from torch._guards import TracingContext
    from torch._guards import tracing
    from torch._inductor.compile_fx import compile_fx

    # Inductor's configuration is process-wide, and AOT autograd traces with
    # `make_fx`'s module globals: one compilation or recording at a time.
    with _RECORDING, torch._inductor.config.patch(INDUCTOR_OPTIONS):
        with tracing(TracingContext(mode)):
            return compile_fx(graph, inputs)


def _refuse(why):
    warnings.warn(
        f"ensemble_zoo: the step is not compiled and runs eagerly: {why}.",
        RuntimeWarning,
        stacklevel=4,
    )
    return None

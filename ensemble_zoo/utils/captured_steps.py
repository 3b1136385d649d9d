"""Eager PyTorch steps replayed as recorded graphs of operations.

Eager PyTorch runs a Keras model's Python at every call: Keras' checks and
conversions around each operation, the layers' calls, the model's own
code. A step that runs many times on tensors of one shape, as the decode
loop's does, spends much of its time there on a CPU: 4 LoRA-Ensemble
members of Gemma 3 270M (18 blocks, about 9,000 operations a step)
decoded in 684 ms per token eagerly and 415 ms replayed (2 cores,
`benchmarks/results/llm_decoding_cpu_torch_replayed.txt`).

`CapturedStep` runs a step eagerly for its first `CAPTURE_AFTER` calls
of one input signature (the arguments' structure, shapes, strides, dtypes
and devices, Python values, gradients and autocast on or off, the
identity of the weights' tensors), then records the PyTorch operations
one such call runs (`torch.fx.experimental.proxy_tensor.make_fx` on real
tensors, torch 2.13) and replays that graph for every later call of the
signature: the same operations on the same kernels (oneDNN's eager
products included), so the results equal the eager step's bit for bit,
without Python between them. Short runs (a test's few tokens) never pay
the recording, which cost about 18 eager steps of Gemma 3 270M (12 s)
and 40 of a tiny model; long ones pay it once.

A step is replayed only where a replay computes what the eager call
would:

- the weights are read by reference, so an in-place update
  (`Variable.assign`, an optimizer's step) reaches the next replay, and a
  weight whose tensor was replaced changes the signature (the graphs of
  the old tensors are dropped);
- a recording that reads a tensor's value on the host through an
  operation (`.item()`, `bool(tensor)`), draws random numbers, or has an
  output whose shape depends on values is refused; and the first replay,
  on the next call's values, is checked against the eager step and
  refused unless equal (a host read that leaves no operation behind,
  `.tolist()` or `.numpy()`, freezes a value the next call changes). A
  refused signature runs eagerly from then on;
- a weight's value read on the host (`float(variable)`, `.item()` of a
  weight) leaves no operation and no check can see it: it stays frozen in
  the graph, and a later write of that weight does not reach the replay.
  A step must read its weights as tensors only (the decode step does);
- the recording's own run is the call's result, so a step runs once per
  call (twice where `make_fx` fails partway). A step with Python side
  effects (a callback, a seed it advances) must not be captured: its
  effects would run only while it is recorded (the decode loop records
  keras-hub's `GreedySampler` only).

Recording uses one fake-tensor mode for the whole graph (a
`torch._guards.TracingContext`): `make_fx` otherwise builds one per
operation to describe its output, half of a recording's time.
Replaying keeps no state outside its `CapturedStep`, and the tracing
modes are thread-local, so threads may decode at once while one records
(the same step runs eagerly meanwhile). `make_fx` keeps its tracer and an
"FX is tracing" flag in module globals (torch 2.13): a process records
one step at a time (`_RECORDING`; another step's recording waits), but
`torch.compile` tracing in another thread at the same moment shares
them.
"""

import threading

#: Eager calls of one input signature before it is recorded: a recording
#: costs about 18 eager steps of Gemma 3 270M and 40 of a tiny model, so
#: a generation of a few tokens stays eager and a long one pays it once.
CAPTURE_AFTER = 8

#: One recording at a time in a process: `make_fx` keeps its current
#: tracer in a module global (torch 2.13), read by higher-order operations.
_RECORDING = threading.Lock()

#: Operations whose presence in a recording refuses it: they read a
#: tensor's value on the host, which the graph would keep as a constant.
_HOST_READS = ("_local_scalar_dense", "item", "is_nonzero", "equal")


#: The states of a signature besides its graph (see `CapturedStep`).
_RECORDING_NOW, _REFUSED = "recording", None


class CapturedStep:
    """A step of PyTorch tensors, replayed as a captured graph once its
    input signature has run `capture_after` times (see the module
    docstring).

    Args:
        function: the step, a function of tensors (nested in tuples,
            lists and dicts, or hashable Python values) returning tensors,
            with no side effect but its outputs.
        weights: a callable returning the tensors the step reads that are
            not arguments (the model's variables' values): their identity
            is part of the signature. The step reads them as tensors (a
            value read on the host is frozen into the graph).
        capture_after: int, the eager calls of a signature before it is
            recorded (`CAPTURE_AFTER`); 0 records at the first call.

    Example:

    ```python
    import torch
    from ensemble_zoo.utils.captured_steps import CapturedStep

    weight = torch.randn(4, 4)
    step = CapturedStep(lambda x: torch.relu(x @ weight), lambda: [weight], capture_after=0)
    x = torch.randn(2, 4)
    assert torch.equal(step(x), torch.relu(x @ weight))
    ```
    """

    def __init__(self, function, weights, capture_after=CAPTURE_AFTER):
        if not callable(function) or not callable(weights):
            raise TypeError("`function` and `weights` must be callables.")
        if isinstance(capture_after, bool) or not isinstance(capture_after, int):
            raise TypeError(f"`capture_after` must be an int; got {capture_after!r}.")
        if capture_after < 0:
            raise ValueError(f"`capture_after` must be >= 0; got {capture_after}.")
        self.function = function
        self.weights = weights
        self.capture_after = capture_after
        # signature -> a graph, `_RECORDING_NOW` or `_REFUSED`
        self._graphs = {}
        self._eager_calls = {}  # signature -> eager calls so far
        self._unchecked = set()  # signatures whose graph has not replayed yet
        self._lock = threading.Lock()

    def __call__(self, *args):
        key = self._signature(args)
        graph = self._graphs.get(key, False)
        if graph is False:
            records = False
            with self._lock:
                graph = self._graphs.get(key, False)
                if graph is False:
                    calls = self._eager_calls.get(key, 0)
                    self._eager_calls[key] = calls + 1
                    if calls >= self.capture_after:
                        self._forget_other_weights(key)
                        self._graphs[key], records = _RECORDING_NOW, True
            if records:
                # The recording's run is this call's; other threads run
                # eagerly meanwhile.
                try:
                    graph, outputs = record(self.function, args)
                except BaseException:
                    with self._lock:
                        if self._graphs.get(key) is _RECORDING_NOW:
                            del self._graphs[key]
                    raise
                with self._lock:
                    if self._graphs.get(key) is _RECORDING_NOW:  # not dropped meanwhile
                        self._graphs[key] = graph
                        if graph is not _REFUSED:
                            self._unchecked.add(key)
                return outputs
        if graph is _REFUSED or graph is _RECORDING_NOW or graph is False:
            return self.function(*args)
        if key in self._unchecked:
            return self._first_replay(key, graph, args)
        return graph(*args)

    def _first_replay(self, key, graph, args):
        """The first replay, on other values than the recording's, checked
        against the eager step: equal, or the signature is refused (a host
        read that left no operation behind, `.tolist()` or `.numpy()`)."""
        from torch.utils import _pytree

        expected = self.function(*args)
        try:
            got = graph(*args)
        except Exception:  # noqa: BLE001 - a graph that cannot replay is refused
            equal = False
        else:
            equal = _pytree.tree_structure(got) == _pytree.tree_structure(expected) and all(
                _same(a, b)
                for a, b in zip(
                    _pytree.tree_leaves(got), _pytree.tree_leaves(expected), strict=True
                )
            )
        with self._lock:
            self._unchecked.discard(key)
            if not equal and key in self._graphs:
                self._graphs[key] = _REFUSED
        return expected

    def _forget_other_weights(self, key):
        """Drops the graphs and counts of replaced weights (they hold the
        old tensors)."""
        for table in (self._graphs, self._eager_calls):
            for old in [k for k in table if k[-1] != key[-1]]:
                del table[old]
                self._unchecked.discard(old)

    def graphs(self):
        """`(replayed, refused)`: the signatures with a graph, and those
        that run eagerly for good."""
        states = list(self._graphs.values())
        refused = sum(graph is _REFUSED for graph in states)
        recording = sum(graph is _RECORDING_NOW for graph in states)
        return len(states) - refused - recording, refused

    def _signature(self, args):
        return input_signature(args, self.weights(), by_identity=True)


def input_signature(args, weights, by_identity, dynamic_sizes=()):
    """What a recorded graph of a step is specific to: the arguments'
    structure, the shapes, strides, dtypes and devices of their tensors
    and whether they require gradients, their Python values and types,
    whether gradients and autocast are on, and the
    weights (their tensors' identity, or their description as the
    arguments').

    Args:
        args: the step's arguments, tensors nested in tuples, lists and
            dicts, or hashable Python values.
        weights: the tensors the step reads besides its arguments.
        by_identity: bool, whether the weights count by identity (a
            graph that holds them) or by description (a graph that takes
            them as inputs).
        dynamic_sizes: the sizes of the arguments' dimensions that a
            graph takes as symbols: such a dimension, and the strides of
            its tensor, are left out (the graph's guards check them).

    Returns:
        a hashable signature.
    """
    import torch
    from torch.utils import _pytree

    def describe(x, dynamic=()):
        shape = tuple(None if size in dynamic else size for size in x.shape)
        strides = None if None in shape else x.stride()
        return (shape, strides, x.dtype, x.device, x.requires_grad)

    leaves, spec = _pytree.tree_flatten(args)
    described = []
    for x in leaves:
        if isinstance(x, torch.Tensor):
            described.append(describe(x, dynamic_sizes))
            continue
        try:
            hash(x)
        except TypeError:
            raise TypeError(
                "A captured step takes tensors and hashable Python values; "
                f"got an argument of type {type(x).__name__}."
            ) from None
        described.append(("value", type(x), x))
    modes = (
        torch.is_grad_enabled(),
        torch.is_autocast_enabled("cpu"),
        torch.is_autocast_enabled("cuda"),
    )
    weights = tuple(id(w) if by_identity else describe(w) for w in weights)
    return str(spec), tuple(described), modes, weights


def _same(a, b):
    """Whether two outputs are equal, NaN where NaN."""
    import torch

    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return a == b
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return torch.equal(a, b)


def record(function, args):
    """Records the PyTorch operations of one call.

    Args:
        function: the step (see `CapturedStep`).
        args: a tuple, the call's arguments.

    Returns:
        `(graph, outputs)`: the graph of the operations `function(*args)`
        ran, a callable of the same arguments, or `None` where a replay
        could differ from an eager call (`replayable`) or `make_fx`
        failed; and the outputs of that call.
    """
    from torch.fx.experimental.proxy_tensor import make_fx

    ran = []

    def recorded(*inputs):
        ran.append(function(*inputs))
        return ran[-1]

    try:
        from torch._guards import TracingContext
        from torch._guards import tracing
        from torch._subclasses.fake_tensor import FakeTensorMode

        context = tracing(TracingContext(FakeTensorMode(allow_fallback_kernels=True)))
    except Exception:  # noqa: BLE001 - a torch without them: slower, same graph
        import contextlib

        context = contextlib.nullcontext()
    try:
        with _RECORDING, context:
            graph = make_fx(recorded, tracing_mode="real")(*args)
    except Exception:  # noqa: BLE001 - what make_fx cannot record runs eagerly
        return None, ran[-1] if ran else function(*args)
    # An operation that raised while recording (the zoo's oneDNN products
    # try a view before a copy) left a node nothing reads.
    graph.graph.eliminate_dead_code()
    graph.recompile()
    return (graph if replayable(graph) else None), ran[-1]


def replayable(graph):
    """Whether a recorded graph may replay: it holds no operation that
    reads a tensor's value on the host, draws random numbers, or has an
    output shape that depends on values.

    Args:
        graph: a `torch.fx.GraphModule` from `make_fx`.

    Returns:
        bool.
    """
    import torch

    refused = (
        torch.Tag.nondeterministic_seeded,
        torch.Tag.dynamic_output_shape,
        torch.Tag.data_dependent_output,
    )
    for node in graph.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if node.target._schema.name.split("::")[-1] in _HOST_READS:
            return False
        if any(tag in node.target.tags for tag in refused):
            return False
    return True

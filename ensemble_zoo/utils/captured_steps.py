"""Eager PyTorch steps replayed as captured graphs of operations.

Eager PyTorch runs a Keras model's Python at every call: Keras' checks and
conversions around each operation, the layers' calls, the model's own
code. A step that runs many times on tensors of one shape, as the decode
loop's does, spends most of its time there on a CPU: on 2 cores, a step
of 4 LoRA-Ensemble members of Gemma 3 270M (18 blocks, about 9,000
operations) took 687 ms eagerly and 388 ms replayed, and a step of 8
members of a tiny 2-block Gemma (2,000 operations, each a few µs of
work) 60 against 23 ms.

`CapturedStep` runs a step eagerly for its first `CAPTURE_AFTER` calls
of one input signature (shapes, dtypes, devices and structure of its
arguments, gradients on or off, the identity of the weights' tensors),
then records the PyTorch operations one such call runs
(`torch.fx.experimental.proxy_tensor.make_fx` on real tensors, torch
2.13) and replays that graph for every later call of the signature: the
same operations on the same kernels (oneDNN's eager products included),
so the results equal the eager step's bit for bit, without Python
between them. Short runs (a test's few tokens) never pay the recording,
which costs about 18 to 40 eager steps; long ones pay it once.

A step is replayed only where a replay computes what the eager call
would:

- the weights are read by reference, so an in-place update
  (`Variable.assign`, an optimizer's step) reaches the next replay, and a
  weight whose tensor was replaced changes the signature;
- a recording that read a tensor's value on the host (`.item()`,
  `bool(tensor)`: the value would be frozen into the graph) or drew random
  numbers (the generator's state would not advance) is refused, and the
  signature runs eagerly from then on. The recording's own run is the
  call's result, so a refused step still runs once per call; its draws
  need not be the eager call's, so a step that draws from a seed is best
  kept out (the decode loop records greedy decoding only: keras-hub's
  random, top-k and top-p samplers hold a seed and decode eagerly).

Recording uses one fake-tensor mode for the whole graph (a
`torch._guards.TracingContext`): `make_fx` otherwise builds one per
operation to describe its output, half of a recording's time. Nothing
global is changed: dispatch modes and the tracing context are
thread-local, each `CapturedStep` keeps its own graphs, and a process
records one step at a time (`make_fx` keeps its tracer in a module
global), so threads may decode at once.
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


class CapturedStep:
    """A step of PyTorch tensors, replayed as a captured graph once its
    input signature has run `capture_after` times (see the module
    docstring).

    Args:
        function: the step, a function of tensors (nested in tuples,
            lists and dicts, or Python values) returning tensors, with no
            side effect but its outputs.
        weights: a callable returning the tensors the step reads that are
            not arguments (the model's variables' values): their identity
            is part of the signature.
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
        if not isinstance(capture_after, int) or capture_after < 0:
            raise ValueError(f"`capture_after` must be an int >= 0; got {capture_after!r}.")
        self.function = function
        self.weights = weights
        self.capture_after = capture_after
        self._graphs = {}  # signature -> graph, or None where refused
        self._eager_calls = {}  # signature -> eager calls so far
        self._lock = threading.Lock()

    def __call__(self, *args):
        key = self._signature(args)
        graph = self._graphs.get(key, False)
        if graph is False:
            with self._lock:
                calls = self._eager_calls.get(key, 0)
                self._eager_calls[key] = calls + 1
                graph = None if calls < self.capture_after else self._graphs.get(key, False)
                if graph is False:
                    # The recording's run is this call's: a step that
                    # advances a seed (and is refused) runs once.
                    self._graphs[key], outputs = record(self.function, args)
                    self._eager_calls.pop(key, None)
                    return outputs
        if graph is None:
            return self.function(*args)
        return graph(*args)

    def graphs(self):
        """How many signatures are replayed, and how many were refused."""
        kept = sum(graph is not None for graph in self._graphs.values())
        return kept, len(self._graphs) - kept

    def _signature(self, args):
        import torch
        from torch.utils import _pytree

        leaves, spec = _pytree.tree_flatten(args)
        shapes = tuple(
            (tuple(x.shape), x.dtype, x.device) if isinstance(x, torch.Tensor) else ("value", x)
            for x in leaves
        )
        weights = tuple(id(w) for w in self.weights())
        return str(spec), shapes, torch.is_grad_enabled(), weights


def record(function, args):
    """`(graph, outputs)`: the graph of PyTorch operations that
    `function(*args)` runs, as a callable of the same arguments, or `None`
    where a replay could differ from an eager call (`replayable`), and
    the outputs of that call."""
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
    except ImportError:  # a torch without them: slower, same graph
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
    """Whether a recorded graph computes what its eager function would on
    other values: it reads no tensor's value on the host and draws no
    random numbers."""
    import torch

    for node in graph.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if node.target._schema.name.split("::")[-1] in _HOST_READS:
            return False
        if torch.Tag.nondeterministic_seeded in node.target.tags:
            return False
    return True

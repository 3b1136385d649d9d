"""`InductorStep` compiles a recorded PyTorch step with inductor, the
weights as inputs: its results equal the eager step's on new values, it
follows weights written in place without compiling again, takes a size
as a symbol, compiles once per signature, is served by inductor's and
AOT autograd's caches on disk in a new step, and runs eagerly, with a
warning, what it cannot compile (other threads too while one compiles)."""

import warnings

import keras
import numpy as np
import pytest
from zoo_testing import skip_on_alternate_days

pytestmark = pytest.mark.skipif(keras.config.backend() != "torch", reason="PyTorch graphs")


@skip_on_alternate_days("inductor")
def test_compiled_step_equals_the_eager_step_and_follows_the_weights():
    import torch
    from torch._dynamo.utils import counters

    from ensemble_zoo.utils.inductor_steps import InductorStep

    weight = keras.Variable(np.random.default_rng(0).normal(size=(4, 3)).astype("float32"))
    runs = []

    def function(x, pair, scale):
        runs.append(1)  # Python: runs while recording only
        return {"y": torch.tanh(x @ weight.value) * scale + pair[0], "z": pair[1] * 2}

    def check(step, x, pair, scale=2.0):
        with torch.no_grad():  # as the decode runs it
            got, expected = step(x, pair, scale), function(x, pair, scale)
        for name in ("y", "z"):
            np.testing.assert_allclose(got[name].numpy(), expected[name].numpy(), atol=1e-6)

    step = InductorStep(function, [weight], fallback=None)
    pair = (torch.randn(2, 3), torch.randn(5))
    counters.clear()
    for _ in range(3):
        check(step, torch.randn(2, 4), pair)
    assert step.programs() == (1, 0)
    assert len(runs) == 4, runs  # one recording, then the three references
    weight.assign(weight.value * -3.0)
    check(step, torch.randn(2, 4), pair)
    assert step.programs() == (1, 0)
    # Another Python value (a constant of the graph) is another program.
    check(step, torch.randn(2, 4), pair, scale=0.5)
    assert step.programs() == (2, 0)
    # A new step (a new process, or another model of the same shapes)
    # finds the program in inductor's cache (on disk, where a run before
    # this one may have put the first two).
    looked_up = dict(counters["inductor"])
    check(InductorStep(function, [weight], fallback=None), torch.randn(2, 4), pair)
    hits = counters["inductor"]["fxgraph_cache_hit"] - looked_up.get("fxgraph_cache_hit", 0)
    misses = counters["inductor"]["fxgraph_cache_miss"] - looked_up.get("fxgraph_cache_miss", 0)
    assert (hits, misses) == (1, 0), dict(counters["inductor"])

    # A length as a symbol: one program over row counts, inputs of other
    # layouts (a transposed view) included.
    def scaled(x):
        return torch.tanh(x @ weight.value) * 2.0

    rows = InductorStep(scaled, [weight], fallback=None, dynamic=lambda x: [x.shape[0]])
    for x in (torch.randn(5, 4), torch.randn(9, 4), torch.randn(4, 7).t()):
        with torch.no_grad():
            np.testing.assert_allclose(rows(x).numpy(), scaled(x).numpy(), atol=1e-6)
    compiled, refused = rows.programs()
    assert refused == 0 and compiled <= 2, rows.programs()  # the view may take its own

    # A new step finds a symbolic program in AOT autograd's cache too (which
    # spares tracing it again), with the guards compiling placed on it:
    # inductor's float sum over more than 4096 rows is another kernel.
    def summed(x):
        return torch.tanh(x @ weight.value).sum(0)

    for _ in range(2):  # compiled (or served), then served from the caches
        looked_up = dict(counters["aot_autograd"])
        step = InductorStep(summed, [weight], fallback=None, dynamic=lambda x: [x.shape[0]])
        x = torch.randn(5, 4)
        with torch.no_grad():
            np.testing.assert_allclose(step(x).numpy(), summed(x).numpy(), atol=1e-5)
        ((program,),) = step._programs.values()
        assert program.accepts([torch.randn(9, 4)])
        assert not program.accepts([torch.randn(5000, 4)])
    aot = [
        counters["aot_autograd"][f"autograd_cache_{n}"] - looked_up.get(f"autograd_cache_{n}", 0)
        for n in ("hit", "miss", "bypass")
    ]
    assert aot == [1, 0, 0], dict(counters["aot_autograd"])


def test_what_cannot_be_compiled_runs_the_fallback_with_a_warning():
    import torch

    from ensemble_zoo.utils.inductor_steps import InductorStep

    def host_read(x):
        return x * float(x.sum())

    def draws(x):
        return x + torch.rand_like(x)

    def compiler(graph, inputs):
        raise RuntimeError("no compiler found")

    x = torch.ones(3)
    cases = [
        (host_read, None, "could not be recorded"),
        (draws, None, "draws random numbers"),
        (torch.sin, compiler, "no compiler found"),
    ]
    for function, given, message in cases:
        calls = []

        def fallback(*args, function=function):
            calls.append(1)
            return function(*args)

        step = InductorStep(function, [], fallback=fallback, compiler=given)
        with pytest.warns(RuntimeWarning, match=message):
            step(x)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            step(x)  # refused once, without another warning
        assert (step.programs(), len(calls)) == ((0, 1), 2), message
    with pytest.raises(TypeError, match="fallback"):
        InductorStep(torch.sin, [], fallback=1)
    with pytest.raises(TypeError, match="Keras variables"):
        InductorStep(torch.sin, [x], fallback=None)
    with pytest.raises(TypeError, match="must return ints"):
        InductorStep(torch.sin, [], fallback=None, dynamic=lambda x: [1.5])(x)


def test_a_dynamic_size_is_one_program_while_its_guards_hold():
    """Sizes given by `dynamic` are symbols of the program: one program
    serves every row count, and a row count that equals another dimension
    of the arguments (which then becomes a symbol too) records a program
    of its own; a strided view's strides are symbols as well. The recorded
    graph runs as it is here (no inductor)."""
    import torch

    from ensemble_zoo.utils.inductor_steps import InductorStep

    weight = keras.Variable(np.random.default_rng(0).normal(size=(4, 3)).astype("float32"))

    def function(x, y):
        return torch.tanh(x @ weight.value) + y.sum(dim=0), x.shape[0] * y

    step = InductorStep(
        function,
        [weight],
        fallback=None,
        compiler=lambda graph, inputs: graph,
        dynamic=lambda x, y: [x.shape[0]],
    )
    with torch.no_grad():
        for rows, programs in ((2, 1), (5, 1), (9, 1), (3, 2), (7, 2)):
            # Three rows make both of `y`'s axes symbols.
            x, y = torch.randn(rows, 4), torch.randn(rows if rows == 3 else 3, 3)
            for got, expected in zip(step(x, y), function(x, y), strict=True):
                np.testing.assert_allclose(got.numpy(), expected.numpy(), atol=1e-6)
            assert step.programs() == (programs, 0), (rows, step.programs())
        # A strided view's stride is a symbol too, an input of the program as
        # the sizes are: one program over row counts and strides.
        for rows, every, programs in ((6, 2, 3), (11, 2, 3), (6, 3, 3)):
            x, y = torch.randn(rows, 4 * every)[:, ::every], torch.randn(4, 3)
            for got, expected in zip(step(x, y), function(x, y), strict=True):
                np.testing.assert_allclose(got.numpy(), expected.numpy(), atol=1e-6)
            assert step.programs() == (programs, 0), (rows, every, step.programs())


def test_other_threads_run_the_fallback_while_one_compiles():
    import threading

    import torch

    from ensemble_zoo.utils.inductor_steps import InductorStep

    started, release = threading.Event(), threading.Event()

    def compiler(graph, inputs):
        started.set()
        release.wait(30)
        return graph

    fallbacks = []

    def fallback(x):
        fallbacks.append(1)
        return torch.sin(x)

    step = InductorStep(torch.sin, [], fallback=fallback, compiler=compiler)
    x = torch.ones(3)
    compiling = threading.Thread(target=step, args=(x,))
    compiling.start()
    assert started.wait(30)
    np.testing.assert_allclose(step(x).numpy(), torch.sin(x).numpy())
    release.set()
    compiling.join()
    np.testing.assert_allclose(step(x).numpy(), torch.sin(x).numpy())
    assert (fallbacks, step.programs()) == ([1], (1, 0))

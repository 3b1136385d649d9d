"""`CapturedStep` replays a recorded PyTorch step with the eager step's
results on new values, sees weights written in place, records again for a
replaced weight or a new shape, and refuses steps whose recording reads a
value on the host or draws random numbers (they keep running eagerly)."""

import keras
import numpy as np
import pytest

pytestmark = pytest.mark.skipif(keras.config.backend() != "torch", reason="PyTorch graphs")


def test_replays_equal_the_eager_step_and_follow_the_weights():
    import torch

    from ensemble_zoo.utils.captured_steps import CapturedStep

    torch.manual_seed(0)
    held = {"w": torch.randn(4, 3)}

    runs = []

    def function(x, pair):
        runs.append(1)  # Python: runs eagerly and while recording, not in a replay
        return {"y": torch.tanh(x @ held["w"]) + pair[0], "z": pair[1] * 2}

    step = CapturedStep(function, lambda: [held["w"]], capture_after=2)

    def check(x, pair):
        got, expected = step(x, pair), function(x, pair)
        replays.append(len(runs))
        for name in ("y", "z"):
            np.testing.assert_array_equal(got[name].numpy(), expected[name].numpy())

    pair = (torch.randn(2, 3), torch.randn(5))
    replays = []
    for call in range(5):
        check(torch.randn(2, 4), pair)
        assert step.graphs() == ((1, 0) if call >= 2 else (0, 0)), (call, step.graphs())
    # Python runs twice a call (the step's, eager, recording or checking
    # the first replay, and the reference's), once (the reference's) once
    # it replays.
    assert replays == [2, 4, 6, 8, 9], replays
    # Written in place (as `Variable.assign` writes): the replay sees it.
    with torch.no_grad():
        held["w"].mul_(-3.0)
    check(torch.randn(2, 4), pair)
    # A replaced weight is a new signature: recorded anew, the old graph
    # dropped; so is another shape.
    held["w"] = torch.randn(4, 3)
    for _ in range(5):
        check(torch.randn(2, 4), pair)
    assert step.graphs() == (1, 0)
    for _ in range(5):
        check(torch.randn(3, 4), (torch.randn(3, 3), pair[1]))
    assert step.graphs() == (2, 0)


def test_a_step_that_reads_values_or_draws_runs_eagerly():
    import torch

    from ensemble_zoo.utils.captured_steps import CapturedStep

    def branching(x):  # `bool` reads the value through an operation
        return x * 2 if bool(x.sum() > 0) else x - 1

    def listing(x):  # `.tolist()` leaves no operation: the first replay differs
        return x * x.tolist()[0]

    def drawing(x):
        return x + torch.rand_like(x)

    for function in (branching, listing):
        step = CapturedStep(function, lambda: [], capture_after=0)
        for value in (1.0, -1.0, 3.0, -2.0):
            x = torch.full((3,), value)
            np.testing.assert_array_equal(step(x).numpy(), function(x).numpy())
        assert step.graphs() == (0, 1), function.__name__
    step = CapturedStep(drawing, lambda: [], capture_after=0)
    step(torch.zeros(3))
    assert step.graphs() == (0, 1)
    assert not torch.equal(step(torch.zeros(3)), step(torch.zeros(3)))  # draws anew


def test_arguments_are_checked():
    import torch

    from ensemble_zoo.utils.captured_steps import CapturedStep

    with pytest.raises(TypeError, match="callables"):
        CapturedStep(lambda x: x, [])
    with pytest.raises(TypeError, match="capture_after"):
        CapturedStep(lambda x: x, list, capture_after=True)
    with pytest.raises(ValueError, match="capture_after"):
        CapturedStep(lambda x: x, list, capture_after=-1)
    with pytest.raises(TypeError, match="hashable"):
        CapturedStep(lambda x, y: x, list)(torch.ones(2), np.ones(2))

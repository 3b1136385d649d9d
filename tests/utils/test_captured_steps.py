"""`CapturedStep` replays a recorded PyTorch step with the eager step's
results on new values, sees weights written in place, records again for a
replaced weight or a new shape, and refuses steps whose recording read a
value on the host or drew random numbers (they keep running eagerly)."""

import keras
import numpy as np
import pytest

pytestmark = pytest.mark.skipif(keras.config.backend() != "torch", reason="PyTorch graphs")


def test_replays_equal_the_eager_step_and_follow_the_weights():
    import torch

    from ensemble_zoo.utils.captured_steps import CapturedStep

    torch.manual_seed(0)
    weight = torch.randn(4, 3)
    held = {"w": weight}

    def function(x, pair):
        w = held["w"]
        return {"y": torch.tanh(x @ w) + pair[0], "z": pair[1] * 2}

    step = CapturedStep(function, lambda: [held["w"]], capture_after=2)
    for call in range(4):
        x, pair = torch.randn(2, 4), (torch.randn(2, 3), torch.randn(5))
        got = step(x, pair)
        expected = function(x, pair)
        for name in ("y", "z"):
            np.testing.assert_array_equal(got[name].numpy(), expected[name].numpy())
        assert step.graphs() == ((1, 0) if call >= 2 else (0, 0)), (call, step.graphs())
    # Written in place (as `Variable.assign` writes): the replay sees it.
    with torch.no_grad():
        weight.mul_(-3.0)
    x = torch.randn(2, 4)
    np.testing.assert_array_equal(step(x, pair)["y"].numpy(), function(x, pair)["y"].numpy())
    assert step.graphs() == (1, 0)
    # A replaced weight, or another shape, is a new signature.
    held["w"] = torch.randn(4, 3)
    step(x, pair)
    step(torch.randn(3, 4), (torch.randn(3, 3), pair[1]))
    step.capture_after = 0
    x = torch.randn(3, 4)
    np.testing.assert_array_equal(
        step(x, (pair[0][:1], pair[1]))["y"].numpy(),
        function(x, (pair[0][:1], pair[1]))["y"].numpy(),
    )
    assert step.graphs() == (2, 0)


def test_a_step_that_reads_values_or_draws_runs_eagerly():
    import torch

    from ensemble_zoo.utils.captured_steps import CapturedStep

    def branching(x):
        return x * 2 if bool(x.sum() > 0) else x - 1

    def drawing(x):
        return x + torch.rand_like(x)

    for function in (branching, drawing):
        step = CapturedStep(function, lambda: [], capture_after=0)
        positive, negative = torch.ones(3), -torch.ones(3)
        np.testing.assert_array_equal(step(positive).numpy() > 1, True)
        out = step(negative).numpy()
        assert step.graphs() == (0, 1), function.__name__
        if function is branching:
            np.testing.assert_array_equal(out, -2.0)  # not the recorded branch
    torch.manual_seed(0)
    first = step(torch.zeros(3))
    assert not torch.equal(first, step(torch.zeros(3)))  # draws anew


def test_arguments_are_checked():
    from ensemble_zoo.utils.captured_steps import CapturedStep

    with pytest.raises(TypeError, match="callables"):
        CapturedStep(lambda x: x, [])
    with pytest.raises(ValueError, match="capture_after"):
        CapturedStep(lambda x: x, list, capture_after=-1)

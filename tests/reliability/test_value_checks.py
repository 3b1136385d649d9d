"""Where values exist (NumPy, eager tensors) the ops reject NaN and bad
probabilities; inside a compiled graph they let values through like Keras'
own ops, and the models' internal calls never raise on NaN outputs."""

import keras
import numpy as np
import pytest
from conftest import BACKEND
from keras import ops

import ensemble_zoo as ez
from ensemble_zoo.models.ensemble_classifier import EnsembleClassifier

LOGITS = np.random.default_rng(0).normal(size=(3, 2, 4)).astype("float32")
NAN_LOGITS = LOGITS.copy()
NAN_LOGITS[1, 0, 2] = np.nan


def test_eager_tensors_are_checked_like_numpy_arrays():
    with pytest.raises(ValueError, match=r"`member_logits` contains 1 NaN values \(of 24\)"):
        ez.ops.predictive_probabilities(ops.convert_to_tensor(NAN_LOGITS))
    probs = ops.convert_to_tensor(np.full((3, 2, 4), 0.3, "float32"))
    with pytest.raises(ValueError, match="`member_logits` must sum to 1 along axis -1"):
        ez.ops.uncertainty_decomposition(probs, from_logits=False)
    with pytest.raises(ValueError, match=r"`probabilities` must hold probabilities in \[0, 1\]"):
        ez.ops.entropy(ops.convert_to_tensor([[1.5, -0.5]]))


def _compiled(fn):
    if BACKEND == "jax":
        import jax

        return jax.jit(fn)
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, jit_compile=True)
    return None  # torch.compile costs tens of seconds on CPU


@pytest.mark.skipif(
    BACKEND == "torch", reason="torch.compile is covered in tests/models/test_torch_compile.py"
)
def test_compiled_graphs_pass_nan_through():
    probs = ops.convert_to_numpy(
        _compiled(ez.ops.predictive_probabilities)(ops.convert_to_tensor(NAN_LOGITS))
    )
    assert np.isnan(probs[1]).all() and np.isfinite(probs[[0, 2]]).all()
    reference = ops.convert_to_numpy(ez.ops.predictive_probabilities(LOGITS))
    np.testing.assert_allclose(probs[[0, 2]], reference[[0, 2]], atol=1e-6)


def test_models_pass_nan_outputs_through_instead_of_raising():
    """A model whose logits are NaN gives NaN uncertainty on every backend
    (like `predict`), rather than an error that only eager backends raise."""
    out = EnsembleClassifier._uncertainty_outputs(NAN_LOGITS, as_numpy=True)
    assert np.isnan(out["probabilities"][1]).all()
    assert np.isnan(out["epistemic"][1]) and np.isfinite(out["epistemic"][[0, 2]]).all()


def test_the_harness_names_the_set_with_non_finite_predictions():
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(3)(inputs))
    x = np.random.default_rng(0).normal(size=(10, 4)).astype("float32")
    y = np.arange(10) % 3
    noisy = x.copy()
    noisy[7, 1] = np.nan
    with pytest.raises(
        ValueError,
        match=r"predictions on `ood_data\['noise'\]` are not finite: 1 of 10 samples .* \(first: sample 7\)",
    ):
        ez.evaluation.evaluate(
            model, (x, y), ood_data={"noise": noisy}, batch_size=4, progress=False
        )
    # The model still evaluates clean data afterwards.
    report = ez.evaluation.evaluate(model, (x, y), batch_size=4, progress=False)
    probs = ops.convert_to_numpy(ops.softmax(model(x), axis=-1))
    assert report.metrics["in_distribution"]["accuracy"] == pytest.approx(
        np.mean(probs.argmax(1) == y)
    )

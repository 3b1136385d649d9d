"""A bad batch is a clear error before Keras compiles a step, and the model
stays usable afterwards (issue 15: JAX left the model broken after a
`predict` that raised; TensorFlow let a wrong image size through after a
retrace)."""

import numpy as np
import pytest

import ensemble_zoo as ez


@pytest.fixture(scope="module")
def model_and_data():
    model = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits")
    x, y = ez.datasets.load_arrays("digits", "test")
    return model, x[:10], y[:10]


def test_bad_image_size_is_a_clear_error_and_the_model_stays_usable(model_and_data):
    model, x, y = model_and_data
    good = model.predict(x, verbose=0)  # compiles (and on TF traces) first
    bad = np.zeros((4, 16, 16, 1), "float32")
    expected = r"expects inputs of shape \(batch, 8, 8, 1\); got shape \(4, 16, 16, 1\)"
    with pytest.raises(ValueError, match=expected):
        model.predict(bad, verbose=0)
    with pytest.raises(ValueError, match=expected):
        model.predict_uncertainty(bad)
    with pytest.raises(ValueError, match=expected):
        model.evaluate(bad, np.zeros(4, "int32"), verbose=0)
    with pytest.raises(ValueError, match="floating-point inputs"):
        model.predict(x.astype("int32"), verbose=0)
    # The same model still predicts, with the same numbers.
    np.testing.assert_allclose(model.predict(x, verbose=0), good, atol=1e-6)
    out = model.predict_uncertainty(x)
    np.testing.assert_allclose(
        out["probabilities"], ez.ops.predictive_probabilities(good), atol=1e-6
    )

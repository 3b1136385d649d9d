"""A bad batch is a clear error before Keras compiles a step, and the model
stays usable afterwards (JAX once left the model broken after a `predict`
that raised; TensorFlow let a wrong image size through after a retrace)."""

import numpy as np
import pytest
from conftest import BACKEND

import ensemble_zoo as ez


@pytest.fixture(scope="module")
def model_and_data():
    # Without the preset's image converter (which would resize a 16x16
    # image): the model's own input checks.
    model = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits", preprocessor=None)
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
    with pytest.raises(ValueError, match=expected):
        model.predict_on_batch(bad)
    with pytest.raises(ValueError, match=expected):
        model.test_on_batch(bad, np.zeros(4, "int32"))
    with pytest.raises(ValueError, match=r"class indices in \[0, 7\]; got 9"):
        model.test_on_batch(x, np.full(len(x), 9))
    with pytest.raises(ValueError, match="floating-point inputs"):
        model.predict(x.astype("int32"), verbose=0)
    # The same model still predicts, with the same numbers.
    np.testing.assert_allclose(model.predict(x, verbose=0), good, atol=1e-6)
    np.testing.assert_allclose(model.predict_on_batch(x), good, atol=1e-6)
    out = model.predict_uncertainty(x)
    np.testing.assert_allclose(
        out["probabilities"], ez.ops.predictive_probabilities(good), atol=1e-6
    )


def test_bad_labels_are_clear_errors_and_the_model_stays_usable(model_and_data):
    """Out-of-range labels gave a number under JAX (and a runtime error
    under TensorFlow); fractional labels were truncated."""
    model, x, y = model_and_data
    before = model.evaluate(x, y, verbose=0, return_dict=True)
    bad = y.copy()
    bad[3] = 8  # the digits model has 8 classes
    with pytest.raises(
        ValueError, match=r"`y` must hold class indices in \[0, 7\]; got 8 \(at index 3\)"
    ):
        model.evaluate(x, bad, verbose=0)
    with pytest.raises(
        ValueError, match="`y` must hold integer class indices; got fractional values such as 1.5"
    ):
        model.fit(x, np.where(np.arange(10) == 2, 1.5, y), epochs=1, verbose=0)
    with pytest.raises(ValueError, match=r"`y` must hold class indices of shape \(batch,\)"):
        model.evaluate(x, np.stack([y, y], 1), verbose=0)
    after = model.evaluate(x, y, verbose=0, return_dict=True)
    assert after == pytest.approx(before, abs=1e-6)


def test_labels_of_shape_n_by_1_equal_labels_of_shape_n(model_and_data):
    """TensorFlow once failed on (N, 1) labels in `evaluate` and `fit`."""
    model, x, y = model_and_data
    flat = model.evaluate(x, y, verbose=0, return_dict=True)
    column = model.evaluate(x, y[:, None], verbose=0, return_dict=True)
    assert column == pytest.approx(flat, abs=1e-6)


# Test budget: the loss-prediction checks skip JAX, whose code path is
# PyTorch's (static batch, Keras' trainable flags); eager JAX takes 35 s.
skip_jax = pytest.mark.skipif(BACKEND == "jax", reason="JAX follows the PyTorch path; test budget")


@skip_jax
def test_frozen_loss_prediction_preset_trains_only_its_head():
    """Under TensorFlow the loaded preset once listed the frozen ViT's
    76 variables as trainable (a backbone deserialized with `trainable:
    false` did not pass the flag to its sublayers)."""
    model = ez.models.LossPredictionImageClassifier.from_preset("loss_prediction_vit_tiny_digits")
    paths = [v.path for v in model.trainable_variables]
    assert len(paths) == 6 and all(p.startswith("uncertainty_head/") for p in paths)
    assert sum(int(np.prod(v.shape)) for v in model.trainable_variables) == 288_257
    backbone = model.backbone.trainable_variables + [
        v for layer in model.backbone._flatten_layers() for v in layer.trainable_variables
    ]
    assert backbone == []


@skip_jax
def test_loss_prediction_keeps_adamw_evaluates_odd_batches_and_predicts_uncertainty():
    """`compile(jit_compile=...)` alone once swapped AdamW for RMSprop;
    `evaluate` failed on the odd last batch (289 = 4 x 64 + 33); there was
    no `predict_uncertainty`."""
    model = ez.models.LossPredictionImageClassifier.from_preset(
        "loss_prediction_vit_tiny_digits", preprocessor=None
    )
    model.compile(jit_compile=False)
    assert type(model.optimizer).__name__ == "AdamW"
    x, y = ez.datasets.load_arrays("digits", "test")
    x, y = x[:65], y[:65]
    loss = model.evaluate(x, y, batch_size=32, verbose=0)  # last batch of 1
    assert np.isfinite(loss)
    out = model.predict_uncertainty(x[:9])
    reference = model.predict(x[:9], verbose=0)
    np.testing.assert_allclose(out["uncertainty"], reference["uncertainty"], atol=1e-6)
    z = reference["logits"].astype("float64")
    expected = np.exp(z - z.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(out["probabilities"], expected, atol=1e-6)


def test_fit_on_a_zoo_dataset_does_not_warn_about_shuffle():
    """Keras' default `shuffle=True` warned on every `fit` over a tf.data
    dataset, the README quickstart's `ez.datasets.load` included."""
    import warnings

    import keras

    def member(seed):
        keras.utils.set_random_seed(seed)
        inputs = keras.Input((8, 8, 1))
        return keras.Model(inputs, keras.layers.Dense(8)(keras.layers.Flatten()(inputs)))

    model = ez.models.DeepEnsembleClassifier([member(0), member(1)])
    data = ez.datasets.load("digits", "validation", batch_size=64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(data, epochs=1, verbose=0)
    assert not [w for w in caught if "shuffle" in str(w.message)]

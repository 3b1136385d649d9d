"""Training, saving and exporting under `keras.mixed_precision` policies.

Prediction agreement with float32 for every trained preset is checked in
`tests/presets/test_presets.py`; here one model goes through the whole
life cycle under each low-precision policy."""

import keras
import numpy as np
import pytest
from conftest import requires_saved_model
from zoo_testing import this_run
from zoo_testing import to_np

import ensemble_zoo as ez


@pytest.fixture
def policy_scope():
    yield keras.config.set_dtype_policy
    keras.config.set_dtype_policy("float32")


@pytest.mark.parametrize("policy", this_run(["mixed_bfloat16", "mixed_float16"], 1))
def test_trains_saves_and_reloads_under_a_mixed_policy(tmp_path, policy, policy_scope):
    """One policy a run, in turn (test budget: 10 to 25 s each under JAX
    and TensorFlow)."""
    policy_scope(policy)
    model = ez.models.EnsembleClassifier.from_preset("hydra_circuit_vit_tiny_digits")
    model.compile()
    if policy == "mixed_float16":  # Keras scales the loss for float16
        assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    # The preset's image converter takes the raw digits (0-16).
    x, y = ez.datasets.load_arrays("digits", "train", raw=True)
    before = [to_np(v) for v in model.trainable_variables]
    history = model.fit(x[:128], y[:128], batch_size=32, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert {v.dtype for v in model.weights} == {"float32"}
    moved = [np.abs(to_np(v) - b).max() for v, b in zip(model.trainable_variables, before)]
    assert max(moved) > 0
    logits = model.predict(x[:64], verbose=0)
    assert logits.dtype == np.float32
    model.save_to_preset(str(tmp_path / "preset"))
    policy_scope("float32")
    restored = ez.models.EnsembleClassifier.from_preset(str(tmp_path / "preset"))
    assert restored.compute_dtype == "float32"
    # The same weights computed in float32: probabilities agree closely.
    np.testing.assert_allclose(
        to_np(ez.ops.predictive_probabilities(restored.predict(x[:64], verbose=0))),
        to_np(ez.ops.predictive_probabilities(logits)),
        atol=0.05 if policy == "mixed_bfloat16" else 0.01,
    )


@requires_saved_model
def test_export_under_bfloat16_serves_float32_outputs(tmp_path, policy_scope):
    import tensorflow as tf

    policy_scope("mixed_bfloat16")
    model = ez.models.EnsembleClassifier.from_preset("vmoe_vit_tiny_digits")
    x, _ = ez.datasets.load_arrays("digits", "test")
    model.export(str(tmp_path / "sm"))
    loaded = tf.saved_model.load(str(tmp_path / "sm"))
    served = loaded.serve(tf.constant(x[:16]))
    assert served["probabilities"].dtype == tf.float32
    # bfloat16 resolves a logit of 10 to 1/16: compare probabilities.
    np.testing.assert_allclose(
        served["probabilities"].numpy(),
        to_np(ez.ops.predictive_probabilities(model(x[:16]))),
        atol=0.05,
    )

import keras
import numpy as np
import pytest
from keras import ops

from ensemble_zoo.losses import EnsembleSparseCategoricalCrossentropy


def test_equals_mean_of_per_member_crossentropies(rng):
    logits = rng.normal(size=(12, 4, 6)).astype("float32") * 2
    labels = rng.integers(0, 6, size=(12,))
    reference_loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    expected = np.mean(
        [float(ops.convert_to_numpy(reference_loss(labels, logits[:, m]))) for m in range(4)]
    )
    got = float(ops.convert_to_numpy(EnsembleSparseCategoricalCrossentropy()(labels, logits)))
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_labels_of_shape_batch_1_and_sample_weights(rng):
    logits = rng.normal(size=(5, 2, 3)).astype("float32")
    labels = rng.integers(0, 3, size=(5,))
    weights = np.array([1.0, 0.0, 2.0, 0.5, 1.0], "float32")
    loss = EnsembleSparseCategoricalCrossentropy(reduction="sum")
    a = loss(labels, logits, sample_weight=weights)
    b = loss(labels[:, None], logits, sample_weight=weights)
    # NumPy reference of the weighted sum.
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    per_sample = -logp[np.arange(5), :, labels].mean(axis=1)
    expected = float(np.sum(per_sample * weights))
    np.testing.assert_allclose(float(ops.convert_to_numpy(a)), expected, rtol=1e-5)
    np.testing.assert_allclose(float(ops.convert_to_numpy(b)), expected, rtol=1e-5)


def test_serialization_round_trip():
    loss = EnsembleSparseCategoricalCrossentropy(ignore_class=3, name="x")
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert isinstance(restored, EnsembleSparseCategoricalCrossentropy)
    assert restored.get_config() == loss.get_config()


def test_bad_shapes_are_clear_errors():
    loss = EnsembleSparseCategoricalCrossentropy()
    with pytest.raises(ValueError, match=r"\(batch, members, classes\)"):
        loss(np.zeros((4,)), np.zeros((4, 3), "float32"))
    with pytest.raises(ValueError, match="y_true"):
        loss(np.zeros((4, 3)), np.zeros((4, 2, 3), "float32"))

import keras
import numpy as np
import pytest
import zoo_testing
from conftest import jit_compile
from zoo_testing import to_np

from ensemble_zoo.losses import EnsembleSparseCategoricalCrossentropy
from ensemble_zoo.models import DeepEnsembleClassifier
from ensemble_zoo.models import EnsembleClassifier


def mlp_member(seed, classes=4, name=None):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((8, 8, 1))
    x = keras.layers.Flatten()(inputs)
    x = keras.layers.Dense(16, activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(classes)(x), name=name)


def tiny_vit(seed=0):
    return zoo_testing.tiny_vit(
        seed, num_classes=3, patch_size=4, num_layers=1, hidden_dim=8, mlp_dim=16
    )


def test_output_equals_members_run_one_by_one(rng):
    members = [mlp_member(s) for s in range(3)]
    model = DeepEnsembleClassifier(members)
    x = rng.random((5, 8, 8, 1)).astype("float32")
    expected = np.stack([to_np(m(x)) for m in members], axis=1)
    np.testing.assert_allclose(to_np(model(x)), expected, atol=1e-6)
    assert model.num_members == 3 and model.num_classes == 4
    assert isinstance(model, EnsembleClassifier)


def test_from_model_reinitializes_with_seeds(rng):
    base = tiny_vit()
    a = DeepEnsembleClassifier.from_model(base, num_members=2, seed=7)
    b = DeepEnsembleClassifier.from_model(base, num_members=2, seed=7)
    x = rng.random((4, 8, 8, 1)).astype("float32")
    out = to_np(a(x))
    np.testing.assert_array_equal(out, to_np(b(x)))
    assert not np.allclose(out[:, 0], out[:, 1])  # members differ
    assert a.members[0].preprocessor is None


def test_fit_trains_every_member_on_its_own_loss(rng):
    """One fit step == each member's own step on its own cross-entropy."""
    members = [mlp_member(s) for s in range(2)]
    copies = [mlp_member(s) for s in range(2)]
    x = rng.random((16, 8, 8, 1)).astype("float32")
    y = rng.integers(0, 4, size=(16,))
    model = DeepEnsembleClassifier(members)
    model.compile(optimizer=keras.optimizers.SGD(0.1), jit_compile=jit_compile())
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
    for copy, trained in zip(copies, model.members):
        # Each member's gradient in the ensemble loss is 1/M of its own.
        copy.compile(
            optimizer=keras.optimizers.SGD(0.1 / 2),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        copy.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
        for w_copy, w_trained in zip(copy.weights, trained.weights):
            np.testing.assert_allclose(to_np(w_copy), to_np(w_trained), atol=1e-5)


def test_compile_defaults():
    model = DeepEnsembleClassifier([mlp_member(0)])
    assert isinstance(model.loss, EnsembleSparseCategoricalCrossentropy)
    assert isinstance(model.optimizer, keras.optimizers.AdamW)


@pytest.mark.skipif(not jit_compile(), reason="XLA on JAX and TF only")
def test_keras_hub_vit_ensemble_fits_and_predicts_under_jit(rng):
    model = DeepEnsembleClassifier.from_model(tiny_vit(), num_members=2)
    model.compile(jit_compile=True)
    x = rng.random((32, 8, 8, 1)).astype("float32")
    y = (x.mean(axis=(1, 2, 3)) > 0.5).astype("int32")
    history = model.fit(x, y, batch_size=8, epochs=3, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    np.testing.assert_allclose(model.predict(x, verbose=0), to_np(model(x)), atol=1e-5)


def test_predict_uncertainty_matches_shared_ops(rng):
    from ensemble_zoo.ops import uncertainty_decomposition

    model = DeepEnsembleClassifier([mlp_member(s) for s in range(3)])
    x = rng.random((6, 8, 8, 1)).astype("float32")
    out = model.predict_uncertainty(x)
    logits = to_np(model(x))
    z = logits - logits.max(-1, keepdims=True)
    probs = (np.exp(z) / np.exp(z).sum(-1, keepdims=True)).mean(1)
    np.testing.assert_allclose(out["probabilities"], probs, atol=1e-6)
    np.testing.assert_allclose(out["member_logits"], logits, atol=1e-5)
    ref = uncertainty_decomposition(logits)
    for key in ("total", "aleatoric", "epistemic"):
        assert out[key].shape == (6,)
        np.testing.assert_allclose(out[key], to_np(ref[key]), atol=1e-6)


def test_config_round_trip(rng):
    model = DeepEnsembleClassifier([mlp_member(s, name=f"m{s}") for s in range(2)])
    restored = DeepEnsembleClassifier.from_config(model.get_config())
    assert restored.get_config() == model.get_config()
    restored.set_weights(model.get_weights())
    x = rng.random((3, 8, 8, 1)).astype("float32")
    np.testing.assert_allclose(to_np(restored(x)), to_np(model(x)), atol=1e-6)


def test_bad_inputs_are_clear_errors():
    model = DeepEnsembleClassifier([mlp_member(0)])
    with pytest.raises(ValueError, match=r"\(batch, 8, 8, 1\)"):
        model(np.zeros((2, 8, 8), "float32"))
    with pytest.raises(ValueError, match=r"\(batch, 8, 8, 1\)"):
        model(np.zeros((2, 16, 16, 1), "float32"))
    with pytest.raises(ValueError, match="floating-point"):
        model(np.zeros((2, 8, 8, 1), "uint8"))
    with pytest.raises(ValueError, match="non-empty list"):
        DeepEnsembleClassifier([])
    with pytest.raises(ValueError, match="number of classes"):
        DeepEnsembleClassifier([mlp_member(0, classes=4), mlp_member(1, classes=5)])
    with pytest.raises(ValueError, match="num_members"):
        DeepEnsembleClassifier.from_model(mlp_member(0), num_members=0)


def test_from_keras_hub_can_keep_pretrained_backbone(rng):
    source = tiny_vit(seed=5)
    ensemble = DeepEnsembleClassifier.from_keras_hub(
        source, num_members=2, keep_backbone_weights=True
    )
    for member in ensemble.members:
        for a, b in zip(member.backbone.weights, source.backbone.weights):
            np.testing.assert_array_equal(to_np(a), to_np(b))
    heads = [to_np(m.output_dense.kernel) for m in ensemble.members]
    assert not np.allclose(heads[0], heads[1])
    fresh = DeepEnsembleClassifier.from_keras_hub(source, num_members=1)
    assert not np.allclose(
        to_np(fresh.members[0].backbone.weights[0]), to_np(source.backbone.weights[0])
    )
    with pytest.raises(ValueError, match="from_model"):
        DeepEnsembleClassifier.from_keras_hub(mlp_member(0), num_members=2)

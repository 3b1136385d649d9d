import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import jit_compile
from conftest import requires_jit
from keras import ops
from scipy.stats import spearmanr
from zoo_testing import to_np

import ensemble_zoo as ez
from ensemble_zoo.models import LossPredictionImageClassifier
from ensemble_zoo.models.loss_prediction import cache_embeddings
from ensemble_zoo.models.loss_prediction import train_head_from_cache
from ensemble_zoo.utils.gradients import loss_gradients


def vit():
    return ez.models.EnsembleClassifier.from_preset("vit_tiny_digits").members[0]


def frozen_model(seed=1, units=(32, 32)):
    keras.utils.set_random_seed(seed)
    return LossPredictionImageClassifier.from_keras_hub(
        vit(), head_hidden_units=units, freeze_backbone=True, freeze_classifier=True
    )


def test_outputs_and_the_classifier_equal_keras_hub():
    base = vit()
    model = frozen_model()
    x, _ = ez.datasets.load_arrays("digits", "test")
    out = model.predict(x[:20], verbose=0)
    np.testing.assert_allclose(out["logits"], to_np(base(x[:20])), atol=1e-5)
    assert out["uncertainty"].shape == (20,) and (out["uncertainty"] > 0).all()
    assert {w.path.split("/")[0] for w in model.trainable_weights} == {"uncertainty_head"}


def test_backbone_gradient_is_exactly_the_classification_gradient():
    keras.utils.set_random_seed(0)
    model = LossPredictionImageClassifier.from_keras_hub(vit(), head_hidden_units=(16, 16))
    x, y = ez.datasets.load_arrays("digits", "train")
    x, y = x[:16], y[:16]

    def ce_only(labels, outputs):
        return ops.mean(
            keras.losses.sparse_categorical_crossentropy(
                labels, outputs["logits"], from_logits=True
            )
        )

    def ce_plus_uncertainty(labels, outputs):
        return model.compute_loss(y=labels, y_pred=outputs)

    variables = model.backbone.trainable_variables + model.classifier.trainable_variables
    plain = loss_gradients(model, ce_only, x, y, variables)
    joint = loss_gradients(model, ce_plus_uncertainty, x, y, variables)
    for a, b, v in zip(plain, joint, variables):
        np.testing.assert_allclose(b, a, atol=1e-8, err_msg=v.path)
    head = loss_gradients(
        model, ce_plus_uncertainty, x, y, model.uncertainty_head.trainable_variables
    )
    assert max(np.abs(g).max() for g in head) > 0

    # Vanilla loss prediction (no stop-gradient): the head's loss reaches
    # the backbone, so the gradient differs (the paper's gradient conflict).
    keras.utils.set_random_seed(0)
    vanilla = LossPredictionImageClassifier.from_keras_hub(
        vit(), head_hidden_units=(16, 16), stop_gradient=False
    )

    def vanilla_loss(labels, outputs):
        return vanilla.compute_loss(y=labels, y_pred=outputs)

    variables = vanilla.backbone.trainable_variables
    plain = loss_gradients(vanilla, ce_only, x, y, variables)
    joint = loss_gradients(vanilla, vanilla_loss, x, y, variables)
    assert max(np.abs(a - b).max() for a, b in zip(plain, joint)) > 1e-4


def test_cached_training_reaches_the_on_the_fly_head(tmp_path):
    x, y = ez.datasets.load_arrays("digits", "train")

    # Two shuffled passes, fixed in NumPy (TF's op-level shuffle seeds depend
    # on how many ops were created before).
    rng = np.random.default_rng(0)
    order = np.concatenate([rng.permutation(256), rng.permutation(256)])

    def dataset():
        return tf.data.Dataset.from_tensor_slices((x[order], y[order])).batch(32)

    on_the_fly = frozen_model()
    on_the_fly.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=jit_compile())
    on_the_fly.fit(dataset(), epochs=1, verbose=0)
    cached = frozen_model()
    path = str(tmp_path / "cache.h5")
    assert cache_embeddings(cached, dataset(), path, epochs=1) == {"rows": 512, "batches": 16}
    train_head_from_cache(
        cached, path, optimizer=keras.optimizers.Adam(1e-3), jit_compile=jit_compile()
    )
    for a, b in zip(on_the_fly.uncertainty_head.weights, cached.uncertainty_head.weights):
        np.testing.assert_allclose(to_np(b), to_np(a), atol=1e-5)
    with pytest.raises(ValueError, match="freeze_backbone"):
        cache_embeddings(LossPredictionImageClassifier.from_keras_hub(vit()), dataset(), path)
    (tmp_path / "bad.h5").write_text("no")
    with pytest.raises(ValueError, match="bad.h5"):
        train_head_from_cache(cached, str(tmp_path / "bad.h5"))


@pytest.mark.skipif(
    keras.config.backend() != "jax",
    reason="once: a property of the trained head (15 epochs), not of a backend",
)
def test_predicted_uncertainty_ranks_held_out_losses():
    model = frozen_model(units=(64, 64))
    model.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=jit_compile())
    x, y = ez.datasets.load_arrays("digits", "train")
    model.fit(x, y, batch_size=64, epochs=15, verbose=0)
    xt, yt = ez.datasets.load_arrays("digits", "test")
    out = model.predict(xt, verbose=0)
    losses = to_np(
        keras.losses.sparse_categorical_crossentropy(yt, out["logits"], from_logits=True)
    )
    correlation = spearmanr(out["uncertainty"], losses).statistic
    print("Spearman(uncertainty, loss) on held-out digits:", correlation)
    assert correlation > 0.3


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="uncertainty_loss"):
        LossPredictionImageClassifier.from_keras_hub(vit(), uncertainty_loss="l1")
    with pytest.raises(ValueError, match="num_classes"):
        LossPredictionImageClassifier.from_keras_hub(vit().backbone)
    with pytest.raises(ValueError, match="images of shape"):
        frozen_model()(np.zeros((2, 8, 8), "float32"))


def test_pooled_embedding_backbone():
    """Any functional model returning (batch, dim) works with pooling=None."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 8, 1))
    features = keras.layers.Dense(16, activation="relu")(keras.layers.Flatten()(inputs))
    backbone = keras.Model(inputs, features)
    model = LossPredictionImageClassifier(
        backbone, num_classes=8, pooling=None, head_hidden_units=(8,)
    )
    x, _ = ez.datasets.load_arrays("digits", "test")
    out = model.predict(x[:10], verbose=0)
    embedding = to_np(backbone(x[:10]))
    np.testing.assert_allclose(
        out["logits"],
        embedding @ to_np(model.classifier.kernel) + to_np(model.classifier.bias),
        atol=1e-5,
    )
    np.testing.assert_allclose(to_np(model.embed(x[:10])), embedding, atol=1e-6)
    with pytest.raises(ValueError, match="pooling=None"):
        LossPredictionImageClassifier(backbone, num_classes=8)
    with pytest.raises(ValueError, match="pooled"):
        LossPredictionImageClassifier(vit().backbone, num_classes=8, pooling=None)
    restored = LossPredictionImageClassifier.from_config(model.get_config())
    restored.set_weights(model.get_weights())
    np.testing.assert_allclose(
        restored.predict(x[:10], verbose=0)["uncertainty"], out["uncertainty"], atol=1e-6
    )


@requires_jit
def test_trains_end_to_end_with_jit_compile():
    keras.utils.set_random_seed(0)
    model = LossPredictionImageClassifier.from_keras_hub(vit(), head_hidden_units=(16, 16))
    model.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=jit_compile())
    x, y = ez.datasets.load_arrays("digits", "train")
    history = model.fit(x[:256], y[:256], batch_size=32, epochs=3, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert history.history["loss"][-1] < history.history["loss"][0]


def test_zero_initialized_head_cannot_learn():
    """The paper's negative control (Table 3, R-AUROC 0.500): with zero
    weights every pair gets equal scores, so all head gradients vanish."""
    model = frozen_model(units=(16, 16))
    for w in model.uncertainty_head.weights:
        w.assign(np.zeros(w.shape, "float32"))
    model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=jit_compile())
    x, y = ez.datasets.load_arrays("digits", "train")
    model.fit(x[:128], y[:128], batch_size=32, epochs=2, verbose=0)
    assert all(np.all(to_np(w) == 0) for w in model.uncertainty_head.weights)
    scores = model.predict(x[:64], verbose=0)["uncertainty"]
    assert np.all(scores == scores[0])


def test_frozen_classifier_drops_the_cross_entropy_as_the_reference_does():
    """`ce_loss_multiplier = 1 - freeze_classifier` in the authors' code: a
    trainable backbone under a frozen classifier and no stop-gradient gets
    the uncertainty loss's gradient only."""
    keras.utils.set_random_seed(0)
    model = LossPredictionImageClassifier.from_keras_hub(
        vit(), head_hidden_units=(16, 16), freeze_classifier=True, stop_gradient=False
    )
    x, y = ez.datasets.load_arrays("digits", "train")
    x, y = x[:16], y[:16]

    def uncertainty_only(labels, outputs):
        per_sample = keras.losses.sparse_categorical_crossentropy(
            labels, outputs["logits"], from_logits=True
        )
        return ez.losses.pairwise_ranking_loss(
            ops.stop_gradient(per_sample), outputs["uncertainty"], 0.1
        )

    def objective(labels, outputs):
        return model.compute_loss(y=labels, y_pred=outputs)

    variables = model.backbone.trainable_variables
    expected = loss_gradients(model, uncertainty_only, x, y, variables)
    actual = loss_gradients(model, objective, x, y, variables)
    for a, b, v in zip(actual, expected, variables):
        np.testing.assert_allclose(a, b, atol=1e-8, err_msg=v.path)
    assert max(np.abs(g).max() for g in actual) > 0

"""The zoo's classifiers as keras-hub tasks: class hierarchy, and the
preprocessor they take over from a keras-hub model (raw images in)."""

import keras
import keras_hub
import numpy as np
import pytest
from keras import ops
from zoo_testing import tiny_vit
from zoo_testing import to_np

import ensemble_zoo as ez
from ensemble_zoo.models.method_registry import registered_methods

#: Every registered method's tasks (`ensemble_zoo.models.method_registry`).
TASKS = [task for method in registered_methods().values() for task in method.tasks]


def vit_with_preprocessor(seed=0, pooling="token"):
    converter = keras_hub.layers.ViTImageConverter(image_size=(8, 8), scale=1 / 255.0)
    preprocessor = keras_hub.models.ViTImageClassifierPreprocessor(image_converter=converter)
    return tiny_vit(
        seed,
        num_classes=4,
        pooling=pooling,
        preprocessor=preprocessor,
        dropout_rate=0.0,
        attention_dropout=0.0,
        layer_norm_epsilon=1e-6,
    )


def by_hand(raw):
    """Resize to 8 x 8 (bilinear, centre crop to the aspect ratio) and
    rescale by 1/255, as the converter is configured."""
    x = keras.ops.image.resize(
        raw.astype("float32"), (8, 8), interpolation="bilinear", crop_to_aspect_ratio=True
    )
    return to_np(x) / 255.0


@pytest.fixture(scope="module")
def raw_images():
    return np.random.default_rng(0).integers(0, 256, (6, 16, 12, 1)).astype("uint8")


def test_every_task_is_a_keras_hub_task_of_its_kind():
    """Named `...TextClassifier` / `...CausalLM`: that keras-hub task; a
    loss predictor on a causal LM (`...Predictor`): a keras-hub task; any
    other classifier (images, or models that take images): an image
    classifier."""
    kinds = {
        "TextClassifier": keras_hub.models.TextClassifier,
        "CausalLM": keras_hub.models.CausalLM,
        "Predictor": keras_hub.models.Task,
    }
    assert len(TASKS) >= 15
    for task in TASKS:
        assert getattr(ez.models, task.__name__) is task, task
        kind = next((k for k in kinds if task.__name__.endswith(k)), None)
        expected = kinds.get(kind, keras_hub.models.ImageClassifier)
        assert issubclass(task, expected), task


def test_deep_ensemble_is_a_functional_task_of_copies():
    """A deep ensemble of keras-hub tasks is a functional keras-hub task
    (it was a subclassed model kept out of Keras' functional classes by a
    metaclass); its members are copies, the given models unchanged."""
    from keras.src.models.functional import Functional

    vit = vit_with_preprocessor()
    ensemble = ez.models.DeepEnsembleClassifier.from_keras_hub(vit, num_members=2)
    assert isinstance(ensemble, Functional) and isinstance(ensemble.backbone, Functional)
    given = [vit_with_preprocessor(seed=1), vit_with_preprocessor(seed=2)]
    copies = ez.models.DeepEnsembleClassifier(given).members
    assert all(c is not g for c, g in zip(copies, given))
    assert [w.path.split("/")[0] for w in copies[1].weights][:1] == ["members_1"]
    x = np.random.default_rng(1).random((3, 8, 8, 1)).astype("float32")
    expected = np.stack([to_np(m(x)) for m in given], axis=1)
    np.testing.assert_allclose(
        to_np(ez.models.DeepEnsembleClassifier(given)(x)), expected, atol=1e-6
    )


def test_predict_on_raw_images_equals_preprocessing_by_hand(raw_images):
    vit = vit_with_preprocessor()
    hydra = ez.models.HydraImageClassifier.from_keras_hub(vit)
    lora = ez.models.LoRAEnsembleImageClassifier.from_keras_hub(vit, num_members=2, rank=2)
    x = by_hand(raw_images)
    for model in (hydra, lora):
        assert model.preprocessor is vit.preprocessor
        np.testing.assert_allclose(model.predict(raw_images, verbose=0), to_np(model(x)), atol=1e-5)
    # The keras-hub model's own pipeline on the same raw images.
    np.testing.assert_allclose(
        hydra.predict(raw_images, verbose=0)[:, 0], vit.predict(raw_images, verbose=0), atol=1e-5
    )
    out = hydra.predict_uncertainty(raw_images)
    np.testing.assert_allclose(out["probabilities"], to_np(keras.ops.softmax(vit(x))), atol=1e-5)
    # The loss-prediction model takes the preprocessor over too.
    loss_model = ez.models.LossPredictionImageClassifier.from_keras_hub(vit)
    assert loss_model.preprocessor is vit.preprocessor
    expected = {key: to_np(value) for key, value in loss_model(x).items()}
    # uint8 images, as arrays and as backend tensors, resized in float.
    for outputs in (
        loss_model.predict(raw_images, verbose=0),
        loss_model.predict_on_batch(raw_images),
        loss_model.predict_on_batch(ops.convert_to_tensor(raw_images)),
    ):
        for key, value in outputs.items():
            np.testing.assert_allclose(to_np(value), expected[key], atol=1e-5)
    # Images already scaled to [0, 1] would be rescaled again: an error,
    # from every entry point (the models share them).
    y = np.zeros(len(x), "int32")
    for model in (hydra, loss_model):
        with pytest.raises(ValueError, match=r"already scaled to \[0, 1\]"):
            model.predict(x, verbose=0)
        for call in (
            lambda: model.predict_on_batch(x),
            lambda: model.test_on_batch(x, y),
            lambda: model.train_on_batch(x, y),
        ):
            with pytest.raises(ValueError, match="already scaled"):
                call()


def test_wrappers_take_over_the_preprocessor(raw_images):
    vit = vit_with_preprocessor(pooling="gap")
    x = by_hand(raw_images)
    models = [
        ez.models.DeepEnsembleClassifier.from_model(vit, num_members=2),
        ez.models.SubnetworkEnsembleClassifier.from_model(vit, num_members=2, seed=0),
        ez.models.TileEnsembleClassifier.from_keras_hub(vit, grid_size=2),
        ez.models.MCDropoutClassifier.from_model(vit, num_members=2, rate=0.0, seed=0),
    ]
    for model in models:
        assert model.preprocessor is vit.preprocessor, type(model).__name__
        np.testing.assert_allclose(
            model.predict(raw_images, verbose=0),
            to_np(model(x)),
            atol=1e-5,
            err_msg=type(model).__name__,
        )


def test_preprocessor_survives_config_preset_and_member_round_trips(raw_images, tmp_path):
    vit = vit_with_preprocessor()
    model = ez.models.HydraImageClassifier.from_keras_hub(vit)
    copy = ez.models.HydraImageClassifier.from_config(model.get_config())
    assert copy.preprocessor.image_converter.image_size == (8, 8)
    model.save_to_preset(str(tmp_path / "preset"))
    loaded = ez.models.EnsembleClassifier.from_preset(str(tmp_path / "preset"))
    expected = model.predict(raw_images, verbose=0)
    np.testing.assert_allclose(loaded.predict(raw_images, verbose=0), expected, atol=1e-6)
    # Hydra's member conversions carry it too: split, then fuse again.
    members = model.split_members()
    assert all(m.preprocessor is model.preprocessor for m in members)
    fused = ez.models.HydraImageClassifier.fuse(members)
    np.testing.assert_allclose(fused.predict(raw_images, verbose=0), expected, atol=1e-5)


@pytest.mark.parametrize("method", ["hydra", "mimo"])
def test_fit_on_raw_images_equals_fit_on_preprocessed_images(raw_images, method):
    """Hydra goes through keras-hub's pipeline; MIMO preprocesses before
    it stacks its inputs (its own batches, seeded)."""
    labels = np.arange(len(raw_images)) % 4
    vit = vit_with_preprocessor()

    def build():
        if method == "mimo":
            return ez.models.MIMOImageClassifier.from_keras_hub(vit, num_members=2, seed=0)
        return ez.models.HydraImageClassifier.from_keras_hub(vit)

    raw_model, plain = build(), build()
    plain.preprocessor = None
    for model in (raw_model, plain):
        model.compile(optimizer=keras.optimizers.SGD(0.1))
    raw_model.fit(raw_images, labels, batch_size=6, epochs=1, shuffle=False, verbose=0)
    plain.fit(by_hand(raw_images), labels, batch_size=6, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(raw_model.weights, plain.weights):
        np.testing.assert_allclose(to_np(a), to_np(b), atol=1e-5)
    fresh = build()
    assert not np.allclose(to_np(raw_model.head.kernel), to_np(fresh.head.kernel))


@pytest.mark.parametrize(
    # Every trained preset loads through keras-hub in test_presets.py.
    "name",
    ["hydra_circuit_vit_tiny_digits", "e3_vit_tiny_digits"],
)
def test_keras_hub_saves_and_loads_tasks_with_zoo_backbones(name, tmp_path):
    """keras-hub's own `Task.save_to_preset` writes its layout (config.json
    = our backbone, task.json, weights split in two), and its base-class
    loaders return our classes with the same predictions, bit for bit."""
    model = ez.models.EnsembleClassifier.from_preset(name)
    keras_hub.models.Task.save_to_preset(model, str(tmp_path))
    loaded = keras_hub.models.ImageClassifier.from_preset(str(tmp_path))
    assert type(loaded) is type(model)
    backbone = keras_hub.models.Backbone.from_preset(str(tmp_path))
    assert type(backbone) is type(model.backbone) and type(backbone) is model.backbone_cls
    raw, _ = ez.datasets.load_arrays("digits", "test", raw=True)
    assert loaded.preprocessor.image_converter.scale == 1 / 16
    np.testing.assert_array_equal(
        loaded.predict(raw[:64], verbose=0), model.predict(raw[:64], verbose=0)
    )

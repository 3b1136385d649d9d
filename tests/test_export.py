"""SavedModel export of the base preset, and the PyTorch path to it."""

import keras
import numpy as np
import pytest

import ensemble_zoo as ez
from conftest import BACKEND
from conftest import requires_saved_model
from conftest import run_python

KEYS = ("probabilities", "member_logits", "total", "aleatoric", "epistemic")
# Baselines whose layers (grouped attention, tiling, reshapes) the other
# presets already export under JAX.
TENSORFLOW_ONLY = (
    "masksembles_vit_tiny_digits",
    "mimo_vit_tiny_digits",
    "subnetwork_vit_tiny_digits",
    "tile_vit_tiny_digits",
)


def check_saved_model(path, model, x, raw=None):
    """The SavedModel serves what calling the model takes (`x`: images
    in [0, 1]; no preprocessing, as keras-hub exports); `predict` of a
    model with an image converter takes the raw images `raw`."""
    import tensorflow as tf

    expected = model.predict_uncertainty(x if raw is None else raw)
    loaded = tf.saved_model.load(path)
    served = loaded.serve(tf.constant(x))
    for key in KEYS:
        np.testing.assert_allclose(served[key].numpy(), expected[key], atol=1e-5)
    if raw is not None:
        # The documented way to serve raw images: the preprocessor first.
        ready = keras.ops.convert_to_numpy(model.preprocessor(raw))
        got = loaded.serve(tf.constant(ready))["probabilities"].numpy()
        np.testing.assert_allclose(got, expected["probabilities"], atol=1e-5)
    # Any batch size works.
    assert loaded.serve(tf.constant(x[:3]))["probabilities"].shape == (3, 8)


@requires_saved_model
@pytest.mark.parametrize(
    "name",
    [
        "vit_tiny_digits",
        "deep_ensemble_vit_tiny_digits",
        "hydra_circuit_vit_tiny_digits",
        "lora_ensemble_vit_tiny_digits",
        "batch_ensemble_vit_tiny_digits",
        "packed_ensemble_vit_tiny_digits",
        "masksembles_vit_tiny_digits",
        "mimo_vit_tiny_digits",
        "subnetwork_vit_tiny_digits",
        "tile_vit_tiny_digits",
    ],
)
def test_saved_model_serves_probabilities_logits_and_uncertainty(tmp_path, name):
    if name in TENSORFLOW_ONLY and BACKEND != "tensorflow":
        pytest.skip("exported under TensorFlow only (test-time budget); the JAX path is the same for every preset")
    model = ez.models.EnsembleClassifier.from_preset(name)
    x, _ = ez.datasets.load_arrays("digits", "near_ood")
    raw, _ = ez.datasets.load_arrays("digits", "near_ood", raw=True)
    path = str(tmp_path / "saved_model")
    model.export(path)
    check_saved_model(path, model, x[:64], raw[:64])


@pytest.mark.skipif(BACKEND != "torch", reason="the PyTorch path")
def test_torch_export_is_a_clear_error_and_the_documented_path_works(tmp_path):
    model = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits")
    with pytest.raises(ValueError, match="KERAS_BACKEND=tensorflow"):
        model.export(str(tmp_path / "nope"))
    # The documented path: save under torch, reload under TF, export there.
    preset = str(tmp_path / "trained_under_torch")
    model.save_to_preset(preset)
    x, _ = ez.datasets.load_arrays("digits", "test")
    raw, _ = ez.datasets.load_arrays("digits", "test", raw=True)
    np.save(tmp_path / "x.npy", x[:32])
    np.save(tmp_path / "logits.npy", model.predict(raw[:32], verbose=0))
    out = run_python(
        f"""
import numpy as np, tensorflow as tf, ensemble_zoo as ez
model = ez.models.EnsembleClassifier.from_preset({preset!r})
model.export({str(tmp_path / "saved_model")!r})
served = tf.saved_model.load({str(tmp_path / "saved_model")!r})
x = np.load({str(tmp_path / "x.npy")!r})
got = served.serve(tf.constant(x))["member_logits"].numpy()
print("max_abs_diff", np.abs(got - np.load({str(tmp_path / "logits.npy")!r})).max())
""",
        backend="tensorflow",
    )
    diff = float(out.split("max_abs_diff")[-1])
    assert diff <= 1e-5

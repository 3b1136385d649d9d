"""Adds the digits image converter to the trained digits presets.

The presets were trained on the [0, 1] digits. This script loads each
one, attaches `ensemble_zoo.datasets.image_preprocessor("digits")` (a
keras-hub `ViTImageConverter`: resize to 8x8, divide by 16) and saves it
again with its metadata (description, recipe, metrics) unchanged, so that
`predict` takes raw images of any size, as a keras-hub task does. Before
writing, it checks that `predict` on the raw test images equals the preset's
former `predict` on the [0, 1] images bit for bit and reproduces the recorded metrics.

Run from the repository root (any backend; the weights do not change):

    python presets/add_digits_image_converter.py
"""

import os

import numpy as np

import ensemble_zoo as ez

HERE = os.path.dirname(os.path.abspath(__file__))
#: Keys `save_preset` writes afresh (checksums, layout, size).
RECOMPUTED = ("weights_sha256", "task_weights_sha256", "layout", "parameter_count")


def add_converter(name):
    """Adds the converter to the preset `name` (in this folder) or at a path."""
    path = name if os.path.isdir(name) else os.path.join(HERE, name)
    metadata = ez.presets.preset_metadata(path)
    loaded = ez.presets.load_preset(path)

    def rebuilt(preprocessor):
        # A built model takes no new sub-layers: rebuild it from its
        # config with the preprocessor, then copy the weights.
        config = {**loaded.get_config(), "preprocessor": preprocessor}
        model = type(loaded).from_config(config)
        model.set_weights(loaded.get_weights())
        return model

    trained = rebuilt(None)  # as trained: takes the [0, 1] images
    model = rebuilt(ez.datasets.image_preprocessor("digits"))
    x, y = ez.datasets.load_arrays("digits", "test")
    raw, _ = ez.datasets.load_arrays("digits", "test", raw=True)
    if metadata["class_name"] != "MCDropoutClassifier":  # sampled per call
        # Logits (a dict of logits and uncertainty for loss prediction).
        np.testing.assert_equal(
            model.predict(raw, batch_size=256, verbose=0),
            trained.predict(x, batch_size=256, verbose=0),
        )
    probs = model.predict_uncertainty(raw, batch_size=256)["probabilities"]
    accuracy = ez.metrics.accuracy(probs, y)
    assert round(accuracy, 4) == metadata["metrics"]["test_accuracy"], (name, accuracy)
    kept = {k: v for k, v in metadata.items() if k not in RECOMPUTED}
    model.save_to_preset(path, metadata=kept)
    print(name, "accuracy on raw images", round(accuracy, 4))


def main():
    for name in ez.evaluation.trained_presets() + ["loss_prediction_vit_tiny_digits"]:
        add_converter(name)


if __name__ == "__main__":
    main()

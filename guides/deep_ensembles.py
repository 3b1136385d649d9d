"""
Title: Deep ensembles of keras-hub models with ensemble_zoo
Author: ensemble_zoo developers
Date created: 2026/11/21
Last modified: 2026/11/21
Description: Stack keras-hub classifiers into a deep ensemble, train it with one fit, and read its uncertainty.
"""

"""
## Introduction

A deep ensemble trains several copies of a network from different random
initializations and averages their predictions. It is the reference every
efficient ensemble in `ensemble_zoo` is measured against. This guide:

1. loads the bundled digits data (with near- and far-OOD splits),
2. builds a 3-member deep ensemble from a keras-hub ViT and trains it with one
   `fit`,
3. compares the shipped single ViT with the shipped 3-member ensemble on
   accuracy, calibration and out-of-distribution detection,
4. saves the ensemble as a preset and exports it to ONNX.

It runs in about a minute on a laptop CPU with any Keras backend.
"""

"""
## Setup
"""

import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import ensemble_zoo as ez
import keras
import keras_hub
import numpy as np

"""
## Data

`digits` ships inside the package: 8x8 grey images of the digits 0-7 for
training and testing, the digits 8 and 9 as near-OOD inputs and patches of
natural photos as far-OOD inputs. `ez.datasets.load` returns `tf.data`
pipelines; `load_arrays` returns NumPy arrays.
"""

train = ez.datasets.load("digits", "train", batch_size=64, shuffle=True)
x_test, y_test = ez.datasets.load_arrays("digits", "test")
x_near, _ = ez.datasets.load_arrays("digits", "near_ood")
x_far, _ = ez.datasets.load_arrays("digits", "far_ood")
print(x_test.shape, x_near.shape, x_far.shape)

"""
## Build a deep ensemble from a keras-hub classifier

`DeepEnsembleClassifier.from_model` copies the architecture of any Keras
classifier `num_members` times, re-initializing member `m` with seed
`seed + m`. The ensemble returns per-member logits
`(batch, members, classes)`; its default loss trains each member on its own
cross-entropy.
"""

backbone = keras_hub.models.ViTBackbone(
    image_shape=(8, 8, 1), patch_size=2, num_layers=2, num_heads=4, hidden_dim=32, mlp_dim=64
)
classifier = keras_hub.models.ViTImageClassifier(
    backbone=backbone, num_classes=8, preprocessor=None
)
ensemble = ez.models.DeepEnsembleClassifier.from_model(classifier, num_members=3, seed=0)
ensemble.compile(jit_compile=keras.config.backend() != "torch")
ensemble.fit(train, epochs=3, verbose=2)
print("member logits:", ensemble.predict(x_test[:2], verbose=0).shape)

"""
## The shipped presets: one ViT against three

The presets were trained for 150 epochs by `presets/make_vit_tiny_digits.py`;
member 0 of the ensemble is the single model. Epistemic uncertainty (the
mutual information between prediction and member) separates
in-distribution from OOD inputs; a single model has none, so it can only use
its maximum softmax probability.

Like every keras-hub task, a preset carries its preprocessor: its
`predict` and `predict_uncertainty` take raw images of any size, here the
digits on their raw pixel scale (ink counts 0-16, `raw=True`), which its
image converter resizes to 8x8 and divides by 16.
"""

raw = {
    split: ez.datasets.load_arrays("digits", split, raw=True)[0]
    for split in ("test", "near_ood", "far_ood")
}


ood_auroc = ez.metrics.ood_auroc  # higher score = more OOD; exact, like sklearn

for name in ("vit_tiny_digits", "deep_ensemble_vit_tiny_digits"):
    model = ez.models.EnsembleClassifier.from_preset(name)
    test = model.predict_uncertainty(raw["test"])
    near = model.predict_uncertainty(raw["near_ood"])
    far = model.predict_uncertainty(raw["far_ood"])
    probs = test["probabilities"]
    msp = [-out["probabilities"].max(1) for out in (test, near, far)]
    print(
        f"{name}: accuracy {ez.metrics.accuracy(probs, y_test):.4f}, "
        f"NLL {ez.metrics.negative_log_likelihood(probs, y_test):.4f}, "
        f"ECE {ez.metrics.expected_calibration_error(probs, y_test):.4f}, "
        f"MSP AUROC near {ood_auroc(msp[0], msp[1]):.3f} "
        f"far {ood_auroc(msp[0], msp[2]):.3f}"
    )
    if model.num_members > 1:
        print(
            f"  MI AUROC near {ood_auroc(test['epistemic'], near['epistemic']):.3f}"
            f" far {ood_auroc(test['epistemic'], far['epistemic']):.3f}"
        )

"""
## Save, reload and export

`save_to_preset` writes a preset in keras-hub's layout (`config.json` and
`model.weights.h5` for the `DeepEnsembleBackbone` that holds the members,
`task.json`, `metadata.json`), which keras-hub's own
`keras_hub.models.ImageClassifier.from_preset` loads too; the weights load
under any backend. `export` writes every format its backend supports
(SavedModel, ONNX, LiteRT, `.pt2`, OpenVINO; ONNX from all three), each
serving `probabilities`, `member_logits`, `total`, `aleatoric` and
`epistemic`, and checks the artifact in its own runtime first;
`ez.export.ExportedModel` runs it there.
"""

ensemble.save_to_preset("my_deep_ensemble")
restored = ez.models.EnsembleClassifier.from_preset("my_deep_ensemble")
np.testing.assert_allclose(
    restored.predict(x_test, verbose=0), ensemble.predict(x_test, verbose=0), atol=1e-5
)

restored.export("my_deep_ensemble.onnx", format="onnx")
served = ez.export.ExportedModel("my_deep_ensemble.onnx")  # ONNX Runtime
outputs = served(x_test[:4])
print({key: value.shape for key, value in outputs.items()})

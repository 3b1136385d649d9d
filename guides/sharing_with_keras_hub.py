"""
Title: Sharing ensembles the keras-hub way: presets, raw images, hubs
Author: ensemble_zoo developers
Date created: 2026/11/23
Last modified: 2026/11/23
Description: Load zoo presets with keras-hub's own loader, predict on raw images through the preprocessor a model inherits, save and publish presets to Hugging Face or Kaggle.
"""

"""
## Introduction

Every zoo classifier is a keras-hub task (`keras_hub.models.ImageClassifier`
or `TextClassifier`) whose backbone class names the method
(`HydraBackbone`, `LoRAEnsembleViTBackbone`, `DeepEnsembleBackbone`, ...),
and every preset is in keras-hub's layout. So the tools keras-hub users
already know work unchanged:

1. `keras_hub.models.ImageClassifier.from_preset(...)` returns the zoo's
   class from a zoo preset;
2. a model made `from_keras_hub(...)` keeps the source task's
   preprocessor, so `predict` takes raw `uint8` images of any size;
3. `save_to_preset` writes a directory that `keras_hub.upload_preset`
   publishes, and `from_preset("hf://...")` / `"kaggle://..."` load it
   back through keras-hub's downloader and cache;
4. presets written before this layout convert in one call.

It runs in about a minute on a laptop CPU with any Keras backend.
"""

"""
## Setup
"""

import os
import tempfile

os.environ.setdefault("KERAS_BACKEND", "jax")

import ensemble_zoo as ez
import keras
import keras_hub
import numpy as np

x_test, y_test = ez.datasets.load_arrays("digits", "test")
# The digits on their raw pixel scale (ink counts 0-16), what the shipped
# presets' image converter takes.
raw_test, _ = ez.datasets.load_arrays("digits", "test", raw=True)

"""
## keras-hub's loader returns the zoo's classes

A shipped preset is a directory in keras-hub's layout: `config.json` (the
backbone), `model.weights.h5`, `task.json` (the classifier),
`task.weights.h5`, the preprocessor (`preprocessor.json`,
`image_converter.json`) and `metadata.json`, which adds the method, the
members and the test metrics to keras-hub's fields. keras-hub picks the
task class from the backbone class in `config.json`. As with any
keras-hub task, `predict` takes raw images of any size: the image
converter resizes them to 8x8 and divides the digits' 0-16 pixel values
by 16; calling the model directly takes the [0, 1] images.
"""

path = ez.presets.get_preset_path("lora_ensemble_vit_tiny_digits")
print(sorted(os.listdir(path)))
lora = keras_hub.models.ImageClassifier.from_preset(path)
print(type(lora).__name__, type(lora.backbone).__name__)
probs = lora.predict_uncertainty(raw_test)["probabilities"]
print(f"LoRA-Ensemble test accuracy {ez.metrics.accuracy(probs, y_test):.4f}")
np.testing.assert_allclose(
    lora.predict(raw_test[:8], verbose=0), keras.ops.convert_to_numpy(lora(x_test[:8])), atol=1e-5
)

"""
## Raw images in: the preprocessor comes along

A keras-hub task carries its preprocessor; for a ViT, an image converter
that resizes and rescales. A member of a preset has none (the ensemble
holds it). Give the tiny ViT one for `uint8` images (the digits rendered
at 0-255), and every ensemble made from it with
`from_keras_hub` takes it over: `predict`, `fit` and `evaluate` then accept
raw images of any size, exactly as the keras-hub model does.
"""

vit = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits").members[0]
converter = keras_hub.layers.ViTImageConverter(image_size=(8, 8), scale=1 / 255.0)
vit.preprocessor = keras_hub.models.ViTImageClassifierPreprocessor(image_converter=converter)

ensemble = ez.models.LoRAEnsembleImageClassifier.from_keras_hub(vit, num_members=4, rank=2, seed=0)
raw = np.round(x_test * 255).astype("uint8")
raw_16 = raw.repeat(2, axis=1).repeat(2, axis=2)  # 16x16 images
sample = raw_16[:32]
# By hand: resize to 8x8 and rescale, then call the model (a direct call
# does not preprocess, as in keras-hub).
by_hand = keras.ops.convert_to_numpy(ensemble(converter(sample)))
np.testing.assert_allclose(ensemble.predict(sample, verbose=0), by_hand, atol=1e-5)
probs = ensemble.predict_uncertainty(raw_16)["probabilities"]
print(f"On raw 16x16 uint8 images: accuracy {ez.metrics.accuracy(probs, y_test):.4f}")

"""
## Save, reload, publish

`save_to_preset` writes keras-hub's layout, the preprocessor's files
included. keras-hub's loader reads it back; `keras_hub.upload_preset`
publishes the directory as it is (authenticate with
`huggingface-cli login` or Kaggle's API key first):

```python
keras_hub.upload_preset("hf://your-user/lora_vit_digits", directory)
keras_hub.upload_preset("kaggle://your-user/lora-ensemble/keras/vit_digits", directory)

# Anyone then loads it with keras-hub or the zoo, from the download cache
# after the first time:
model = keras_hub.models.ImageClassifier.from_preset("hf://your-user/lora_vit_digits")
model = ez.models.EnsembleClassifier.from_preset("hf://your-user/lora_vit_digits")
```
"""

directory = os.path.join(tempfile.mkdtemp(), "lora_vit_digits")
ensemble.save_to_preset(directory, metadata={"description": "LoRA-Ensemble of vit_tiny_digits"})
print(sorted(os.listdir(directory)))
restored = keras_hub.models.ImageClassifier.from_preset(directory)
np.testing.assert_array_equal(
    restored.predict(sample, verbose=0), ensemble.predict(sample, verbose=0)
)
print(ez.presets.preset_metadata(directory)["description"])

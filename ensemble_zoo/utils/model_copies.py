"""Copying and serializing the Keras models that ensembles wrap."""

import keras


def copy_model(model):
    """A copy of `model`: same class, config and weights.

    keras-hub tasks lose their preprocessor (the zoo's datasets are
    preprocessed already).
    """
    config = model.get_config()
    if "preprocessor" in config:
        config["preprocessor"] = None
    clone = model.__class__.from_config(config)
    clone.set_weights(model.get_weights())
    return clone



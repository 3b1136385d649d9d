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


def copy_preprocessor(preprocessor):
    """A new preprocessor with `preprocessor`'s settings (`sequence_length`,
    start and end tokens, ...) sharing its tokenizer and converters (they
    hold the vocabulary and are not changed by use); `None` for `None`."""
    if preprocessor is None:
        return None
    config = preprocessor.get_config()
    for name in ("tokenizer", "image_converter", "audio_converter", "video_converter"):
        if name in config:
            config[name] = getattr(preprocessor, name, None)
    return type(preprocessor).from_config(config)

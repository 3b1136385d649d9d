"""Changing built keras-hub models in place: freezing and swapping sublayers.

LoRA-Ensemble adapters and subnetwork masks attach to layers that live
inside custom keras-hub layers (attention projections, MLP blocks), which
`keras.models.clone_model` cannot reach; these helpers are the one
place that does it.
"""

import keras


def freeze_weights(model):
    """Makes every weight of `model` non-trainable, layer by layer.

    Only layers that own variables are frozen; containers stay trainable,
    so that layers added to them later (adapters, masks) train.
    """
    for layer in model._flatten_layers(include_self=False):
        if layer._trainable_variables or layer._non_trainable_variables:
            layer.trainable = False


def set_trainable(layer, value):
    """Sets `layer.trainable = value` on `layer` and all its sublayers.

    Under TensorFlow, assigning a layer the `trainable` value it already
    has does not reach its sublayers, and a keras-hub backbone deserialized
    with `"trainable": false` (as a saved frozen backbone is) starts with
    `trainable == False` on the container only: its sublayers and variables
    stay trainable, so `model.trainable_variables` listed the whole frozen
    ViT. Flipping the flag first makes Keras propagate it on every backend.
    """
    value = bool(value)
    layer.trainable = not value
    layer.trainable = value


def replace_sublayer(parent, attribute, new_layer):
    """Sets `parent.<attribute> = new_layer` on a built layer.

    Keras locks a built layer's state tracking, so the swap unlocks it;
    `new_layer` takes the old layer's place among `parent`'s tracked
    sublayers (so the weights keep their order), and the old layer is
    dropped from them (it usually lives on inside `new_layer`, which wraps
    it).
    """
    old_layer = getattr(parent, attribute)
    position = next((i for i, l in enumerate(parent._layers) if l is old_layer), None)
    parent._tracker.unlock()
    try:
        setattr(parent, attribute, new_layer)
        if position is not None:
            parent._layers.remove(old_layer)
            if parent._layers and parent._layers[-1] is new_layer:
                parent._layers.insert(position, parent._layers.pop())
    finally:
        parent._tracker.lock()
    return old_layer


def sublayers(layer):
    """`(attribute, sublayer)` pairs held directly by `layer`'s attributes
    (under PyTorch Keras keeps them in the module's `_modules`)."""
    names = dict.fromkeys(vars(layer))
    names.update(dict.fromkeys(vars(layer).get("_modules", {})))
    for name in names:
        value = getattr(layer, name, None)
        if isinstance(value, keras.layers.Layer) and value is not layer:
            yield name, value

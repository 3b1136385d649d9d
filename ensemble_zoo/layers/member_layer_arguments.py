"""The arguments that the member-axis layers (`GroupedDense`,
`GroupedLayerNormalization`, `HydraAttention`, `BatchEnsembleDense`)
share: their checks, their per-member bias and their config entries."""

import keras

from ensemble_zoo.layers.member_initializer import MemberInitializer
from ensemble_zoo.utils.validation import check_bool
from ensemble_zoo.utils.validation import check_positive_int

#: The constructor arguments of the member-axis layers (`GroupedDense`,
#: `GroupedLayerNormalization`, `HydraAttention`, `BatchEnsembleDense`)
#: that name a Keras object, with the module that gets and serializes it.
KERAS_OBJECT_ARGUMENTS = {
    "activation": keras.activations,
    "kernel_initializer": keras.initializers,
    "bias_initializer": keras.initializers,
    "beta_initializer": keras.initializers,
    "gamma_initializer": keras.initializers,
    "kernel_regularizer": keras.regularizers,
    "bias_regularizer": keras.regularizers,
}


def set_member_layer_arguments(layer, arguments):
    """Checks and sets as attributes the arguments that the member-axis
    layers share, taken from `arguments` (the constructor's `locals()`):
    `num_members` (a positive int), `use_bias` (a bool) where the layer
    has it, and each Keras object of `KERAS_OBJECT_ARGUMENTS` that it
    takes, got from its name (e.g. `keras.initializers.get("zeros")`)."""
    layer.num_members = check_positive_int(arguments["num_members"], "num_members")
    if "use_bias" in arguments:
        layer.use_bias = check_bool(arguments["use_bias"], "use_bias")
    for name, module in KERAS_OBJECT_ARGUMENTS.items():
        if name in arguments:
            setattr(layer, name, module.get(arguments[name]))


def layer_config(layer, names):
    """The config entries `names` of `layer`, read from its attributes;
    those of `KERAS_OBJECT_ARGUMENTS` serialized."""
    config = {name: getattr(layer, name) for name in names}
    for name in KERAS_OBJECT_ARGUMENTS.keys() & config.keys():
        config[name] = KERAS_OBJECT_ARGUMENTS[name].serialize(config[name])
    return config


def add_member_bias(layer, units, regularizer=None):
    """The per-member bias `"bias"` `(num_members, units)` of `layer` (from
    its `num_members`, `use_bias` and `bias_initializer`, each member's
    initialized independently), or `None` without `use_bias`."""
    if not layer.use_bias:
        return None
    return layer.add_weight(
        name="bias",
        shape=(layer.num_members, units),
        initializer=MemberInitializer(layer.bias_initializer),
        regularizer=regularizer,
    )

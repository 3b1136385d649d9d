"""The two GELU variants of the zoo's models, serializable by name.

ViT (keras-hub) uses the exact erf GELU; BERT and vit_jax / vmoe (the
checkpoints released with "Sparse MoEs meet Efficient Ensembles",
`flax.linen.gelu`) use the tanh approximation. Layers take the names
`"gelu"` / `"gelu_approximate"`.
"""

import keras

GELU_ACTIVATIONS = ("gelu", "gelu_approximate")


@keras.saving.register_keras_serializable(package="ensemble_zoo")
def gelu_exact(x):
    """The exact GELU, `x * Phi(x)` (keras-hub's ViT)."""
    return keras.activations.gelu(x, approximate=False)


@keras.saving.register_keras_serializable(package="ensemble_zoo")
def gelu_approximate(x):
    """The tanh approximation of GELU (BERT, vit_jax, vmoe)."""
    return keras.activations.gelu(x, approximate=True)


def gelu_activation(name, argument="activation"):
    """The function for `"gelu"` or `"gelu_approximate"`.

    Args:
        name: `"gelu"` (exact) or `"gelu_approximate"` (tanh).
        argument: the argument's name, for the error message.
    """
    if name == "gelu":
        return gelu_exact
    if name == "gelu_approximate":
        return gelu_approximate
    raise ValueError(f"`{argument}` must be one of {GELU_ACTIVATIONS}; got {name!r}.")

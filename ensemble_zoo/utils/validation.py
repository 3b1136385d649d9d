"""Shape and dtype checks shared by layers, ops, losses and models.

Every check raises a `ValueError` that names the argument, the expected
shape or value, and what was received, so that bad input fails at the
boundary instead of deep inside an einsum.
"""

import numbers

import keras
import numpy as np


def static_shape(x):
    """Returns the static shape of a tensor, array or KerasTensor as a tuple."""
    shape = getattr(x, "shape", None)
    if shape is None:
        raise ValueError(
            f"Expected a tensor or array, got an object of type {type(x)}."
        )
    # Unknown and symbolic dimensions (e.g. a polymorphic batch axis while
    # exporting under JAX) become None.
    return tuple(d if isinstance(d, int) else None for d in shape)


def static_rank(x):
    """The number of axes of `x`, or `None` where it is unknown (a
    TensorFlow step retraced with relaxed shapes can see labels of unknown
    rank)."""
    try:
        return len(x.shape)
    except (TypeError, ValueError):
        return None


def check_rank(x, rank, name, layout):
    """Raises unless `x` has exactly `rank` axes.

    Args:
        x: tensor to check.
        rank: int, the expected number of axes.
        name: str, the argument name used in the message.
        layout: str, the expected layout, e.g. `"(batch, members, classes)"`.
    """
    shape = static_shape(x)
    if len(shape) != rank:
        raise ValueError(
            f"`{name}` must have shape {layout} (rank {rank}); "
            f"got shape {shape} (rank {len(shape)})."
        )
    return shape


def check_floating(x, name):
    """Raises unless `x` has a floating-point dtype."""
    dtype = keras.backend.standardize_dtype(x.dtype)
    if "float" not in dtype:
        raise ValueError(
            f"`{name}` must be a floating-point tensor; got dtype {dtype}."
        )
    return dtype


def is_integer(value):
    """Whether `value` is an integer number: a Python or NumPy int, not a
    bool (NumPy scalars are accepted wherever Python numbers are)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def check_positive_int(value, name):
    """Returns `value` as a Python int; raises unless it is an integer >= 1
    (Python or NumPy; bools are rejected)."""
    if not is_integer(value) or value < 1:
        raise ValueError(
            f"`{name}` must be a positive integer; got {value!r}."
        )
    return int(value)


def check_member_axis_input(layer, input_shape):
    """Checks a `(batch, members, ..., features)` input of a grouped layer.

    `layer` must have `num_members` and `name`; the message names both.
    """
    input_shape = tuple(input_shape)
    owner = f"{type(layer).__name__} '{layer.name}'"
    if len(input_shape) < 3:
        raise ValueError(
            f"{owner} expects inputs of shape (batch, members, ..., "
            f"features) with at least 3 axes; got shape {input_shape}."
        )
    if input_shape[1] is not None and input_shape[1] != layer.num_members:
        raise ValueError(
            f"{owner} was built for num_members={layer.num_members}, but the "
            f"input's member axis (axis 1) has size {input_shape[1]} (input "
            f"shape {input_shape})."
        )
    if input_shape[-1] is None:
        raise ValueError(
            f"{owner} needs a known last axis; got input shape {input_shape}."
        )
    return input_shape

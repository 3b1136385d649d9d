"""Shape and dtype checks shared by layers, ops, losses and models.

Every check raises a `ValueError` that names the argument, the expected
shape or value, and what was received, so that bad input fails at the
boundary instead of deep inside an einsum.
"""

import keras


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


def check_positive_int(value, name):
    """Raises unless `value` is a Python int >= 1 (bools are rejected)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"`{name}` must be a positive integer; got {value!r}."
        )
    return value

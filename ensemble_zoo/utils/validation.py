"""Shape and dtype checks shared by layers, ops, losses and models.

Every check raises a `ValueError` that names the argument, the expected
shape or value, and what was received, so that bad input fails at the
boundary instead of deep inside an einsum.
"""

import math
import numbers
import operator

import keras
import numpy as np


def static_shape(x):
    """Returns the static shape of a tensor, array or KerasTensor as a tuple."""
    shape = getattr(x, "shape", None)
    if shape is None:
        raise ValueError(f"Expected a tensor or array, got an object of type {type(x)}.")
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
        raise ValueError(f"`{name}` must be a floating-point tensor; got dtype {dtype}.")
    return dtype


def is_integer(value):
    """Whether `value` is an integer number: a Python or NumPy int, not a
    bool (NumPy scalars are accepted wherever Python numbers are)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def check_positive_int(value, name):
    """Returns `value` as a Python int; raises unless it is an integer >= 1
    (Python or NumPy; bools are rejected)."""
    if not is_integer(value) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer; got {value!r}.")
    return int(value)


def check_member_axis_input(layer, input_shape, num_members=None):
    """Checks a `(batch, members, ..., features)` input of a grouped layer.

    `layer` must have `num_members` and `name`; the message names both and
    the `inputs` argument. `num_members` (default `layer.num_members`) is
    how many members the layer computes now (1 within `single_member`).
    """
    input_shape = tuple(input_shape)
    expected = layer.num_members if num_members is None else num_members
    owner = f"{type(layer).__name__} '{layer.name}'"
    if len(input_shape) < 3:
        raise ValueError(
            f"{owner} expects `inputs` of shape (batch, members, ..., "
            f"features) with at least 3 axes; got shape {input_shape}."
        )
    if input_shape[1] is not None and input_shape[1] != expected:
        now = "" if expected == layer.num_members else " (one within `single_member`)"
        raise ValueError(
            f"{owner} was built for num_members={layer.num_members}{now}, but its "
            f"`inputs` have {input_shape[1]} members on axis 1 (shape "
            f"{input_shape})."
        )
    if input_shape[-1] is None:
        raise ValueError(f"{owner} needs a known last axis of `inputs`; got shape {input_shape}.")
    return input_shape


def check_same_batch(y_true, y_pred):
    """Raises unless `y_true` and `y_pred` have the same static batch size
    (where both are known): labels longer or shorter than the predictions."""
    if not static_rank(y_true) or not static_rank(y_pred):
        return  # a scalar, or a rank TensorFlow relaxed away: nothing known
    true_batch = static_shape(y_true)[:1]
    pred_batch = static_shape(y_pred)[:1]
    if (
        None not in true_batch + pred_batch
        and true_batch
        and pred_batch
        and true_batch != pred_batch
    ):
        raise ValueError(
            f"`y_true` has {true_batch[0]} labels but `y_pred` has "
            f"{pred_batch[0]} predictions; they must match."
        )


# === Arguments that are not arrays ===


def check_block_indices(indices, num_blocks, name, unit="block"):
    """Block indices to adapt, checked.

    Args:
        indices: `None` (every block), or an iterable of int indices
            (negative ones count from the top; NumPy ints too).
        num_blocks: int, the model's blocks.
        name: the argument's name, for the messages.
        unit: what one block is called in the messages.

    Returns:
        `None`, or a sorted tuple of distinct indices in `[0, num_blocks)`.

    Raises:
        TypeError: `indices` is not an iterable of ints (a bool or float
            index, a string).
        ValueError: an index out of range, a repeated one, or none.
    """
    if indices is None:
        return None
    if isinstance(indices, (str, bytes)) or not hasattr(indices, "__iter__"):
        raise TypeError(
            f"`{name}` must be `None` or a sequence of {unit} indices (e.g. "
            f"`range(num_blocks // 2, num_blocks)`); got {indices!r}."
        )
    given, checked = list(indices), []
    for index in given:
        if isinstance(index, bool) or not hasattr(index, "__index__"):
            raise TypeError(f"`{name}` must hold int {unit} indices; got {index!r}.")
        index = operator.index(index)
        if not -num_blocks <= index < num_blocks:
            raise ValueError(
                f"`{name}` holds {unit} {index}; the model has {num_blocks} {unit}s "
                f"(indices 0 to {num_blocks - 1}, or -{num_blocks} to -1)."
            )
        checked.append(index % num_blocks)
    if not checked or len(set(checked)) != len(checked):
        raise ValueError(f"`{name}` must name distinct {unit}s, at least one; got {given}.")
    return tuple(sorted(checked))


def check_bool(value, name):
    """Returns `value` as a bool; raises unless it is a Python or NumPy bool
    (so that `"yes"` or `2` is not silently read as true)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"`{name}` must be a bool; got {value!r}.")
    return bool(value)


def check_choice(value, name, choices):
    """Returns `value`; raises unless it is one of `choices`."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"`{name}` must be one of {tuple(choices)}; got {value!r}.")
    return value


def check_real(value, name, low=None, high=None, low_open=False, high_open=False):
    """Returns `value` as a Python float; raises unless it is a finite real
    number (Python or NumPy; not a bool) within the given bounds."""
    if not isinstance(value, numbers.Real) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"`{name}` must be a number; got {value!r}.")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"`{name}` must be finite; got {value}.")
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high:
        interval = (
            ("(" if low_open else "[")
            + ("-inf" if low is None else f"{low:g}")
            + ", "
            + ("inf" if high is None else f"{high:g}")
            + (")" if high_open else "]")
        )
        raise ValueError(f"`{name}` must lie in {interval}; got {value:g}.")
    return value


def check_rate(value, name):
    """Returns a dropout-style rate as a float; raises unless it lies in
    [0, 1)."""
    return check_real(value, name, low=0.0, high=1.0, high_open=True)


def check_axis(axis, rank, name="axis"):
    """Returns `axis` as a non-negative int; raises unless it indexes one of
    `rank` axes."""
    if not is_integer(axis):
        raise TypeError(f"`{name}` must be an int; got {axis!r}.")
    if not -rank <= axis < rank:
        raise ValueError(f"`{name}`={axis} is out of range for an input of rank {rank}.")
    return int(axis) % rank


# === Array contents (NumPy arrays and, where values exist, eager tensors) ===

_KIND_NAMES = {
    "c": "complex",
    "O": "object",
    "U": "string",
    "S": "bytes",
    "V": "void",
    "M": "datetime",
    "m": "timedelta",
}


def as_numeric_array(x, name, allow_bool=False):
    """`np.asarray(x)`, raising a `TypeError` that names `name` for None,
    strings, complex numbers and ragged or object arrays."""
    if x is None:
        raise TypeError(f"`{name}` must be an array; got None.")
    if isinstance(x, (str, bytes)):
        raise TypeError(f"`{name}` must be an array of numbers; got a string.")
    try:
        array = np.asarray(x)
    except ValueError as error:  # ragged nested lists
        raise TypeError(f"`{name}` must be a rectangular array of numbers: {error}") from None
    kind = array.dtype.kind
    if kind in _KIND_NAMES or (kind == "b" and not allow_bool):
        what = "bool" if kind == "b" else _KIND_NAMES[kind]
        raise TypeError(
            f"`{name}` must hold real numbers; got an array of dtype {array.dtype} ({what})."
        )
    return array


def check_finite(values, name):
    """Raises a `ValueError` counting the NaN and infinite entries of the
    NumPy array `values` (for float arrays; integers are always finite)."""
    if values.dtype.kind != "f" or np.isfinite(values).all():
        return values
    num_nan = int(np.isnan(values).sum())
    num_inf = int(np.isinf(values).sum())
    parts = [f"{num_nan} NaN"] * bool(num_nan) + [f"{num_inf} infinite"] * bool(num_inf)
    raise ValueError(f"`{name}` contains {' and '.join(parts)} values (of {values.size}).")


def check_logits(values, name, axis=-1):
    """Raises unless the NumPy array `values` holds valid logits along
    `axis`: no NaN, no `+inf`, and at least one finite logit per slice.
    `-inf` is valid: it is how a masked class is written (probability 0)."""
    if values.dtype.kind != "f":
        return values
    num_nan = int(np.isnan(values).sum())
    num_pos = int(np.isposinf(values).sum())
    if num_nan or num_pos:
        parts = [f"{num_nan} NaN"] * bool(num_nan) + [f"{num_pos} +inf"] * bool(num_pos)
        raise ValueError(
            f"`{name}` contains {' and '.join(parts)} values (of "
            f"{values.size}); logits must be finite or -inf (a masked class)."
        )
    if values.size and np.isneginf(values).all(axis=axis).any():
        raise ValueError(
            f"`{name}` has a distribution whose logits are all -inf (every "
            "class masked): at least one class needs a finite logit."
        )
    return values


def check_probability_rows(values, name, axis=-1, atol=1e-3):
    """Raises unless every entry of the NumPy array `values` is in [0, 1]
    and every slice along `axis` sums to 1 (within `atol`)."""
    check_finite(values, name)
    if values.size == 0:
        return values
    low, high = values.min(), values.max()
    if low < 0 or high > 1:
        raise ValueError(
            f"`{name}` must hold probabilities in [0, 1]; got values in "
            f"[{low:.4g}, {high:.4g}]. Pass softmax outputs, not logits (or "
            "set `from_logits=True` where the function offers it)."
        )
    sums = np.sum(values, axis=axis, dtype=np.float64)
    worst = np.unravel_index(np.argmax(np.abs(sums - 1.0)), sums.shape)
    if abs(sums[worst] - 1.0) > atol:
        where = worst[0] if len(worst) == 1 else worst
        raise ValueError(
            f"`{name}` must sum to 1 along axis {axis}; the distribution at "
            f"index {where} sums to {sums[worst]:.6g}."
        )
    return values


def check_nonempty_axes(shape, name, layout, axes):
    """Raises if one of `axes` (a dict of axis index -> axis name) has size 0."""
    for axis, axis_name in axes.items():
        if shape[axis] == 0:
            raise ValueError(
                f"`{name}` must have shape {layout} with at least one "
                f"{axis_name}; got shape {shape}."
            )


def as_tensor(x, name):
    """`x` as a backend tensor, raising a `TypeError` that names `name` for
    None, strings, complex numbers and object arrays instead of a backend
    traceback."""
    if x is None or isinstance(
        x, (str, bytes, np.ndarray, np.generic, list, tuple, numbers.Number)
    ):
        x = as_numeric_array(x, name, allow_bool=True)
    elif not isinstance(x, keras.KerasTensor):
        dtype = keras.backend.standardize_dtype(getattr(x, "dtype", "float32"))
        if "complex" in dtype or dtype == "string":
            raise TypeError(f"`{name}` must hold real numbers; got a tensor of dtype {dtype}.")
    return keras.ops.convert_to_tensor(x)


def check_raw_images(model, x):
    """Rejects images already scaled to [0, 1] given to a task whose
    image converter rescales raw pixel values.

    With a converter that rescales raw pixels (by 1/16 for the digits
    presets, 1/255 for 8-bit images), images already scaled to [0, 1]
    would be scaled again and predicted on silently: that is the mistake
    this rejects. It looks at arrays and at the first element of a
    `tf.data.Dataset` (not at generators), and only where the converter
    shrinks [0, 1] below [0, 1/8].
    """
    converter = getattr(getattr(model, "preprocessor", None), "image_converter", None)
    scale = getattr(converter, "scale", None)
    if scale is None:
        return
    if float(np.max(np.abs(np.asarray(scale, "float64")))) > 0.125:
        return
    from ensemble_zoo.utils.backend import concrete_value

    if hasattr(x, "element_spec") and type(x).__module__.startswith("tensorflow"):
        # The first element (a batch when batched) stands for the rest: a
        # dataset is not consumed by iterating it.
        first = next(iter(x.take(1)), None)
        x = first[0] if isinstance(first, tuple) else first
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
        return
    values = concrete_value(x)
    if values is None or values.size == 0 or values.dtype.kind != "f":
        return
    low, high = float(np.min(values)), float(np.max(values))
    if 0.0 <= low and high <= 1.0:
        raise ValueError(
            f"`x` looks already scaled to [0, 1] (values in [{low:.3g}, "
            f"{high:.3g}]), but this {type(model).__name__}'s preprocessor "
            f"rescales raw pixel values (its image converter multiplies by "
            f"{scale}), so `predict`, `evaluate`, `fit`, their `*_on_batch` "
            "forms and `predict_uncertainty` take raw images: for the bundled digits "
            "`ensemble_zoo.datasets.load_arrays(..., raw=True)` (0-16), for "
            "8-bit images 0-255. For images already scaled, call the model "
            "directly (`model(x)`), or load it with "
            "`from_preset(..., preprocessor=None)`."
        )


def check_built_features(layer, shape, features):
    """Raises a `ValueError` naming `layer` unless the trailing axes of the
    static input shape `shape` equal `features` (a tuple of ints, what the
    layer was built for); axes of unknown size pass."""
    shape = tuple(shape)
    features = tuple(features)
    given = shape[len(shape) - len(features) :] if len(shape) >= len(features) else shape
    if len(given) != len(features) or any(
        isinstance(g, int) and g != f for g, f in zip(given, features)
    ):
        raise ValueError(
            f"{type(layer).__name__} '{layer.name}' was built for input "
            f"features {features}; got `inputs` of shape {shape}."
        )


def check_member_rows(layer, shape, members):
    """Raises a `ValueError` naming `layer` unless the first axis of the
    static input shape `shape` (when known) is a multiple of `members`:
    member-major rows, M copies of the batch one after another."""
    rows = tuple(shape)[0] if len(tuple(shape)) else None
    if isinstance(rows, int) and rows % members:
        raise ValueError(
            f"{type(layer).__name__} '{layer.name}' computes {members} members "
            f"over member-major rows, but its `inputs` have {rows} rows, not a "
            "multiple of it: pass a member-major batch "
            "(ensemble_zoo.ops.tile_members)."
        )

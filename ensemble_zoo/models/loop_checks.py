"""The argument and data checks of the loops (`fit`, `evaluate`,
`predict`, the `*_on_batch` methods) that every zoo task runs before Keras
builds or reuses a compiled step."""

import inspect

import numpy as np

from ensemble_zoo.utils import backend as backend_utils
from ensemble_zoo.utils.validation import check_finite


def check_real_dtype(x):
    """A `TypeError` naming `x` for strings, complex numbers and objects
    (Keras' dtype parsing failed on them with "Invalid dtype")."""
    if isinstance(x, np.ndarray):
        kind, name = x.dtype.kind, str(x.dtype)
    else:
        name = str(getattr(x.dtype, "name", x.dtype))
        kind = "c" if "complex" in name else "U" if name in ("string", "object") else "f"
    if kind not in "iubf":
        raise TypeError(f"`x` must hold real numbers; got dtype {name}.")


def named_loop_arguments(function, *args, **kwargs):
    """The arguments of a call of `function` by name (those in its
    `**kwargs` too): keras-hub's loops take `fit(x, y, batch_size,
    sample_weight, ...)`, Keras' `fit(x, y, batch_size, epochs, ...)`."""
    try:
        bound = inspect.signature(function).bind(*args, **kwargs).arguments
    except TypeError:
        return {}  # the call itself raises Keras' own error
    named = dict(bound)
    for key, value in bound.items():
        if inspect.signature(function).parameters[key].kind is inspect.Parameter.VAR_KEYWORD:
            named.update(value)
    return named


def check_loop_arguments(x, y=None, sample_weight=None, batch_size=None, epochs=None):
    """The arguments of a loop call (`fit`, `evaluate`, `predict`, the
    `*_on_batch` methods), for every zoo task: `batch_size` and `epochs`
    (when given), and `x`, `y` and `sample_weight` that agree."""
    _check_batch_size(batch_size)
    if epochs is not None:
        _check_epochs(epochs)
    check_samples(x, y, sample_weight)


def _check_epochs(epochs):
    """`epochs` of `fit`: a non-negative int (Keras ran no epoch for -1
    and failed comparing a string)."""
    if isinstance(epochs, bool) or not isinstance(epochs, (int, np.integer)) or epochs < 0:
        raise TypeError(f"`epochs` must be a non-negative int; got {epochs!r}.")


def check_samples(x, y=None, sample_weight=None):
    """`x` is given, and the arrays of a loop call agree: as many labels
    and sample weights as examples, and sample weights finite and
    non-negative (NaN or negative weights trained silently)."""
    if x is None:
        raise TypeError("`x` must be an array, a tensor or a dataset of inputs; got None.")
    counts = {}
    for name, value in (("x", x), ("y", y), ("sample_weight", sample_weight)):
        if value is None or isinstance(value, dict):
            continue
        if isinstance(value, list):  # a list of examples (texts, rows)
            counts[name] = len(value)
            if name != "sample_weight":
                continue
        values = (
            backend_utils.concrete_value(value)
            if hasattr(value, "shape") or isinstance(value, list)
            else None
        )
        if values is None or values.ndim == 0:
            continue
        counts[name] = values.shape[0]
        if name == "sample_weight":
            if values.dtype.kind not in "iuf":
                raise TypeError(
                    f"`sample_weight` must hold real numbers; got dtype {values.dtype}."
                )
            check_finite(values, "sample_weight")
            if (values < 0).any():
                raise ValueError(
                    "`sample_weight` must be non-negative; got "
                    f"{values[values < 0].ravel()[0].item()!r}."
                )
    if len(set(counts.values())) > 1:
        raise ValueError(
            "`x`, `y` and `sample_weight` must hold the same number of "
            "examples; got " + ", ".join(f"{k}: {v}" for k, v in counts.items()) + "."
        )


def _check_batch_size(batch_size):
    """`batch_size` of the loops: None or a positive int (a string failed
    deep inside TensorFlow's data pipeline)."""
    if batch_size is None:
        return
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, (int, np.integer))
        or batch_size < 1
    ):
        raise TypeError(f"`batch_size` must be a positive int or None; got {batch_size!r}.")


def check_raw_image_batch(x, channels):
    """Raw images for an image converter: a non-empty batch `(batch,
    height, width, channels)` of finite numbers with the model's channel
    count (any height and width: the converter resizes). Arrays whose
    values exist now are checked; datasets and graph tensors are not."""
    from ensemble_zoo.utils.backend import concrete_value

    if not (hasattr(x, "shape") and hasattr(x, "dtype")) and not isinstance(x, list):
        return
    values = concrete_value(x)
    if values is None:
        return
    if values.dtype.kind not in "iuf":
        # bool images would become pixel values 0 and 1 silently.
        raise TypeError(f"`x` must hold numeric images; got dtype {values.dtype}.")
    if values.ndim != 4 or values.shape[0] == 0:
        raise ValueError(
            "`x` must be a non-empty batch of images (batch, height, width, "
            f"{channels}); got shape {values.shape}."
        )
    if channels is not None and values.shape[-1] != channels:
        raise ValueError(
            f"`x` must have {channels} channel(s) (batch, height, width, "
            f"{channels}); got shape {values.shape}."
        )
    if values.dtype.kind == "f" and not np.isfinite(values).all():
        bad = int(values.size - np.isfinite(values).sum())
        raise ValueError(f"`x` holds {bad} NaN or infinite pixel values.")


def is_tf_dataset(x):
    """Whether `x` is a `tf.data.Dataset` (without importing TensorFlow)."""
    return hasattr(x, "element_spec") and type(x).__module__.startswith("tensorflow")

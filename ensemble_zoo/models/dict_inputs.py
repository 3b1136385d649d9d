"""Checks and export specs of dict inputs: what keras-hub's text
classifiers take (`token_ids`, `padding_mask`, `segment_ids`, ...), for
every zoo task that takes them (`ZooTask`)."""

import keras
import keras_hub
import numpy as np

from ensemble_zoo.utils.backend import concrete_value
from ensemble_zoo.utils.validation import static_shape


def backbone_attribute(model, name):
    """The attribute `name` of the first keras-hub backbone inside `model`
    that has it set (`None` if none has): a text backbone's
    `max_sequence_length`, `vocabulary_size` or `num_segments`."""
    for layer in model._flatten_layers(include_self=False):
        if isinstance(layer, keras_hub.models.Backbone):
            value = getattr(layer, name, None)
            if value:
                return int(value)
    return None


def check_dict_inputs(owner, inputs, template, max_length=None):
    """Checks a dict of input tensors against the `keras.Input`s of a model
    that takes one (`template`, e.g. a keras-hub text classifier's
    `token_ids`, `padding_mask` and `segment_ids`): the same keys, each
    tensor of the template's rank and dtype kind, and one length on axis 1
    (the tokens), at most `max_length` when given. Keras would cast float
    ids and pad a missing key silently. `owner` names the model in the
    errors."""
    if not isinstance(inputs, dict) or set(inputs) != set(template):
        got = sorted(inputs) if isinstance(inputs, dict) else f"a {type(inputs).__name__}"
        raise ValueError(f"{owner} expects a dict with keys {sorted(template)}; got {got}.")
    lengths = set()
    for name, expected in template.items():
        shape = static_shape(inputs[name])
        if len(shape) != len(expected.shape):
            raise ValueError(
                f"`{name}` must have shape {('batch',) + tuple(expected.shape[1:])}; got {shape}."
            )
        dtype = keras.backend.standardize_dtype(inputs[name].dtype)
        wanted = keras.backend.standardize_dtype(expected.dtype)
        if ("float" in dtype) != ("float" in wanted):
            raise TypeError(f"`{name}` must hold {wanted} values; got dtype {dtype}.")
        if len(shape) > 1 and shape[1] is not None:
            lengths.add(shape[1])
    if len(lengths) > 1:
        shapes = {name: static_shape(value) for name, value in inputs.items()}
        raise ValueError(f"The inputs must share their length on axis 1; got shapes {shapes}.")
    if lengths and max_length is not None and max(lengths) > max_length:
        raise ValueError(
            f"Sequences of {max(lengths)} tokens exceed max_sequence_length={max_length}."
        )


def check_token_values(model, inputs):
    """Checks the values of dict inputs that exist now: a non-empty batch,
    integer `token_ids` in the vocabulary of `model`'s keras-hub backbone,
    `segment_ids` in `[0, num_segments)` and a 0 / 1 `padding_mask` (the
    keys a family has). Out-of-range ids were gathered silently (JAX clamps
    them; an out-of-range segment gave NaN)."""
    limits = {
        "token_ids": backbone_attribute(model, "vocabulary_size"),
        "segment_ids": backbone_attribute(model, "num_segments"),
        "padding_mask": 2,
    }
    for name, limit in limits.items():
        values = concrete_value(inputs.get(name))
        if values is None:
            continue
        if values.shape[0] == 0:
            raise ValueError(f"`{name}` must be a non-empty batch; got shape {values.shape}.")
        if values.dtype.kind not in "iub":
            raise TypeError(f"`{name}` must hold integers; got dtype {values.dtype}.")
        if limit is not None and (values.min() < 0 or values.max() >= limit):
            raise ValueError(
                f"`{name}` must lie in [0, {limit}); got values in "
                f"[{values.min()}, {values.max()}]."
            )


def check_raw_texts(x):
    """Raw text for a text preprocessor: a string, or a non-empty list,
    tuple or array of strings (a tuple of two such for sentence pairs);
    datasets and tensors are left to the preprocessor. Numbers failed deep
    in the tokenizer's data pipeline."""
    if not isinstance(x, (list, tuple, np.ndarray, str)):
        return
    segments = x if isinstance(x, tuple) and x and not isinstance(x[0], str) else (x,)
    for segment in segments:
        texts = (
            [segment] if isinstance(segment, str) else np.asarray(segment, dtype=object).reshape(-1)
        )
        if len(texts) == 0:
            raise ValueError("`x` must hold at least one text; got an empty list.")
        bad = [t for t in texts if not isinstance(t, (str, bytes))]
        if bad:
            raise TypeError(
                "`x` must hold strings (the preprocessor tokenizes them); "
                f"got a {type(bad[0]).__name__}."
            )


def dict_input_signature(model, format=None):
    """The exports' input specs of a model taking a dict of token tensors
    (keras-hub's text classifiers): its keys and dtypes, `(batch, tokens)`.
    Tokens are dynamic under TensorFlow, LiteRT aside; JAX export cannot
    compare a symbolic sequence length with the position table's size,
    `torch.export` proves it equal to the table's, and LiteRT has no
    built-in op for the strided slices of a dynamic length, so those take
    inputs padded to the backbone's `max_sequence_length` where it has
    one."""
    dynamic = keras.config.backend() == "tensorflow" and format != "litert"
    length = None if dynamic else backbone_attribute(model, "max_sequence_length")
    return {
        name: keras.InputSpec(
            shape=(None,) + (length,) * (len(tensor.shape) - 1),
            dtype=keras.backend.standardize_dtype(tensor.dtype),
        )
        for name, tensor in model.input.items()
    }

"""Input checks of the causal-LM tasks' entry points.

keras-hub's `CausalLM.generate` and Keras' loops accept some inputs
silently and return wrong values: token ids outside the vocabulary
(gathered as other rows), prompts longer than `max_length` (truncated by
the packer), stop tokens that can never occur, a prompt with no token.
Other inputs fail deep inside a tokenizer or a compiled step. These
checks run first, on the host, before anything is compiled; under JAX a
compiled step that raised leaves the model unusable.

`CausalLMLoopsMixin` puts them in front of `fit`, `evaluate` and
`predict` of `LoRAEnsembleCausalLM` and `TokenLossPredictor`; `generate`
calls `check_generate_call`.
"""

import keras
import numpy as np

from ensemble_zoo.models.loop_checks import check_loop_arguments
from ensemble_zoo.models.loop_checks import named_loop_arguments
from ensemble_zoo.utils import backend as backend_utils
from ensemble_zoo.utils.backend import concrete_value
from ensemble_zoo.utils.validation import as_numeric_array
from ensemble_zoo.utils.validation import check_bool


def text_inputs(decoder):
    """The `keras.Input`s of a keras-hub decoder backbone that a text task
    feeds: all but `position_ids` (Gemma 4), which `with_position_ids`
    makes inside the task's graph."""
    return {name: x for name, x in decoder.input.items() if name != "position_ids"}


def with_position_ids(decoder, inputs):
    """`inputs` plus `position_ids` `0 .. length - 1` on every row when
    `decoder` takes them as an input (Gemma 4, whose keras-hub
    preprocessor makes them so for text; the zoo's causal-LM tasks take
    `token_ids` and `padding_mask` alone)."""
    if "position_ids" not in decoder.input:
        return inputs
    ones = keras.ops.ones_like(inputs["token_ids"], dtype="int32")
    return {**inputs, "position_ids": keras.ops.cumsum(ones, axis=1) - 1}


def check_token_batch(token_ids, padding_mask, vocabulary_size, min_length=1):
    """`(token_ids, padding_mask)` as NumPy arrays, or a `ValueError` /
    `TypeError` naming the argument: integer ids in `[0, vocabulary_size)`
    of shape `(batch, length)` with `batch >= 1` and `length >=
    min_length`, and a boolean (or 0 / 1) mask of the same shape (default:
    all true)."""
    ids = as_numeric_array(token_ids, "token_ids", allow_bool=False)
    if ids.dtype.kind == "f":
        if not np.all(np.isfinite(ids)) or not np.all(ids == np.round(ids)):
            raise ValueError(
                "`token_ids` must hold integer token ids; got fractional or non-finite values."
            )
        ids = ids.astype("int64")
    if ids.ndim != 2 or ids.shape[0] == 0 or ids.shape[1] < min_length:
        raise ValueError(
            "`token_ids` must have shape (batch, length) with batch >= 1 and "
            f"length >= {min_length}; got shape {ids.shape}."
        )
    if ids.min() < 0 or ids.max() >= vocabulary_size:
        raise ValueError(
            f"`token_ids` must lie in [0, {vocabulary_size}) (the vocabulary); "
            f"got values in [{ids.min()}, {ids.max()}]."
        )
    if padding_mask is None:
        return ids, np.ones(ids.shape, bool)
    mask = as_numeric_array(padding_mask, "padding_mask", allow_bool=True)
    if mask.shape != ids.shape:
        raise ValueError(
            f"`padding_mask` must have the shape of `token_ids`, {ids.shape}; got {mask.shape}."
        )
    if not np.isin(mask, (0, 1)).all():
        raise ValueError("`padding_mask` must hold booleans (or 0 / 1).")
    return ids, mask.astype(bool)


def _token_dict(inputs, vocabulary_size, require_mask):
    """Checks a dict of `token_ids` (and `padding_mask`) whose values exist
    now; returns the mask (or `None`) for further checks."""
    if "token_ids" not in inputs:
        raise ValueError(
            "`inputs` must be a dict with `token_ids` (and `padding_mask`), "
            f"as a CausalLMPreprocessor returns; got keys {sorted(inputs)}."
        )
    if require_mask and "padding_mask" not in inputs:
        raise ValueError(
            "`inputs` must hold `padding_mask` next to `token_ids` (True on "
            "the prompt's tokens); got keys " + f"{sorted(inputs)}."
        )
    ids = (
        concrete_value(inputs["token_ids"])
        if hasattr(inputs["token_ids"], "shape")
        else inputs["token_ids"]
    )
    if ids is None:  # symbolic (a compiled function's inputs)
        return None
    mask = inputs.get("padding_mask")
    if mask is not None and hasattr(mask, "shape"):
        mask = concrete_value(mask)
    return check_token_batch(ids, mask, vocabulary_size)[1]


def _is_text(x):
    return isinstance(x, str) or (isinstance(x, np.ndarray) and x.dtype.kind in "USO")


def _prompts(inputs, name="inputs"):
    """The prompts of a string input as a list, or `None` for other inputs."""
    if isinstance(inputs, str):
        return [inputs]
    if isinstance(inputs, np.ndarray) and inputs.dtype.kind in "US":
        return [str(s) for s in inputs.reshape(-1)]
    if isinstance(inputs, (list, tuple)):
        if not inputs:
            raise ValueError(f"`{name}` must hold at least one prompt; got an empty list.")
        if not all(isinstance(p, str) for p in inputs):
            bad = type(next(p for p in inputs if not isinstance(p, str))).__name__
            article = "an" if bad[0].lower() in "aeiou" else "a"
            raise TypeError(
                f"`{name}` must be a string, a list of strings or a dict of "
                f"token arrays; got a list holding {article} {bad}."
            )
        return list(inputs)
    return None


def check_generate_call(model, inputs, max_length, stop_token_ids, strip_prompt):
    """The checks of `generate` (see the module docstring)."""
    check_bool(strip_prompt, "strip_prompt")
    vocabulary_size = model.backbone.vocabulary_size
    if max_length is not None:
        if isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer)):
            raise TypeError(f"`max_length` must be None or an int; got {max_length!r}.")
        if max_length < 2:
            raise ValueError(
                "`max_length` must be >= 2 (a start token and one generated "
                f"token); got {max_length}."
            )
    if (
        not (isinstance(stop_token_ids, str) and stop_token_ids == "auto")
        and stop_token_ids is not None
    ):
        if isinstance(stop_token_ids, str) or not hasattr(stop_token_ids, "__iter__"):
            raise TypeError(
                "`stop_token_ids` must be 'auto', None or a sequence of token "
                f"ids; got {stop_token_ids!r}."
            )
        stops = list(stop_token_ids)
        if not all(
            isinstance(t, (int, np.integer))
            and not isinstance(t, bool)
            and 0 <= t < vocabulary_size
            for t in stops
        ):
            raise ValueError(
                f"`stop_token_ids` must be token ids in [0, {vocabulary_size}) "
                f"(the vocabulary); got {stops!r}: such a token can never be "
                "generated, so generation would not stop there."
            )
    if inputs is None:
        raise TypeError(
            "`inputs` must be a string, a list of strings or a dict of token arrays; got None."
        )
    if isinstance(inputs, dict) and "token_ids" not in inputs and "prompts" in inputs:
        inputs = inputs["prompts"]  # Gemma 3's preprocessor takes {"prompts": ...}
    if isinstance(inputs, dict):
        mask = _token_dict(inputs, vocabulary_size, require_mask=True)
        if mask is not None and not mask[:, 0].all():
            raise ValueError(
                "`padding_mask` must be True at position 0 of every row: each "
                "prompt needs at least one token (padded on the right, as a "
                "CausalLMPreprocessor packs it)."
            )
        if model.preprocessor is not None:
            raise ValueError(
                "`inputs` holds token ids, but the model has a preprocessor, "
                "which takes text (keras-hub's `generate` tokenizes every "
                "input). Pass the prompts as strings, or generate from token "
                "ids without the preprocessor: `model.preprocessor = None` "
                "(then `generate` returns token ids and `padding_mask`)."
            )
        return
    prompts = _prompts(inputs)
    if prompts is None and hasattr(inputs, "shape") and hasattr(inputs, "dtype"):
        raise TypeError(
            "`inputs` must be a string, a list of strings (with a "
            "preprocessor) or a dict of `token_ids` and `padding_mask`; got "
            f"an array of shape {tuple(inputs.shape)}."
        )
    if prompts is None or model.preprocessor is None:
        return  # a dataset (checked by keras-hub), or keras-hub's own error
    tokenizer = model.preprocessor.tokenizer
    length = max_length or model.preprocessor.sequence_length
    start = 1 if getattr(model.preprocessor, "add_start_token", True) else 0
    for i, prompt in enumerate(prompts):
        count = int(np.size(keras.ops.convert_to_numpy(tokenizer(prompt)))) + start
        if count > length:
            raise ValueError(
                f"Prompt {i} has {count} tokens (its start token included), "
                f"more than `max_length`={length}: it would be truncated. Pass "
                "a larger `max_length` or a shorter prompt."
            )


def _takes_prompts_and_responses(model):
    """Whether the model's preprocessor trains on `{"prompts",
    "responses"}` only (keras-hub's Gemma 3 preprocessor)."""
    import keras_hub

    return isinstance(
        getattr(model, "preprocessor", None), keras_hub.models.Gemma3CausalLMPreprocessor
    )


def check_lm_loop_data(model, x, y=None, sample_weight=None, batch_size=None, epochs=None):
    """The checks of a causal-LM task's `fit`, `evaluate` and `predict`:
    the loop arguments, prompts (a non-empty list of strings) or token
    dicts (ids in the vocabulary), and token-id labels."""
    check_loop_arguments(x, y, sample_weight, batch_size, epochs)
    vocabulary_size = model.backbone.vocabulary_size
    if isinstance(x, dict):
        if "token_ids" in x:
            _token_dict(x, vocabulary_size, require_mask=False)
        elif not x:
            raise ValueError("`x` must not be an empty dict.")
    elif not _is_text(x):
        _prompts(x, "x")  # a list: non-empty, strings only
    if _takes_prompts_and_responses(model) and (_is_text(x) or isinstance(x, (list, tuple))):
        raise ValueError(
            f"{type(model.preprocessor).__name__} takes a dict of "
            '`{"prompts": [...], "responses": [...]}` (in `fit`, the loss '
            "covers the responses); got plain text. For text without a "
            "prompt, pass "
            '`{"prompts": [""] * n, "responses": texts}`, or token ids '
            "without the preprocessor."
        )
    if y is not None and hasattr(y, "shape"):
        labels = concrete_value(y)
        if labels is not None:
            as_numeric_array(labels, "y", allow_bool=False)
            if labels.size and (
                labels.dtype.kind not in "iu" or labels.min() < 0 or labels.max() >= vocabulary_size
            ):
                raise ValueError(
                    f"`y` must hold token ids in [0, {vocabulary_size}) (the "
                    f"vocabulary); got dtype {labels.dtype}, values in "
                    f"[{labels.min()}, {labels.max()}]."
                )


class CausalLMLoopsMixin:
    """`fit`, `evaluate` and `predict` of a causal-LM task, after
    `check_lm_loop_data` (before Keras compiles a step); under PyTorch
    every variable a `torch` parameter
    (`ensemble_zoo.utils.backend.track_torch_parameters`)."""

    def _track_variables(self):
        backend_utils.track_torch_parameters(self)

    def named_parameters(self, *args, **kwargs):
        return backend_utils.torch_named_parameters(self, super().named_parameters, *args, **kwargs)

    def _checked(self, method, *args, **kwargs):
        function = getattr(super(), method)
        given = named_loop_arguments(function, *args, **kwargs)
        check_lm_loop_data(
            self,
            given.get("x"),
            given.get("y"),
            given.get("sample_weight"),
            given.get("batch_size"),
            given.get("epochs", 1) if method == "fit" else None,
        )
        return function(*args, **kwargs)

    def fit(self, *args, **kwargs):
        return self._checked("fit", *args, **kwargs)

    def evaluate(self, *args, **kwargs):
        return self._checked("evaluate", *args, **kwargs)

    def predict(self, *args, **kwargs):
        return self._checked("predict", *args, **kwargs)

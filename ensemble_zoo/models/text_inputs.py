"""keras-hub BERT-style text inputs, shared by the zoo's text classifiers."""

import keras

from ensemble_zoo.utils.validation import static_shape

#: The keys of a `keras_hub.models.BertTextClassifierPreprocessor` output.
TEXT_INPUTS = ("token_ids", "segment_ids", "padding_mask")


class TextInputsMixin:
    """Input checks and export signature for dict text inputs.

    For `EnsembleClassifier` subclasses taking keras-hub's BERT inputs: a
    dict of int `(batch, tokens)` tensors `token_ids`, `segment_ids` and
    `padding_mask`. The model needs `self.backbone.max_sequence_length`.
    """

    def _build_text_inputs(self):
        # Recording the dict structure lets TensorFlow trace its default
        # serving signature when the model is exported.
        self.build({name: (None, None) for name in TEXT_INPUTS})

    def _check_inputs(self, inputs):
        if not isinstance(inputs, dict) or set(inputs) != set(TEXT_INPUTS):
            got = sorted(inputs) if isinstance(inputs, dict) else type(inputs).__name__
            raise ValueError(
                f"{type(self).__name__} expects a dict with keys "
                f"{list(TEXT_INPUTS)} of int (batch, tokens) tensors (the "
                f"output of a BertTextClassifierPreprocessor); got {got}."
            )
        shapes = {k: static_shape(v) for k, v in inputs.items()}
        first = shapes["token_ids"]
        for name, shape in shapes.items():
            if len(shape) != 2 or (
                None not in (shape[1], first[1]) and shape[1] != first[1]
            ):
                raise ValueError(
                    f"`{name}` must have shape (batch, tokens) like `token_ids` "
                    f"{first}; got {shape}."
                )
        maximum = self.backbone.max_sequence_length
        if first[1] is not None and first[1] > maximum:
            raise ValueError(
                f"Sequences of {first[1]} tokens exceed max_sequence_length="
                f"{maximum}."
            )

    def _export_input_signature(self):
        # JAX export cannot compare a symbolic sequence length with the
        # position table's size, so under JAX the SavedModel takes inputs
        # padded to `max_sequence_length`; under TensorFlow any length.
        length = (
            self.backbone.max_sequence_length
            if keras.config.backend() == "jax"
            else None
        )
        return [
            {
                name: keras.InputSpec(shape=(None, length), dtype="int32")
                for name in TEXT_INPUTS
            }
        ]

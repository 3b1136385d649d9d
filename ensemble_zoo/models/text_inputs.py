"""keras-hub BERT-style text inputs, shared by the zoo's text classifiers."""

import keras
import numpy as np

from ensemble_zoo.models.keras_hub_vit import keras_hub_parts
from ensemble_zoo.models.zoo_task import check_dict_inputs
from ensemble_zoo.utils.backend import concrete_value
from ensemble_zoo.utils.validation import static_shape

#: The keys of a `keras_hub.models.BertTextClassifierPreprocessor` output.
TEXT_INPUTS = ("token_ids", "segment_ids", "padding_mask")


def check_bert_backbone(backbone):
    """A `TypeError` unless `backbone` is a `keras_hub.models.BertBackbone`."""
    import keras_hub

    if not isinstance(backbone, keras_hub.models.BertBackbone):
        raise TypeError(
            f"`backbone` must be a keras_hub.models.BertBackbone; got {type(backbone).__name__}."
        )


def bert_parts(model, kwargs):
    """`(backbone, head, num_classes)` of a keras-hub `BertTextClassifier`
    or `BertBackbone` (`keras_hub_parts`).

    For a classifier, `kwargs` gets its `dropout` and `preprocessor` unless
    set.
    """
    import keras_hub

    models = keras_hub.models
    return keras_hub_parts(model, kwargs, models.BertTextClassifier, models.BertBackbone)


def plain_bert_classifier(task, backbone):
    """A keras-hub `BertTextClassifier` on `backbone` with `task`'s
    `num_classes` and `dropout`, a logits head and no preprocessor: what a
    converted text task's `member_model` fills with one member's
    weights."""
    import keras_hub

    return keras_hub.models.BertTextClassifier(
        backbone=backbone,
        num_classes=task.num_classes,
        preprocessor=None,
        activation=None,
        dropout=task.dropout,
    )


class TextInputsMixin:
    """Input checks and export signature for dict text inputs.

    For `EnsembleClassifier` subclasses taking keras-hub's BERT inputs: a
    dict of int `(batch, tokens)` tensors `token_ids`, `segment_ids` and
    `padding_mask`. The model needs `self.backbone.max_sequence_length`.
    """

    #: Dict inputs have no one-example shape: `_check_inputs` checks them.
    member_input_shape = None
    #: The task reads the backbone's `pooled_output` (no token pooling).
    uses_pooled_output = True
    #: A member-tiled text task's dropout before the head when `dropout`
    #: is `None`: keras-hub's `BertTextClassifier`'s.
    default_dropout = 0.1
    #: A member-tiled text task converts a keras-hub BERT.
    check_backbone = staticmethod(check_bert_backbone)
    #: `(backbone, head, num_classes)` of a keras-hub BERT to convert.
    keras_hub_parts = staticmethod(bert_parts)

    def _build_text_inputs(self):
        # Recording the dict structure lets TensorFlow trace its default
        # serving signature when the model is exported.
        self.build({name: (None, None) for name in TEXT_INPUTS})

    def _check_inputs(self, inputs):
        check_dict_inputs(type(self).__name__, inputs, self.input)
        first = static_shape(inputs["token_ids"])
        maximum = self.backbone.max_sequence_length
        if first[1] is not None and first[1] > maximum:
            raise ValueError(
                f"Sequences of {first[1]} tokens exceed max_sequence_length={maximum}."
            )

    def _check_data(self, x):
        """The loops' check of dict inputs whose values exist now: the
        shapes (`_check_inputs`), a non-empty batch, integer `token_ids` in
        the vocabulary, `segment_ids` in `[0, num_segments)` and a 0 / 1
        `padding_mask`. Out-of-range ids were gathered silently (JAX
        clamps them; an out-of-range segment gave NaN)."""
        if not isinstance(x, dict):
            return super()._check_data(x)
        self._check_inputs(x)
        limits = {
            "token_ids": self.backbone.vocabulary_size,
            "segment_ids": getattr(self.backbone, "num_segments", None),
            "padding_mask": 2,
        }
        for name in TEXT_INPUTS:
            values = concrete_value(x[name])
            if values is None:
                continue
            if values.shape[0] == 0:
                raise ValueError(f"`{name}` must be a non-empty batch; got shape {values.shape}.")
            if values.dtype.kind not in "iub":
                raise TypeError(f"`{name}` must hold integers; got dtype {values.dtype}.")
            limit = limits[name]
            if limit is not None and (values.min() < 0 or values.max() >= limit):
                raise ValueError(
                    f"`{name}` must lie in [0, {limit}); got values in "
                    f"[{values.min()}, {values.max()}]."
                )

    def _check_raw_loop_data(self, x, y=None):
        """Raw text for the preprocessor: a string, or a non-empty list,
        tuple or array of strings (a tuple of two such for sentence pairs);
        datasets and tensors are left to the preprocessor. Numbers failed
        deep in the tokenizer's data pipeline."""
        if isinstance(x, (list, tuple, np.ndarray, str)):
            segments = x if isinstance(x, tuple) and x and not isinstance(x[0], str) else (x,)
            for segment in segments:
                texts = (
                    np.asarray(segment, dtype=object).reshape(-1)
                    if not isinstance(segment, str)
                    else [segment]
                )
                if len(texts) == 0:
                    raise ValueError("`x` must hold at least one text; got an empty list.")
                bad = [t for t in texts if not isinstance(t, (str, bytes))]
                if bad:
                    raise TypeError(
                        "`x` must hold strings (the preprocessor tokenizes them); "
                        f"got a {type(bad[0]).__name__}."
                    )
        self._check_labels(y)

    def _export_input_signature(self, format=None):
        # JAX export cannot compare a symbolic sequence length with the
        # position table's size, `torch.export` proves it equal to the
        # table's, and LiteRT has no built-in op for the strided slices of
        # a dynamic length: those exports take inputs padded to
        # `max_sequence_length`; TensorFlow's other formats any length.
        dynamic = keras.config.backend() == "tensorflow" and format != "litert"
        length = None if dynamic else self.backbone.max_sequence_length
        return [
            {name: keras.InputSpec(shape=(None, length), dtype="int32") for name in TEXT_INPUTS}
        ]

"""keras-hub BERT-style text inputs, shared by the zoo's text classifiers."""

from ensemble_zoo.models.keras_hub_vit import keras_hub_parts

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

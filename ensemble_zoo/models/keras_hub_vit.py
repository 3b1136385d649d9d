"""Reading the parts of a keras-hub ViT that the zoo's converted models
(LoRA-Ensemble, BatchEnsemble) are built from, and building one member
back as a keras-hub ViT classifier."""

import keras


def check_image_backbone(backbone):
    """Raises unless `backbone` is a built keras-hub image backbone with one
    input that returns `(batch, tokens, dim)` features."""
    if not isinstance(backbone, keras.Model) or len(backbone.inputs or []) != 1:
        raise TypeError(
            "`backbone` must be a built keras-hub image backbone with one "
            f"input (e.g. keras_hub.models.ViTBackbone); got {type(backbone).__name__}."
        )
    if len(backbone.outputs[0].shape) != 3:
        raise ValueError(
            "`backbone` must return (batch, tokens, dim) features; its "
            f"output has shape {tuple(backbone.outputs[0].shape)}."
        )


def check_logits_head(classifier):
    activation = getattr(classifier, "activation", None)
    if activation not in (None, "linear", keras.activations.linear):
        raise ValueError(
            f"The classifier's head has activation {activation!r}; member "
            "logits need a linear head (activation=None)."
        )


def check_keras_hub_classifier(classifier, task_class):
    """Raises a `ValueError` unless `classifier`, which a `from_keras_hub`
    converter takes, is an instance of the keras-hub task class
    `task_class` (e.g. `keras_hub.models.ViTImageClassifier`)."""
    if not isinstance(classifier, task_class):
        raise ValueError(
            f"`classifier` must be a keras_hub.models.{task_class.__name__}; "
            f"got {type(classifier).__name__}."
        )


def keras_hub_parts(model, kwargs, classifier_cls, backbone_cls, inherited=()):
    """`(backbone, head, num_classes)` of a keras-hub classifier of class
    `classifier_cls` (its `Dense` head and class count) or a backbone of
    class `backbone_cls` (`None`, `None`).

    For a classifier, `kwargs` gets its `dropout` and `preprocessor`, and
    its attributes named in `inherited`, unless set.
    """
    if isinstance(model, classifier_cls):
        check_logits_head(model)
        for name in inherited:
            kwargs.setdefault(name, getattr(model, name))
        kwargs.setdefault("dropout", float(model.dropout))
        kwargs.setdefault("preprocessor", model.preprocessor)
        return model.backbone, model.output_dense, model.num_classes
    if isinstance(model, backbone_cls):
        return model, None, None
    raise TypeError(
        f"`model` must be a keras_hub.models.{classifier_cls.__name__} or "
        f"{backbone_cls.__name__}; got {type(model).__name__}."
    )


def vit_parts(model, kwargs):
    """`(backbone, head, num_classes)` of a keras-hub `ViTImageClassifier`
    or `ViTBackbone` (`keras_hub_parts`).

    For a classifier, `kwargs` gets its `pooling`, `dropout` and
    `preprocessor` unless set.
    """
    import keras_hub

    models = keras_hub.models
    classifier = isinstance(model, models.ViTImageClassifier)
    if classifier and getattr(model, "intermediate_dim", None) is not None:
        raise ValueError(
            "ViT classifiers with an `intermediate_dim` pre-logits layer are not supported."
        )
    return keras_hub_parts(
        model, kwargs, models.ViTImageClassifier, models.ViTBackbone, ["pooling"]
    )


def plain_vit_classifier(task, backbone):
    """A keras-hub `ViTImageClassifier` on `backbone` with `task`'s
    `num_classes`, `pooling` and `dropout` and a logits head: what a
    converted task's `member_model` fills with one member's weights."""
    import keras_hub

    return keras_hub.models.ViTImageClassifier(
        backbone=backbone,
        num_classes=task.num_classes,
        pooling=task.pooling,
        activation=None,
        dropout=task.dropout,
    )

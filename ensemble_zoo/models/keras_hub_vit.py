"""Reading the parts of a keras-hub ViT that the zoo's converted models
(LoRA-Ensemble, BatchEnsemble) are built from."""

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


def vit_parts(model, kwargs):
    """`(backbone, head, num_classes)` of a keras-hub `ViTImageClassifier`
    (its `Dense` head and class count) or `ViTBackbone` (`None`, `None`).

    For a classifier, `kwargs` gets its `pooling` and `dropout` unless set.
    """
    import keras_hub

    if isinstance(model, keras_hub.models.ViTImageClassifier):
        if getattr(model, "intermediate_dim", None) is not None:
            raise ValueError(
                "ViT classifiers with an `intermediate_dim` pre-logits layer are not supported."
            )
        check_logits_head(model)
        kwargs.setdefault("pooling", model.pooling)
        kwargs.setdefault("dropout", float(model.dropout))
        kwargs.setdefault("preprocessor", model.preprocessor)
        return model.backbone, model.output_dense, model.num_classes
    if isinstance(model, keras_hub.models.ViTBackbone):
        return model, None, None
    raise TypeError(
        "`model` must be a keras_hub.models.ViTImageClassifier or "
        f"ViTBackbone; got {type(model).__name__}."
    )

import keras
import keras_hub

from ensemble_zoo.models.ensemble_classifier import EnsembleClassifier
from ensemble_zoo.models.ensemble_classifier import preprocessor_of
from ensemble_zoo.models.masksembles.masksembles_model_backbone import METHOD_DEFAULTS
from ensemble_zoo.models.masksembles.masksembles_model_backbone import MasksemblesModelBackbone
from ensemble_zoo.models.method_backbone import method_arguments
from ensemble_zoo.models.wrapped_models_backbone import backbone_attribute
from ensemble_zoo.models.wrapped_models_backbone import build_member_rows_task
from ensemble_zoo.models.wrapped_models_backbone import wrapping_backbone


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class MasksemblesClassifier(EnsembleClassifier, keras_hub.models.ImageClassifier):
    """Masksembles on a keras-hub classifier of any transformer family.

    Masksembles (Durasov et al., "Masksembles for Uncertainty Estimation",
    2021): M fixed binary masks with a controlled overlap (`scale`) drop
    channels of one network, one mask per member. This class takes a whole
    keras-hub classifier, image or text (DeiT, Swin, MiT, RoBERTa,
    DistilBERT, DeBERTa-v3, ALBERT, XLM-RoBERTa, RoFormer-V2, FNet, ViT,
    BERT, ...), masks the hidden units of every feed-forward block it finds
    by layer type and role (the input of its second projection), and keeps
    the family's pooling and head layers, one head per member
    (`MasksemblesModelBackbone`). The members
    run in one pass on the input tiled to `(members * batch, ...)`; `call`
    returns member logits `(batch, members, classes)`.

    `MasksemblesImageClassifier` builds the same masks on a keras-hub ViT
    with a head of its own; its preset stays its.

    Args:
        model: a built keras-hub classifier returning logits
            `(batch, classes)`. It is copied, not changed.
        num_members: int. Defaults to `4` (the paper's `n`).
        scale: float >= 1, the masks' overlap. Defaults to `2.0`.
        reuse_head: bool. `True` (default) starts every member's head as a
            copy of `model`'s; `False` initializes each member's head on
            its own.
        seed: optional int for the masks.
        backbone: a `MasksemblesModelBackbone`, instead of `model` (how the
            classifier is rebuilt from its config). The method's arguments
            left `None` are then the backbone's.
        preprocessor: optional keras-hub preprocessor (`from_model` takes
            the classifier's).
        **kwargs: other `keras_hub.models.Task` arguments (`name`, `dtype`,
            `compile`).

    Example:

    ```python
    import keras_hub
    import numpy as np
    import ensemble_zoo as ez

    bert = keras_hub.models.DistilBertTextClassifier(
        backbone=keras_hub.models.DistilBertBackbone(
            vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8,
            intermediate_dim=16, max_sequence_length=8,
        ),
        num_classes=3,
        preprocessor=None,
    )
    model = ez.models.MasksemblesClassifier.from_model(bert, num_members=4, seed=0)
    inputs = {
        "token_ids": np.ones((2, 8), "int32"),
        "padding_mask": np.ones((2, 8), "int32"),
    }
    model.predict(inputs, verbose=0).shape  # (2, 4, 3)
    ```
    """

    backbone_cls = MasksemblesModelBackbone

    def __init__(
        self,
        model=None,
        num_members=None,
        scale=None,
        reuse_head=None,
        seed=None,
        backbone=None,
        preprocessor=None,
        **kwargs,
    ):
        method_config = method_arguments(
            backbone,
            (MasksemblesModelBackbone,),
            METHOD_DEFAULTS,
            num_members=num_members,
            scale=scale,
            reuse_head=reuse_head,
            seed=seed,
        )
        backbone = wrapping_backbone(
            MasksemblesModelBackbone,
            backbone,
            kwargs.get("dtype"),
            method_config=method_config,
            model=model,
        )
        # One pass over the member-major batch: member m's rows pass its
        # masks and head. Sets the method's arguments as attributes.
        build_member_rows_task(self, backbone, preprocessor, backbone.num_members, **kwargs)

    model = backbone_attribute("model", "The classifier's copy the masks act in.")
    network = backbone_attribute("network", "`model`'s graph with a head per member.")
    masks = backbone_attribute("masks", "Every `MasksemblesMask`, in layer order.")
    heads = backbone_attribute(
        "heads", "The member heads (`GroupedDense` on member-major rows), in graph order."
    )

    def get_config(self):
        config = super().get_config()
        config.update(self.backbone.method_config)
        return config

    @classmethod
    def from_model(cls, model, num_members=None, **kwargs):
        """Masksembles on a copy of the keras-hub classifier `model`
        (which is not changed); the ensemble takes over its preprocessor.
        `kwargs` are the constructor's other arguments."""
        kwargs.setdefault("preprocessor", preprocessor_of(model))
        return cls(model, num_members, **kwargs)

import keras
import keras_hub

from ensemble_zoo.models.ensemble_classifier import EnsembleClassifier
from ensemble_zoo.models.ensemble_classifier import preprocessor_of
from ensemble_zoo.models.hydra.hydra_model_backbone import METHOD_DEFAULTS
from ensemble_zoo.models.hydra.hydra_model_backbone import HydraModelBackbone
from ensemble_zoo.models.method_backbone import method_arguments
from ensemble_zoo.models.wrapped_models_backbone import backbone_attribute
from ensemble_zoo.models.wrapped_models_backbone import build_member_rows_task
from ensemble_zoo.models.wrapped_models_backbone import wrapping_backbone


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class HydraClassifier(EnsembleClassifier, keras_hub.models.ImageClassifier):
    """Hydra Ensembles on a keras-hub classifier of any family with
    multi-head attention.

    Hydra Ensembles (the Hydra paper, "Ensembling Pruned Attention Heads
    for Uncertainty-Aware Efficient Transformers"): members are copies of
    one pre-trained transformer that each keep a different subset of its
    attention heads. This class takes a whole keras-hub classifier, image
    or text (DeiT, Swin, MiT, RoBERTa, DistilBERT, DeBERTa-v3, ALBERT,
    XLM-RoBERTa, RoFormer-V2, ViT, BERT, ...), finds every attention
    layer's output projection by layer type and role, and zeroes, in
    member `m`'s rows, the heads `head_masks[m]` prunes
    (`HydraModelBackbone`); the family's pooling and head layers stay, one
    head per member. Training-free as the paper's zero-shot members are:
    with the classifier's head reused, member `m` computes the classifier
    with the pruned heads removed. `call` returns member logits `(batch,
    members, classes)`.

    Every member computes every head here (the pruned ones are zeroed),
    in one pass over the input tiled to `(members * batch, ...)`: the
    members' accuracy and uncertainty are the paper's, the cost is
    `members` passes of the classifier. `HydraImageClassifier` (ViT) and
    `HydraTextClassifier` (BERT) fuse the pruned members into one grouped
    pass that skips the pruned heads (the paper's speed-up), and fine-tune
    members apart (`split_members` / `fuse`).

    Args:
        model: a built keras-hub classifier returning logits
            `(batch, classes)`. It is copied, not changed.
        head_masks: 0 / 1 masks `[members][layers][heads]` (or an array
            `(members, layers, heads)` when every layer has as many heads),
            the heads each member keeps in each attention layer, in the
            model's layer order, e.g. from
            `ensemble_zoo.pruning.sample_member_masks`. `None` (default)
            is one member that keeps every head.
        reuse_head: bool. `True` (default) starts every member's head as a
            copy of `model`'s; `False` initializes each member's head on
            its own.
        backbone: a `HydraModelBackbone`, instead of `model` (how the
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

    roberta = keras_hub.models.RobertaTextClassifier(
        backbone=keras_hub.models.RobertaBackbone(
            vocabulary_size=50, num_layers=2, num_heads=2, hidden_dim=8,
            intermediate_dim=16, max_sequence_length=8,
        ),
        num_classes=3,
        preprocessor=None,
    )
    # Three members, each without one head of the first layer.
    masks = np.ones((3, 2, 2), int)
    masks[0, 0, 0] = masks[1, 0, 1] = 0
    model = ez.models.HydraClassifier.from_model(roberta, masks)
    inputs = {
        "token_ids": np.ones((2, 8), "int32"),
        "padding_mask": np.ones((2, 8), "int32"),
    }
    model.predict(inputs, verbose=0).shape  # (2, 3, 3)
    ```
    """

    backbone_cls = HydraModelBackbone

    def __init__(
        self,
        model=None,
        head_masks=None,
        reuse_head=None,
        backbone=None,
        preprocessor=None,
        **kwargs,
    ):
        method_config = method_arguments(
            backbone,
            (HydraModelBackbone,),
            METHOD_DEFAULTS,
            head_masks=head_masks,
            reuse_head=reuse_head,
        )
        backbone = wrapping_backbone(
            HydraModelBackbone,
            backbone,
            kwargs.get("dtype"),
            method_config=method_config,
            model=model,
        )
        # One pass over the member-major batch: member m's rows keep its
        # heads and go through its head. Sets the method's arguments as
        # attributes.
        build_member_rows_task(self, backbone, preprocessor, backbone.num_members, **kwargs)

    model = backbone_attribute("model", "The classifier's copy whose heads the members prune.")
    network = backbone_attribute("network", "`model`'s graph with a head per member.")
    head_mask_layers = backbone_attribute(
        "head_mask_layers", "Every `HeadMask`, one per attention layer, in layer order."
    )
    heads = backbone_attribute(
        "heads", "The member heads (`GroupedDense` on member-major rows), in graph order."
    )

    def get_config(self):
        config = super().get_config()
        config.update(self.backbone.method_config)
        return config

    @classmethod
    def from_model(cls, model, head_masks=None, **kwargs):
        """Hydra members pruned from a copy of the keras-hub classifier
        `model` (which is not changed); the ensemble takes over its
        preprocessor. `kwargs` are the constructor's other arguments."""
        kwargs.setdefault("preprocessor", preprocessor_of(model))
        return cls(model, head_masks, **kwargs)

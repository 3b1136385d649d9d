import keras
import keras_hub

from ensemble_zoo.layers.grouped_dense import GroupedDense
from ensemble_zoo.models.ensemble_classifier import EnsembleClassifier
from ensemble_zoo.models.hydra import member_weights
from ensemble_zoo.models.hydra.hydra_conversions import fuse_hydra_members
from ensemble_zoo.models.hydra.hydra_conversions import hydra_from_specs
from ensemble_zoo.models.hydra.hydra_conversions import split_hydra_members
from ensemble_zoo.models.hydra.hydra_text_backbone import BERT_ARGUMENTS
from ensemble_zoo.models.hydra.hydra_text_backbone import HydraTextBackbone
from ensemble_zoo.models.keras_hub_vit import check_keras_hub_classifier
from ensemble_zoo.models.member_axis import check_backbone_class
from ensemble_zoo.models.member_axis import member_axis_config
from ensemble_zoo.models.member_axis import member_axis_logits
from ensemble_zoo.models.task_head import task_head
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_rate


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class HydraTextClassifier(EnsembleClassifier, keras_hub.models.TextClassifier):
    """Hydra Ensemble text classifier: pruned BERT members, fused.

    The text counterpart of `HydraImageClassifier` (the Hydra paper,
    "Ensembling Pruned Attention Heads for Uncertainty-Aware Efficient
    Transformers", §5.2): the members are copies of one BERT classifier that
    each keep a different subset of attention heads, fused into one forward
    pass over `(batch, members, tokens, dim)` with shared embeddings,
    per-member heads, layer norms, poolers and classifiers, and a merged (or
    grouped) MLP. `call` takes keras-hub's BERT inputs, a dict of int
    `(batch, tokens)` tensors `token_ids`, `segment_ids` and `padding_mask`
    (as a `keras_hub.models.BertTextClassifierPreprocessor` returns them), and
    returns member logits `(batch, members, classes)`.

    Args:
        backbone: a `HydraTextBackbone`.
        num_classes: int.
        dropout: float, dropout before the classifier heads. Defaults to
            `0.1` (keras-hub's `BertTextClassifier`).
        preprocessor: optional `keras_hub.models.TextClassifierPreprocessor`
            run on raw strings by `fit`, `predict` and `evaluate`.
        **kwargs: other `keras_hub.models.Task` arguments (`name`,
            `compile`).

    Example:

    ```python
    import keras_hub
    import numpy as np
    import ensemble_zoo as ez

    bert = keras_hub.models.BertTextClassifier(
        backbone=keras_hub.models.BertBackbone(
            vocabulary_size=100, num_layers=2, num_heads=4, hidden_dim=16,
            intermediate_dim=32, max_sequence_length=12,
        ),
        num_classes=2,
        preprocessor=None,
    )
    masks = np.ones((3, 2, 4), bool)  # (members, layers, heads)
    masks[0, :, 0] = masks[1, :, 1] = masks[2, :, 2] = False
    hydra = ez.models.HydraTextClassifier.from_keras_hub(bert, masks)
    inputs = {
        "token_ids": np.ones((2, 12), "int32"),
        "segment_ids": np.zeros((2, 12), "int32"),
        "padding_mask": np.ones((2, 12), "int32"),
    }
    hydra.predict(inputs, verbose=0).shape  # (2, 3, 2)
    ```
    """

    backbone_cls = HydraTextBackbone

    def __init__(self, backbone, num_classes, dropout=0.1, preprocessor=None, **kwargs):
        check_backbone_class(backbone, HydraTextBackbone)
        num_classes = check_positive_int(num_classes, "num_classes")
        dropout = check_rate(dropout, "dropout")
        # === Layers ===
        self.backbone = backbone
        self.preprocessor = preprocessor
        self.output_dropout, self.head = task_head(
            backbone, dropout, GroupedDense, num_classes, backbone.num_members
        )

        # === Functional Model ===
        # Every member's pooled output (BERT's pooler, per member).
        inputs = backbone.input
        outputs = member_axis_logits(backbone, inputs, None, self.output_dropout, self.head)
        keras_hub.models.Task.__init__(self, inputs=inputs, outputs=outputs, **kwargs)

        # === Config ===
        self.num_members = backbone.num_members
        self.num_classes = num_classes
        self.pooling = None
        self.dropout = dropout

    def get_config(self):
        return {**super().get_config(), **member_axis_config(self)}

    # === Conversions ===

    def split_members(self, trainable_embedding=True):
        """The members as separate one-member models (as
        `HydraImageClassifier.split_members`)."""
        return split_hydra_members(self, trainable_embedding)

    @classmethod
    def fuse(cls, members, mlp="merge"):
        """Fuses separately trained members into one Hydra model (as
        `HydraImageClassifier.fuse`)."""
        return fuse_hydra_members(cls, members, mlp)

    specs_of = staticmethod(member_weights.text_specs_from_hydra)
    load_specs = staticmethod(member_weights.load_text_specs)

    def _classifier_kwargs(self):
        return {"dropout": self.dropout}

    def _embedding_layers(self):
        return self.backbone.embedding_layers

    @classmethod
    def from_keras_hub(
        cls, classifier, head_masks=None, mlp="merge", attention_implementation="auto"
    ):
        """Hydra members pruned from a keras-hub `BertTextClassifier`.

        Args:
            classifier: a `keras_hub.models.BertTextClassifier` (softmax-free
                logits output).
            head_masks: 0/1 array `(members, num_layers, num_heads)`, the
                heads each member keeps; `None` keeps every head (one
                member equal to the keras-hub model).
            mlp: `"merge"` or `"grouped"`.
            attention_implementation: `"auto"`, `"einsum"` or `"fused"`,
                see `HydraAttention`; kept in the backbone's config and so
                in presets. Defaults to `"auto"`.
        """
        import keras_hub

        check_keras_hub_classifier(classifier, keras_hub.models.BertTextClassifier)
        backbone = classifier.backbone
        if head_masks is None:
            head_masks = [[[True] * backbone.num_heads] * backbone.num_layers]
        specs = member_weights.text_specs_from_keras_hub(classifier, head_masks)
        kwargs = {name: getattr(backbone, name) for name in BERT_ARGUMENTS}
        kwargs["attention_implementation"] = attention_implementation
        return hydra_from_specs(
            cls,
            specs,
            kwargs,
            classifier.num_classes,
            mlp,
            dropout=classifier.dropout,
            preprocessor=classifier.preprocessor,
        )

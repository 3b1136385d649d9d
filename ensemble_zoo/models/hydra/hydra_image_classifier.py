import keras
import keras_hub
import numpy as np

from ensemble_zoo.layers.grouped_dense import GroupedDense
from ensemble_zoo.models.ensemble_classifier import EnsembleClassifier
from ensemble_zoo.models.hydra import member_weights
from ensemble_zoo.models.hydra.hydra_backbone import HydraBackbone
from ensemble_zoo.models.hydra.hydra_conversions import fuse_hydra_members
from ensemble_zoo.models.hydra.hydra_conversions import hydra_from_specs
from ensemble_zoo.models.hydra.hydra_conversions import split_hydra_members
from ensemble_zoo.models.keras_hub_vit import check_keras_hub_classifier
from ensemble_zoo.models.member_axis import check_backbone_class
from ensemble_zoo.models.member_axis import member_axis_config
from ensemble_zoo.models.member_axis import member_axis_logits
from ensemble_zoo.models.member_head import check_pooling
from ensemble_zoo.models.task_head import task_head
from ensemble_zoo.models.vit_geometry import VIT_ARGUMENTS
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_rate


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class HydraImageClassifier(EnsembleClassifier, keras_hub.models.ImageClassifier):
    """Hydra Ensemble image classifier: pruned ViT members, fused.

    Members are copies of one ViT that each keep a different subset of
    attention heads (Hydra Ensembles; the Hydra paper, "Ensembling Pruned
    Attention Heads for Uncertainty-Aware Efficient Transformers"). The fused
    model runs all of them in one forward pass over
    `(batch, members, tokens, dim)`: shared embedding, per-member heads in one
    grouped attention, shared (merged) or per-member MLPs, per-member layer
    norms and classifier heads. `call` returns member logits
    `(batch, members, classes)`.

    Decisions where the paper is silent (see `../notes/hydra.md` §1.4):
    layer norms and classifier heads stay per member (exact, and the
    paper's parameter count matches per-member heads); members with
    unequal head counts are padded and masked; the embedding is shared
    and must be equal across members when fusing.

    Args:
        backbone: a `HydraBackbone`.
        num_classes: int.
        preprocessor: optional `keras_hub.models.ImageClassifierPreprocessor`
            (e.g. with a `ViTImageConverter`) that `fit`, `predict` and
            `evaluate` run on raw images. Defaults to `None`.
        pooling: `"token"` (the class token, default) or `"gap"`.
        dropout: float, dropout before the classifier heads. Defaults to
            `0.0`.
        **kwargs: other `keras_hub.models.Task` arguments (`name`,
            `compile`).

    Example:

    ```python
    import keras_hub
    import numpy as np
    import ensemble_zoo as ez

    base = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits")
    vit = base.members[0]  # a keras_hub.models.ViTImageClassifier
    masks = np.ones((3, 4, 6), bool)  # (members, layers, heads)
    masks[0, :, 0] = masks[1, :, 1] = masks[2, :, 2] = False
    hydra = ez.models.HydraImageClassifier.from_keras_hub(vit, masks)
    x, _ = ez.datasets.load_arrays("digits", "test")
    hydra.predict(x, verbose=0).shape  # (289, 3, 8)
    ```
    """

    backbone_cls = HydraBackbone

    def __init__(
        self, backbone, num_classes, preprocessor=None, pooling="token", dropout=0.0, **kwargs
    ):
        check_backbone_class(backbone, HydraBackbone)
        num_classes = check_positive_int(num_classes, "num_classes")
        pooling = check_pooling(pooling)
        dropout = check_rate(dropout, "dropout")
        # === Layers ===
        self.backbone = backbone
        self.preprocessor = preprocessor
        self.output_dropout, self.head = task_head(
            backbone, dropout, GroupedDense, num_classes, backbone.num_members
        )

        # === Functional Model ===
        inputs = backbone.input
        outputs = member_axis_logits(backbone, inputs, pooling, self.output_dropout, self.head)
        keras_hub.models.Task.__init__(self, inputs=inputs, outputs=outputs, **kwargs)

        # === Config ===
        self.num_members = backbone.num_members
        self.num_classes = num_classes
        self.pooling = pooling
        self.dropout = dropout

    def get_config(self):
        return {**super().get_config(), **member_axis_config(self)}

    # === Conversions ===

    def split_members(self, trainable_embedding=True):
        """The members as separate one-member models, heads sliced out.

        Member `m` keeps only its own heads (structurally: fewer slots, not
        a mask). With `mlp="merge"` every member gets the shared MLP. Use
        this to fine-tune members separately (the paper's recipe) before
        `fuse`-ing them again. Every member shares this model's
        preprocessor.

        Args:
            trainable_embedding: bool. `False` freezes each member's
                embedding, which `fuse` requires to be equal across members
                (the paper keeps it frozen).
        """
        return split_hydra_members(self, trainable_embedding)

    @classmethod
    def fuse(cls, members, mlp="merge"):
        """Fuses separately trained members into one Hydra model.

        Args:
            members: list of models of this class (e.g. from
                `split_members()`, then fine-tuned); each may hold several
                members. Their embeddings must be equal (keep them frozen
                while fine-tuning) and their architectures must match apart
                from the kept heads.
            mlp: `"merge"` (the paper's choice: the members' MLP weights
                are averaged, so the fused model equals the members only
                where their MLPs agree) or `"grouped"` (exact: every member
                keeps its own MLP, at `members` x the MLP parameters).

        The fused model takes the preprocessor of `members[0]`.
        """
        return fuse_hydra_members(cls, members, mlp)

    specs_of = staticmethod(member_weights.specs_from_hydra)
    load_specs = staticmethod(member_weights.load_specs)

    def _classifier_kwargs(self):
        return {"pooling": self.pooling, "dropout": self.dropout}

    def _embedding_layers(self):
        return [self.backbone.embedding]

    @classmethod
    def from_keras_hub(
        cls, classifier, head_masks=None, mlp="merge", attention_implementation="auto"
    ):
        """Hydra members pruned from a keras-hub `ViTImageClassifier`.

        Args:
            classifier: a `keras_hub.models.ViTImageClassifier` (pooling
                `"token"` or `"gap"`, no `intermediate_dim`).
            head_masks: 0/1 array `(members, num_layers, num_heads)`: the
                heads each member keeps (e.g. from
                `ensemble_zoo.pruning.taylor_member_masks` or
                `circuit_member_masks`). A `(num_layers, num_heads)` mask is
                one member; `None` keeps every head (one member equal to
                the keras-hub model).
            mlp: `"merge"` or `"grouped"`. The members start from the same
                MLP, so both are exact here; they differ after members are
                fine-tuned separately (see `fuse`).
            attention_implementation: `"auto"`, `"einsum"` or `"fused"`,
                see `HydraAttention`; kept in the backbone's config and so
                in presets. Defaults to `"auto"`.

        Returns:
            A `HydraImageClassifier` whose member `m` equals the keras-hub
            model with every head outside `head_masks[m]` removed.
        """
        import keras_hub

        check_keras_hub_classifier(classifier, keras_hub.models.ViTImageClassifier)
        if getattr(classifier, "intermediate_dim", None) is not None:
            raise ValueError(
                "ViT classifiers with an `intermediate_dim` pre-logits layer are not supported."
            )
        backbone = classifier.backbone
        if head_masks is None:
            head_masks = np.ones((1, backbone.num_layers, backbone.num_heads), bool)
        specs = member_weights.specs_from_keras_hub(classifier, head_masks)
        return hydra_from_specs(
            cls,
            specs,
            dict(_backbone_kwargs(backbone), attention_implementation=attention_implementation),
            classifier.output_dense.units,
            mlp,
            pooling=classifier.pooling,
            dropout=float(classifier.dropout),
            preprocessor=classifier.preprocessor,
        )


def _backbone_kwargs(vit_backbone):
    """HydraBackbone arguments reproducing a keras-hub ViTBackbone."""
    kwargs = {name: getattr(vit_backbone, name) for name in VIT_ARGUMENTS}
    kwargs["image_shape"] = tuple(kwargs["image_shape"])
    return kwargs

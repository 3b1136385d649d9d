import keras
import keras_hub

from ensemble_zoo.layers.grouped_dense import GroupedDense
from ensemble_zoo.models.ensemble_classifier import EnsembleClassifier
from ensemble_zoo.models.keras_hub_vit import plain_vit_classifier
from ensemble_zoo.models.keras_hub_vit import vit_parts
from ensemble_zoo.models.member_axis import check_backbone_class
from ensemble_zoo.models.member_axis import member_axis_config
from ensemble_zoo.models.member_axis import member_axis_logits
from ensemble_zoo.models.member_head import check_pooling
from ensemble_zoo.models.packed_ensemble.packed_ensemble_backbone import PackedEnsembleBackbone
from ensemble_zoo.models.packed_ensemble.packed_member_weights import load_member_into_keras_hub
from ensemble_zoo.models.task_head import task_head
from ensemble_zoo.models.vit_geometry import VIT_ARGUMENTS
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_rate


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class PackedEnsembleImageClassifier(EnsembleClassifier, keras_hub.models.ImageClassifier):
    """Packed-Ensembles image classifier: M narrow ViTs, one grouped pass.

    A `PackedEnsembleBackbone` (see there: widths `alpha * D / M`,
    `gamma` groups per member) and one classifier per member (a
    `GroupedDense`, torch-uncertainty's `last=True` packed layer). `call`
    returns member logits `(batch, members, classes)`; `fit` trains every
    member on the same batches with the mean of the member
    cross-entropies, from scratch as the Packed-Ensembles paper does.

    Args:
        backbone: a `PackedEnsembleBackbone`.
        num_classes: int.
        preprocessor: optional `keras_hub.models.ImageClassifierPreprocessor`
            run on raw images by `fit`, `predict` and `evaluate`.
        pooling: `"token"` (default) or `"gap"`.
        dropout: float, dropout before the heads. Defaults to `0.0`.
        **kwargs: other `keras_hub.models.Task` arguments (`name`,
            `compile`).

    Example:

    ```python
    import numpy as np
    import ensemble_zoo as ez

    backbone = ez.models.PackedEnsembleBackbone(
        image_shape=(8, 8, 1), patch_size=2, num_layers=4, num_heads=6,
        hidden_dim=48, mlp_dim=96, num_members=4, alpha=2,
    )
    model = ez.models.PackedEnsembleImageClassifier(backbone, num_classes=8)
    model.predict(np.zeros((5, 8, 8, 1), "float32"), verbose=0).shape
    # (5, 4, 8)
    ```
    """

    backbone_cls = PackedEnsembleBackbone

    def __init__(
        self, backbone, num_classes, preprocessor=None, pooling="token", dropout=0.0, **kwargs
    ):
        check_backbone_class(backbone, PackedEnsembleBackbone)
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

    # === keras-hub interop ===

    @classmethod
    def like_keras_hub(cls, model, num_members=4, alpha=2, gamma=1, num_classes=None, **kwargs):
        """A new (untrained) Packed-Ensemble of a keras-hub ViT's geometry.

        Packed-Ensembles train from scratch (their members are narrower
        than the base model, so pretrained weights do not fit): this takes
        the patching, depth, heads and widths of `model` and packs them
        with `num_members`, `alpha` and `gamma`.

        Args:
            model: a `keras_hub.models.ViTImageClassifier` or `ViTBackbone`.
            num_members, alpha, gamma: see `PackedEnsembleBackbone`.
            num_classes: int; defaults to the classifier's. Required for a
                backbone.
            **kwargs: other `PackedEnsembleBackbone` arguments (e.g.
                `dropout_rate`, defaulting to the model's).
        """
        head_kwargs = {}
        backbone, _, classes = vit_parts(model, head_kwargs)
        num_classes = classes if num_classes is None else num_classes
        if num_classes is None:
            raise ValueError("`num_classes` is required when `model` is a backbone.")
        config = {key: getattr(backbone, key) for key in VIT_ARGUMENTS}
        config.update(kwargs)
        packed = PackedEnsembleBackbone(num_members=num_members, alpha=alpha, gamma=gamma, **config)
        return cls(packed, num_classes, **head_kwargs)

    def member_model(self, member):
        """Member `member` as a plain `keras_hub.models.ViTImageClassifier`
        of the member's width and heads (block-diagonal projections when
        `gamma > 1`). Running the members one by one gives this model's
        logits (tested)."""
        import keras_hub

        if not 0 <= member < self.num_members:
            raise ValueError(f"`member` must be in [0, {self.num_members - 1}]; got {member!r}.")
        b = self.backbone
        config = {name: getattr(b, name) for name in VIT_ARGUMENTS}
        config.update(
            num_heads=b.member_num_heads, hidden_dim=b.member_hidden_dim, mlp_dim=b.member_mlp_dim
        )
        vit = keras_hub.models.ViTBackbone(**config)
        classifier = plain_vit_classifier(self, vit)
        load_member_into_keras_hub(self, classifier, member)
        return classifier

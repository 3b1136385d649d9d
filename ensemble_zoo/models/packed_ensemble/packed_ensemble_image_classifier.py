import keras
import keras_hub

from ensemble_zoo.models.keras_hub_vit import plain_vit_classifier
from ensemble_zoo.models.keras_hub_vit import vit_parts
from ensemble_zoo.models.member_axis_classifier import MemberAxisClassifier
from ensemble_zoo.models.packed_ensemble.packed_ensemble_backbone import PackedEnsembleBackbone
from ensemble_zoo.models.packed_ensemble.packed_member_weights import load_member_into_keras_hub
from ensemble_zoo.models.vit_geometry import VIT_ARGUMENTS


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class PackedEnsembleImageClassifier(MemberAxisClassifier, keras_hub.models.ImageClassifier):
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
        dropout: float, dropout before the heads.
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

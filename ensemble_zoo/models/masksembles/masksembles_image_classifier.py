import keras
import keras_hub
import numpy as np
from keras import ops

from ensemble_zoo.layers.masksembles_mask import MasksemblesMask
from ensemble_zoo.models.ensemble_classifier import EnsembleClassifier
from ensemble_zoo.models.keras_hub_vit import check_image_backbone
from ensemble_zoo.models.keras_hub_vit import plain_vit_classifier
from ensemble_zoo.models.keras_hub_vit import vit_parts
from ensemble_zoo.models.masksembles.masksembles_backbone import MasksemblesViTBackbone
from ensemble_zoo.models.masksembles.masksembles_backbone import masksembles_backbone
from ensemble_zoo.models.masksembles.masksembles_backbone import mlp_sites
from ensemble_zoo.models.member_head import check_pooling
from ensemble_zoo.models.member_head import member_logits
from ensemble_zoo.models.member_passes import check_member_batching
from ensemble_zoo.models.member_tiled import from_keras_hub_parts
from ensemble_zoo.models.member_tiled import member_rows
from ensemble_zoo.models.member_tiled import members_of_rows
from ensemble_zoo.models.method_backbone import plain_backbone_copy
from ensemble_zoo.models.task_head import task_head
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_rate


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class MasksemblesImageClassifier(EnsembleClassifier, keras_hub.models.ImageClassifier):
    """Masksembles on a keras-hub ViT: one network, M fixed channel masks.

    Masksembles (Durasov et al., CVPR 2021; a baseline of the
    LoRA-Ensemble paper, "LoRA-Ensemble: Efficient Uncertainty Modelling for
    Self-Attention Networks") replaces MC dropout's random masks by `M`
    fixed binary masks with controlled overlap (`scale`, see
    `ez.layers.masksembles_masks`). Where the masks go in a transformer is
    not in the papers; the decision here: on the hidden units of every
    MLP block (after the first dense layer and its GELU, where keras-hub's
    ViT applies dropout) and on the pooled features before the shared
    classifier, each site with its own masks. The image batch is tiled
    member-major, member `m`'s copy passes mask `m` at every site, and
    `call` returns `(batch, members, classes)`. All weights are shared and
    trainable.

    Args:
        backbone: a `MasksemblesViTBackbone` built with the arguments
            below, or a built `keras_hub.models.ViTBackbone`: the
            classifier then runs a new backbone with its config and
            weights plus the masks (`MasksemblesViTBackbone.from_backbone`);
            `backbone` is not changed.
        num_classes: int.
        num_members: int. Defaults to `4` (the paper's `n`).
        scale: float >= 1, the masks' overlap. Defaults to `2.0` (the
            paper's CIFAR setting).
        seed: optional int for the masks; keyword-only. The method
            arguments (`num_members`, `scale`, `seed`) left `None` are the
            backbone's when it is a `MasksemblesViTBackbone`, else the
            defaults named here.
        preprocessor: optional keras-hub preprocessor run by `fit`,
            `predict` and `evaluate` on raw images.
        pooling: `"token"` (the class token, default) or `"gap"` (the mean
            of the tokens).
        dropout: float, dropout before the head. Defaults to `0.0`
            (keras-hub's `ViTImageClassifier`).
        member_batching: `"auto"` (default), `"tiled"` or `"sequential"`
            (`ensemble_zoo.models.member_passes`).
        **kwargs: other `keras_hub.models.Task` arguments (`name`,
            `compile`).

    Example:

    ```python
    import ensemble_zoo as ez

    base = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits")
    model = ez.models.MasksemblesImageClassifier.from_keras_hub(
        base.members[0], num_members=4, scale=2.0, seed=0
    )
    x, _ = ez.datasets.load_arrays("digits", "test")
    model.predict(x, verbose=0).shape  # (289, 4, 8)
    ```
    """

    backbone_cls = MasksemblesViTBackbone

    def __init__(
        self,
        backbone,
        num_classes,
        num_members=None,
        scale=None,
        *,
        seed=None,
        preprocessor=None,
        pooling="token",
        dropout=0.0,
        member_batching="auto",
        **kwargs,
    ):
        check_image_backbone(backbone)
        member_batching = check_member_batching(member_batching)
        backbone = masksembles_backbone(backbone, num_members=num_members, scale=scale, seed=seed)
        num_classes = check_positive_int(num_classes, "num_classes")
        pooling = check_pooling(pooling)
        dropout = check_rate(dropout, "dropout")
        config = backbone.method_config
        num_members = config["num_members"]
        # === Layers ===
        self.backbone = backbone
        self.preprocessor = preprocessor
        self.feature_mask = MasksemblesMask(
            num_members,
            config["scale"],
            seed=None if config["seed"] is None else config["seed"] + len(mlp_sites(backbone)),
            dtype=backbone.dtype_policy,
            name="feature_masks",
        )
        self.output_dropout, self.head = task_head(
            backbone, dropout, keras.layers.Dense, num_classes
        )

        # === Functional Model ===
        # Rows of member m pass its mask in every MLP and before the head.
        inputs = backbone.input
        features = member_rows(backbone, inputs, num_members, pooling)
        x = self.head(self.output_dropout(self.feature_mask(features)))
        outputs = member_logits(members_of_rows(x, num_members))
        keras_hub.models.Task.__init__(self, inputs=inputs, outputs=outputs, **kwargs)

        # === Config ===
        self.num_members = int(num_members)
        self.num_classes = num_classes
        self.pooling = pooling
        self.dropout = dropout
        self.scale = float(config["scale"])
        self.seed = config["seed"]
        self._set_member_batching(member_batching)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_classes": self.num_classes,
                "num_members": self.num_members,
                "scale": self.scale,
                "seed": self.seed,
                "pooling": self.pooling,
                "dropout": self.dropout,
                "member_batching": self.member_batching,
            }
        )
        return config

    @property
    def mask_layers(self):
        """Every `MasksemblesMask`: one per MLP block, then the features'."""
        return [mlp.dense_1.mask for mlp in mlp_sites(self.backbone)] + [self.feature_mask]

    # === Members as plain keras-hub models ===

    def member_model(self, member):
        """Member `member` as a plain `keras_hub.models.ViTImageClassifier`:
        its masks (rescaled) folded into the kernel rows of every MLP's
        second layer and of the classifier, which read the masked units. Running the members
        one by one
        gives this model's logits (tested)."""
        if not 0 <= member < self.num_members:
            raise ValueError(f"`member` must be in [0, {self.num_members - 1}]; got {member!r}.")
        plain = plain_backbone_copy(self.backbone)
        mask_ids = {id(v) for layer in self.mask_layers for v in layer.weights}
        sources = {w.path: w for w in self.backbone.weights if id(w) not in mask_ids}
        if len(sources) != len(plain.weights):
            raise RuntimeError("The converted backbone's weights do not match the plain ViT's.")
        for target in plain.weights:
            target.assign(_np(sources[target.path]))
        for mlp, mask_layer in zip(mlp_sites(plain), self.mask_layers, strict=False):
            factor = _factors(mask_layer, member)
            mlp.dense_2.kernel.assign(_np(mlp.dense_2.kernel) * factor[:, None])
        model = plain_vit_classifier(self, plain)
        factor = _factors(self.feature_mask, member)
        model.output_dense.kernel.assign(_np(self.head.kernel) * factor[:, None])
        model.output_dense.bias.assign(_np(self.head.bias))
        return model

    # === keras-hub conversion ===

    @classmethod
    def from_keras_hub(cls, model, num_members=None, num_classes=None, reuse_head=None, **kwargs):
        """Masksembles on a copy of a keras-hub ViT (`model` is unchanged).

        Args:
            model: a `keras_hub.models.ViTImageClassifier` or `ViTBackbone`.
            num_members: int. Defaults to `4`.
            num_classes: int; defaults to the classifier's. Required for a
                backbone.
            reuse_head: bool; `True` starts the shared head from the
                classifier's. `None` (default) reuses it when the class
                counts match.
            **kwargs: other constructor arguments (`scale`, `seed`, ...).
        """
        kwargs["num_members"] = num_members
        task, dense = from_keras_hub_parts(cls, vit_parts, model, num_classes, reuse_head, kwargs)
        if dense is not None:  # the shared head
            task.head.kernel.assign(_np(dense.kernel))
            task.head.bias.assign(_np(dense.bias))
        return task


def _np(variable):
    return np.asarray(ops.convert_to_numpy(variable))


def _factors(mask_layer, member):
    return np.asarray(ops.convert_to_numpy(mask_layer.member_factors()))[member]

import keras
import keras_hub
import numpy as np
from keras import ops

from ensemble_zoo.models.ensemble_classifier import EnsembleClassifier
from ensemble_zoo.models.head_reuse import resolve_head
from ensemble_zoo.models.keras_hub_vit import check_image_backbone
from ensemble_zoo.models.keras_hub_vit import plain_vit_classifier
from ensemble_zoo.models.keras_hub_vit import vit_parts
from ensemble_zoo.models.loop_checks import is_tf_dataset
from ensemble_zoo.models.member_head import check_pooling
from ensemble_zoo.models.member_head import member_logits
from ensemble_zoo.models.member_head import pool_tokens
from ensemble_zoo.models.method_backbone import method_arguments
from ensemble_zoo.models.method_backbone import method_backbone
from ensemble_zoo.models.method_backbone import plain_backbone_copy
from ensemble_zoo.models.mimo.mimo_backbone import MIMOViTBackbone
from ensemble_zoo.models.mimo.mimo_batches import MIMOBatches
from ensemble_zoo.models.task_head import task_head
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_rate


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class MIMOImageClassifier(EnsembleClassifier, keras_hub.models.ImageClassifier):
    """MIMO on a keras-hub ViT: M inputs stacked on channels, M heads.

    MIMO (Havasi et al., ICLR 2021; the baseline of the Hydra paper, the
    LoRA-Ensemble paper and the E³ paper: "Ensembling Pruned Attention Heads
    for Uncertainty-Aware Efficient Transformers", "LoRA-Ensemble: Efficient
    Uncertainty Modelling for Self-Attention Networks" and "Sparse MoEs meet
    Efficient Ensembles") trains one network on `M` independent examples at
    once: their images are stacked on the channel axis of the patch
    embedding (member `m` in channels `[m * C, (m + 1) * C)`), and `M`
    classifier heads (one `Dense` of `M * classes` units) predict each
    member's label. At test time the same image is fed to every input, so
    one pass gives `M` predictions: `call` on `(batch, H, W, C)` images
    returns `(batch, members, classes)`. `call` also takes stacked
    `(batch, H, W, M * C)` inputs, as `fit` builds them.

    `fit(x, y)` (arrays, or a batched dataset of `(images, labels)`)
    builds the MIMO batches itself (`MIMOBatches`): batch repetition
    (`batch_repetition` copies of each batch) and input repetition (a
    share `input_repetition` of each batch shows all members the same
    example), with per-member labels `(batch, members)` that the zoo's
    loss and accuracy accept. The Hydra paper trains MIMO with `M = 3`,
    `input_repetition = 0.5`, `batch_repetition = 4`, the defaults here.

    Args:
        backbone: a built `keras_hub.models.ViTBackbone` whose images have
            `num_members * C` channels.
        num_classes: int.
        num_members: int. Defaults to the backbone's (a `MIMOViTBackbone`)
            or `3`.
        input_repetition: float in [0, 1], Havasi et al.'s `rho`.
            Defaults to `0.5`.
        batch_repetition: int. Defaults to `4`.
        pooling: `"token"` (default) or `"gap"`.
        dropout: float, dropout before the heads.
        seed: optional int for the batch shuffles of `fit`.
        preprocessor: optional `keras_hub.models.ImageClassifierPreprocessor`
            run on raw images by `fit`, `predict` and `evaluate`.
        **kwargs: other `keras_hub.models.Task` arguments (`name`,
            `compile`).

    Example:

    ```python
    import ensemble_zoo as ez

    base = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits")
    model = ez.models.MIMOImageClassifier.from_keras_hub(
        base.members[0], num_members=3
    )
    x, y = ez.datasets.load_arrays("digits", "test")
    model.predict(x, verbose=0).shape  # (289, 3, 8)
    ```
    """

    backbone_cls = MIMOViTBackbone

    def __init__(
        self,
        backbone,
        num_classes,
        num_members=None,
        input_repetition=0.5,
        batch_repetition=4,
        pooling="token",
        dropout=0.0,
        seed=None,
        preprocessor=None,
        **kwargs,
    ):
        check_image_backbone(backbone)
        num_members = check_positive_int(
            method_arguments(
                backbone, (MIMOViTBackbone,), {"num_members": 3}, num_members=num_members
            )["num_members"],
            "num_members",
        )
        num_classes = check_positive_int(num_classes, "num_classes")
        pooling = check_pooling(pooling)
        dropout = check_rate(dropout, "dropout")
        input_repetition = check_rate(input_repetition, "input_repetition")
        batch_repetition = check_positive_int(batch_repetition, "batch_repetition")
        stacked_shape = tuple(backbone.inputs[0].shape[1:])
        if stacked_shape[-1] is None or stacked_shape[-1] % num_members:
            raise ValueError(
                f"`backbone` takes {stacked_shape[-1]} input channels, which "
                f"must be `num_members` ({num_members}) x the image channels."
            )
        backbone = method_backbone(
            backbone, (MIMOViTBackbone,), {"num_members": num_members}, lambda b: None
        )
        # === Layers ===
        self.backbone = backbone
        self.preprocessor = preprocessor
        self.output_dropout, self.head = task_head(
            backbone, dropout, keras.layers.Dense, num_members * num_classes
        )

        # === Functional Model ===
        # On the stacked inputs (member m in channels [m C, (m + 1) C));
        # `call` stacks M copies of plain images first (test time).
        inputs = backbone.input
        x = pool_tokens(backbone(inputs), pooling)
        x = self.head(self.output_dropout(x))
        x = keras.layers.Reshape(
            (num_members, num_classes), dtype=backbone.dtype_policy, name="member_heads"
        )(x)
        outputs = member_logits(x)
        keras_hub.models.Task.__init__(self, inputs=inputs, outputs=outputs, **kwargs)

        # === Config ===
        self.num_classes = num_classes
        self.num_members = num_members
        self.input_repetition = input_repetition
        self.batch_repetition = batch_repetition
        self.pooling = pooling
        self.dropout = dropout
        self.seed = seed
        self.member_input_shape = stacked_shape[:-1] + (stacked_shape[-1] // num_members,)
        self.stacked_input_shape = stacked_shape
        # Plain or stacked images: `_check_inputs` checks which.
        self.input_spec = keras.InputSpec(ndim=len(stacked_shape) + 1)

    def _check_inputs(self, inputs):
        # Stacked `(batch, H, W, M * C)` inputs (what `fit` feeds) or plain
        # `(batch, H, W, C)` images (test time).
        shape = getattr(inputs, "shape", None)
        stacked = self.num_members > 1 and shape is not None and len(shape) == 4
        if stacked and shape[-1] == self.stacked_input_shape[-1]:
            return super()._check_inputs(inputs, expected=self.stacked_input_shape)
        return super()._check_inputs(inputs)

    def call(self, inputs, training=None, mask=None, **kwargs):
        """The functional graph on stacked inputs. Plain `(batch, H, W, C)`
        images are stacked `M` times first (test time: the same image for
        every member): the one step outside the graph, as MIMO's model
        takes two input layouts."""
        self._check_inputs(inputs)
        if inputs.shape[-1] != self.stacked_input_shape[-1]:
            inputs = ops.concatenate([inputs] * self.num_members, axis=-1)
        return super().call(inputs, training=training, mask=mask, **kwargs)

    def fit(self, x=None, y=None, batch_size=None, epochs=1, **kwargs):
        """Trains on MIMO batches built from `(x, y)` arrays or from a
        batched dataset `x` of `(images, labels)` (see the class
        docstring). `batch_size` (arrays only) counts examples before
        batch repetition; other arguments are `keras.Model.fit`'s."""
        if isinstance(x, MIMOBatches):
            data = x
        else:
            self._check_loop_call(
                x,
                y,
                batch_size=batch_size,
                epochs=epochs,
                sample_weight=kwargs.get("sample_weight"),
            )
            x = self._preprocessed(x)
            if hasattr(x, "shape"):
                # Plain images: `MIMOBatches` stacks them (a stacked
                # `(batch, H, W, M * C)` array is not a training input).
                EnsembleClassifier._check_inputs(self, x)
            self._check_data(x)
            data = MIMOBatches(
                x,
                y,
                self.num_members,
                self.input_repetition,
                self.batch_repetition,
                batch_size=batch_size or 32,
                seed=self.seed,
            )
        kwargs.pop("shuffle", None)
        return keras.Model.fit(self, data, epochs=epochs, **kwargs)

    def _preprocessed(self, x):
        """`x` through the preprocessor (if any): MIMO stacks preprocessed
        images, so keras-hub's pipeline cannot run after the stacking.
        Images are cast to float32 first, as `predict`'s pipeline resizes
        them (an eager image converter called on uint8 resizes in uint8,
        rounding to whole pixel values)."""
        if self.preprocessor is None:
            return x
        if is_tf_dataset(x):
            import tensorflow as tf

            return x.map(
                lambda images, labels: (self.preprocessor(tf.cast(images, "float32")), labels)
            )
        return np.concatenate(
            [
                ops.convert_to_numpy(self.preprocessor(np.asarray(x[i : i + 256], "float32")))
                for i in range(0, len(x), 256)
            ]
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_classes": self.num_classes,
                "num_members": self.num_members,
                "input_repetition": self.input_repetition,
                "batch_repetition": self.batch_repetition,
                "pooling": self.pooling,
                "dropout": self.dropout,
                "seed": self.seed,
            }
        )
        return config

    # === Members as plain keras-hub models ===

    def member_model(self, member):
        """Member `member` as a plain `keras_hub.models.ViTImageClassifier`
        on `C`-channel images: the channel-sum of the patch kernel (all
        inputs see the same image at test time) and head `member`. Running
        the members one by one gives this model's test-time logits
        (tested)."""
        if not 0 <= member < self.num_members:
            raise ValueError(f"`member` must be in [0, {self.num_members - 1}]; got {member!r}.")
        plain = plain_backbone_copy(self.backbone, image_shape=list(self.member_input_shape))
        channels = self.member_input_shape[-1]
        for target, source in zip(plain.weights, self.backbone.weights, strict=True):
            value = _np(source)
            if tuple(target.shape) != value.shape:  # the patch kernel
                value = value.reshape(value.shape[:2] + (self.num_members, channels, -1)).sum(
                    axis=2
                )
            target.assign(value)
        model = plain_vit_classifier(self, plain)
        kernel = _np(self.head.kernel).reshape(-1, self.num_members, self.num_classes)
        model.output_dense.kernel.assign(kernel[:, member])
        model.output_dense.bias.assign(_np(self.head.bias).reshape(self.num_members, -1)[member])
        return model

    # === keras-hub conversion ===

    @classmethod
    def from_keras_hub(cls, model, num_members=3, num_classes=None, reuse_head=None, **kwargs):
        """MIMO from a pretrained keras-hub ViT, as the E³ paper builds it
        from V-MoE checkpoints (App. B.3): the patch-embedding kernel is
        replicated over the `M` stacked inputs and the head over the `M`
        outputs, both scaled by `1 / M` (the head bias is replicated
        unscaled). With the same image on every input the converted
        backbone computes exactly the pretrained features, and each member
        starts with `1 / M` of the pretrained logits plus the bias.

        Args:
            model: a `keras_hub.models.ViTImageClassifier` or `ViTBackbone`
                (copied, unchanged).
            num_members: int. Defaults to `3`.
            num_classes: int; defaults to the classifier's. Required for a
                backbone.
            reuse_head: bool; `None` (default) replicates the classifier's
                head when the class counts match.
            **kwargs: other constructor arguments.
        """
        backbone, head, classes = vit_parts(model, kwargs)
        num_classes, reuse_head = resolve_head(classes, num_classes, reuse_head)
        num_members = check_positive_int(num_members, "num_members")
        config = backbone.get_config()
        shape = tuple(config["image_shape"])
        config["image_shape"] = list(shape[:-1]) + [shape[-1] * num_members]
        wide = type(backbone).from_config(config)
        for target, source in zip(wide.weights, backbone.weights, strict=True):
            value = _np(source)
            if tuple(target.shape) != value.shape:  # the patch kernel (p, p, C, D)
                value = np.concatenate([value / num_members] * num_members, axis=2)
            target.assign(value)
        ensemble = cls(wide, num_classes, num_members=num_members, **kwargs)
        if reuse_head:
            kernel = _np(head.kernel) / num_members
            ensemble.head.kernel.assign(np.concatenate([kernel] * num_members, axis=1))
            ensemble.head.bias.assign(np.concatenate([_np(head.bias)] * num_members))
        return ensemble


def _np(variable):
    return np.asarray(ops.convert_to_numpy(variable))

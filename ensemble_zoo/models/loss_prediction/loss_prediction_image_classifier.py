import keras
import keras_hub
import numpy as np
from keras import ops

from ensemble_zoo.layers.loss_prediction_head import LossPredictionHead
from ensemble_zoo.losses.loss_prediction_losses import pairwise_ranking_loss
from ensemble_zoo.losses.loss_prediction_losses import squared_error_loss
from ensemble_zoo.models.dict_inputs import dict_input_signature
from ensemble_zoo.models.loss_prediction.loss_prediction_backbone import LossPredictionModelBackbone
from ensemble_zoo.models.loss_prediction.loss_prediction_backbone import LossPredictionViTBackbone
from ensemble_zoo.models.member_head import pool_tokens
from ensemble_zoo.models.method_backbone import method_backbone
from ensemble_zoo.models.zoo_task import ZooTask
from ensemble_zoo.utils import backend as backend_utils
from ensemble_zoo.utils.sublayers import set_trainable
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import static_shape

UNCERTAINTY_LOSSES = ("ranking", "mse")
POOLINGS = ("token", "gap", None)


def loss_prediction_objective(
    labels, logits, uncertainty, classification_weight, uncertainty_weight, uncertainty_loss, margin
):
    """`w_c * mean CE + w_u * L_u(stop_gradient(CE per sample), u)`.

    The ranking loss pairs consecutive samples; in an odd batch the last
    sample has no partner and only enters the CE term (the authors' code
    raises instead, which made `evaluate` fail on the 289-image digits
    test split at batch size 64)."""
    per_sample = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    target = ops.stop_gradient(per_sample)
    if uncertainty_loss == "ranking":
        # An odd batch (the last one of an epoch or of `evaluate`) leaves
        # its last sample out of the pairs; the CE counts it. The batch is
        # static under JAX and PyTorch, possibly unknown in a TF graph.
        batch = static_shape(target)[0]
        if batch is None:
            even = (ops.shape(target)[0] // 2) * 2
            target = ops.slice(target, [0], [even])
            uncertainty = ops.slice(uncertainty, [0], [even])
            unc = ops.where(even > 0, pairwise_ranking_loss(target, uncertainty, margin), 0.0)
        elif batch == 1:  # no pair at all: the ranking term is 0
            unc = ops.zeros((), dtype=target.dtype)
        else:
            even = batch - batch % 2
            unc = pairwise_ranking_loss(target[:even], uncertainty[:even], margin)
    else:
        unc = squared_error_loss(target, uncertainty)
    total = uncertainty_weight * unc
    if classification_weight:
        total = total + classification_weight * ops.mean(per_sample)
    return total


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LossPredictionImageClassifier(ZooTask, keras_hub.models.ImageClassifier):
    """A ViT classifier with a loss-prediction uncertainty head.

    "Pretrained Visual Uncertainties" (Kirchhof et al.): a
    `LossPredictionHead` on the pooled embedding predicts, per sample, the
    classifier's own cross-entropy. `call` returns a dict with `"logits"`
    `(batch, classes)` and `"uncertainty"` `(batch,)`. `fit` minimizes
    `classification_weight * CE + uncertainty_weight * L_u`, where `L_u`
    is the pairwise ranking loss (default; pairs of a shuffled batch, so
    batches must be even) or the squared error, against the detached
    per-sample CE. The head sits behind a stop-gradient, so the gradient
    reaching the backbone and classifier is exactly that of the CE alone.

    With `freeze_backbone=True` and `freeze_classifier=True` (the paper's
    setting) only the head trains, the backbone runs in inference mode,
    and the head can be trained from cached embeddings instead
    (`ensemble_zoo.models.loss_prediction.cache_embeddings` and
    `train_head_from_cache`), which gives the same head.

    Args:
        backbone: a built keras-hub `ViTBackbone`, any functional Keras
            model returning `(batch, tokens, dim)` features or already
            pooled `(batch, dim)` embeddings (then `pooling=None`), or a
            `LossPredictionModelBackbone` (the embedding of a keras-hub
            classifier of any family, image or text, as `from_keras_hub`
            builds it; `pooling=None`).
        num_classes: int.
        pooling: `"token"` (class token, default) or `"gap"`, as keras-hub's
            `ViTImageClassifier`; `None` for a backbone that returns pooled
            `(batch, dim)` embeddings.
        head_hidden_units: hidden sizes of the head. Defaults to `(512, 512)`.
        uncertainty_loss: `"ranking"` (default) or `"mse"`.
        margin: float, the ranking hinge margin. Defaults to `0.1`.
        classification_weight: float. Defaults to `1.0`; it is ignored
            (0) whenever the classifier is frozen, as in the authors' code
            (`ce_loss_multiplier = 1 - freeze_classifier`): a frozen
            classifier means its predictions are the ones the uncertainty
            is about, so a trainable backbone learns from the uncertainty
            loss alone (with `stop_gradient=False`; with the stop-gradient
            it does not change). Before, the CE was kept unless the
            backbone was frozen too; the reference decides.
        uncertainty_weight: float. Defaults to `1.0`.
        stop_gradient: bool, the head's stop-gradient. Defaults to `True`;
            `False` is the "vanilla loss prediction" ablation whose head
            gradients reach the backbone (paper Eq. 1, Fig. 3a).
        freeze_backbone: bool. Defaults to `False`.
        freeze_classifier: bool. Defaults to `False`.
        **kwargs: other `keras.Model` arguments.

    Example:

    ```python
    import numpy as np
    import ensemble_zoo as ez

    vit = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits").members[0]
    model = ez.models.LossPredictionImageClassifier.from_keras_hub(
        vit, head_hidden_units=(64, 64), freeze_backbone=True,
        freeze_classifier=True,
    )
    x, y = ez.datasets.load_arrays("digits", "train")
    model.fit(x, y, batch_size=64, epochs=1, verbose=0)  # trains the head only
    outputs = model.predict(x[:10], verbose=0)
    outputs["logits"].shape, outputs["uncertainty"].shape  # (10, 8), (10,)
    ```
    """

    backbone_cls = LossPredictionViTBackbone

    def __init__(
        self,
        backbone,
        num_classes,
        pooling="token",
        head_hidden_units=(512, 512),
        uncertainty_loss="ranking",
        margin=0.1,
        classification_weight=1.0,
        uncertainty_weight=1.0,
        stop_gradient=True,
        freeze_backbone=False,
        freeze_classifier=False,
        preprocessor=None,
        **kwargs,
    ):
        if pooling not in POOLINGS:
            raise ValueError(f"`pooling` must be one of {POOLINGS}; got {pooling!r}.")
        if uncertainty_loss not in UNCERTAINTY_LOSSES:
            raise ValueError(
                f"`uncertainty_loss` must be one of {UNCERTAINTY_LOSSES}; got {uncertainty_loss!r}."
            )
        output_shape = tuple(backbone.outputs[0].shape)
        if pooling is None and len(output_shape) != 2:
            raise ValueError(
                "With `pooling=None` the backbone must return pooled (batch, "
                f"dim) embeddings; its output has shape {output_shape}."
            )
        if pooling is not None and len(output_shape) != 3:
            raise ValueError(
                f"With `pooling={pooling!r}` the backbone must return (batch, "
                f"tokens, dim) features; its output has shape {output_shape} "
                "(pass `pooling=None` for pooled embeddings)."
            )
        if not isinstance(backbone, LossPredictionModelBackbone):
            backbone = method_backbone(backbone, (LossPredictionViTBackbone,), {}, lambda b: None)
        # === Layers ===
        self.backbone = backbone
        self.preprocessor = preprocessor
        self.classifier = keras.layers.Dense(
            check_positive_int(num_classes, "num_classes"),
            dtype=backbone.dtype_policy,
            name="predictions",
        )
        self.uncertainty_head = LossPredictionHead(
            hidden_units=head_hidden_units,
            stop_gradient=stop_gradient,
            dtype=backbone.dtype_policy,
            name="uncertainty_head",
        )

        # === Functional Model ===
        # Logits and uncertainty in float32 under any policy (the losses
        # see float32).
        inputs = backbone.input
        x = backbone(inputs)
        embeddings = x if pooling is None else pool_tokens(x, pooling)
        outputs = {
            "logits": keras.layers.Activation("linear", dtype="float32", name="logits")(
                self.classifier(embeddings)
            ),
            "uncertainty": keras.layers.Activation("linear", dtype="float32", name="uncertainty")(
                self.uncertainty_head(embeddings)
            ),
        }
        keras_hub.models.Task.__init__(self, inputs=inputs, outputs=outputs, **kwargs)

        # === Config ===
        self.num_classes = num_classes
        self.pooling = pooling
        self.head_hidden_units = tuple(head_hidden_units)
        self.uncertainty_loss = uncertainty_loss
        self.margin = float(margin)
        self.classification_weight = float(classification_weight)
        self.uncertainty_weight = float(uncertainty_weight)
        self.stop_gradient = bool(stop_gradient)
        self.freeze_backbone = bool(freeze_backbone)
        self.freeze_classifier = bool(freeze_classifier)
        # None for a backbone taking a dict (a keras-hub text classifier's
        # features): ZooTask then checks the dict against its inputs.
        self.image_shape = (
            None if isinstance(backbone.input, dict) else tuple(backbone.inputs[0].shape[1:])
        )
        self.embedding_dim = int(backbone.outputs[0].shape[-1])
        if self.freeze_backbone:
            set_trainable(self.backbone, False)
        if self.freeze_classifier:
            set_trainable(self.classifier, False)

    def embed(self, images, training=None):
        """The pooled embedding `(batch, dim)` the classifier and head read."""
        if self.freeze_backbone:
            training = False  # a frozen backbone runs in inference mode
        x = self.backbone(images, training=training)
        if self.pooling is None:
            return x
        return x[:, 0] if self.pooling == "token" else ops.mean(x, axis=1)

    @property
    def member_input_shape(self):
        """The shape of one input image, as `EnsembleClassifier` names it."""
        return self.image_shape

    def call_on_embeddings(self, embeddings):
        """Logits and uncertainty from pooled embeddings (e.g. cached).

        Both are float32 under any dtype policy: under mixed precision the
        layers compute in float16 / bfloat16, the losses see float32."""
        return {
            "logits": ops.cast(self.classifier(embeddings), "float32"),
            "uncertainty": ops.cast(self.uncertainty_head(embeddings), "float32"),
        }

    def call(self, images, training=None, mask=None, **kwargs):
        """The functional graph, after a shape check. With
        `freeze_backbone=True` it runs in inference mode: the frozen
        backbone must (its dropout off, as in the authors' code), and the
        classifier and head have no layer that the mode changes."""
        shape = None if self.image_shape is None else tuple(images.shape)
        if shape is not None and (
            len(shape) != len(self.image_shape) + 1
            or any(
                a is not None and b is not None and a != b
                for a, b in zip(shape[1:], self.image_shape)
            )
        ):
            raise ValueError(
                f"{type(self).__name__} expects images of shape (batch,) + "
                f"{self.image_shape}; got {shape}."
            )
        if self.freeze_backbone:
            training = False
        with backend_utils.zoo_workarounds():  # see ensemble_zoo.utils.workarounds
            return super().call(images, training=training, mask=mask, **kwargs)

    def compile(self, optimizer="auto", **kwargs):
        """Configures training; the loss is the model's own objective.

        Args:
            optimizer: `"auto"` (the default, also after construction)
                means `keras.optimizers.AdamW(1e-3)`; calling
                `compile(jit_compile=True)` alone keeps AdamW rather than
                Keras' default RMSprop.
            **kwargs: passed to `keras.Model.compile` (e.g. `jit_compile`).
        """
        if optimizer == "auto":
            optimizer = keras.optimizers.AdamW(1e-3)
        # Not keras-hub's classifier defaults: the loss is the model's own.
        keras.Model.compile(self, optimizer=optimizer, **kwargs)

    def predict_uncertainty(self, x, batch_size=None, verbose=0):
        """Class probabilities and the predicted loss (the uncertainty).

        Args:
            x: images `(batch,) + image_shape`, or a dataset of them.
            batch_size: passed to `predict`.
            verbose: passed to `predict`. Defaults to `0`.

        Returns:
            dict of NumPy arrays: `"probabilities"` `(batch, classes)`,
            `"logits"` and `"uncertainty"` `(batch,)` (higher means a
            larger expected loss; only its order is meaningful).
        """
        outputs = self.predict(x, batch_size=batch_size, verbose=verbose)
        logits = outputs["logits"]
        shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return {
            "probabilities": shifted / shifted.sum(axis=-1, keepdims=True),
            "logits": logits,
            "uncertainty": outputs["uncertainty"],
        }

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = loss_prediction_objective(
            y,
            y_pred["logits"],
            y_pred["uncertainty"],
            0.0 if self.freeze_classifier else self.classification_weight,
            self.uncertainty_weight,
            self.uncertainty_loss,
            self.margin,
        )
        for extra in self.losses:
            loss = loss + extra
        return loss

    _serving_output_names = ("logits", "probabilities", "uncertainty")

    def _serving_outputs(self, images):
        outputs = self(images, training=False)
        return {
            "logits": outputs["logits"],
            "probabilities": ops.softmax(outputs["logits"], axis=-1),
            "uncertainty": outputs["uncertainty"],
        }

    def _export_input_signature(self, format=None):
        if self.image_shape is None:
            return [dict_input_signature(self, format)]
        return [keras.InputSpec(shape=(None,) + self.image_shape, dtype="float32", name="images")]

    def get_config(self):
        config = keras_hub.models.Task.get_config(self)
        config.update(
            {
                "num_classes": self.num_classes,
                "pooling": self.pooling,
                "head_hidden_units": list(self.head_hidden_units),
                "uncertainty_loss": self.uncertainty_loss,
                "margin": self.margin,
                "classification_weight": self.classification_weight,
                "uncertainty_weight": self.uncertainty_weight,
                "stop_gradient": self.stop_gradient,
                "freeze_backbone": self.freeze_backbone,
                "freeze_classifier": self.freeze_classifier,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in ("backbone", "preprocessor"):
            if isinstance(config.get(key), dict):
                config[key] = keras.saving.deserialize_keras_object(config[key])
        if config.get("trainable") is True:
            del config["trainable"]  # see EnsembleClassifier.from_config
        return cls(**config)

    # === Presets ===

    @classmethod
    def from_preset(cls, preset, load_weights=True, dtype=None, preprocessor="auto"):
        """Loads a loss-prediction preset (by name) or preset directory.

        Args:
            preset: str, e.g. `"loss_prediction_vit_tiny_digits"`, or the
                path of a directory written by `save_to_preset`.
            load_weights: bool. `False` builds the architecture with fresh
                weights. Defaults to `True`.
            dtype: optional dtype policy for every layer (e.g.
                `"mixed_bfloat16"`). Defaults to the global policy.
            preprocessor: `"auto"` keeps the preset's preprocessor
                (`predict` takes raw images); `None` drops it (`predict`
                takes images in [0, 1], as calling the model does).
        """
        from ensemble_zoo.presets import load_preset

        return load_preset(
            preset, cls=cls, load_weights=load_weights, dtype=dtype, preprocessor=preprocessor
        )

    def save_to_preset(self, preset_dir, metadata=None, include_weights=True):
        """Writes a preset in keras-hub's layout (see
        `ensemble_zoo.models.EnsembleClassifier.save_to_preset`)."""
        from ensemble_zoo.presets import save_preset

        metadata = dict(metadata or {})
        metadata.setdefault("num_members", 1)
        save_preset(self, preset_dir, metadata=metadata, include_weights=include_weights)

    @classmethod
    def from_keras_hub(cls, model, num_classes=None, **kwargs):
        """A loss-prediction model on a copy of a keras-hub classifier.

        Args:
            model: a `keras_hub.models.ViTImageClassifier` (its backbone,
                pooling and `Dense` head are copied; no `intermediate_dim`)
                or a `ViTBackbone` (then `num_classes` is required and the
                classifier is new); or a keras-hub classifier of any other
                family, image or text: the backbone is then the
                classifier's graph up to its last `Dense` layer (the
                family's own pooling and hidden head layers,
                `ensemble_zoo.models.member_heads.head_features`), which
                becomes the classifier, and the head reads its input.
            num_classes: int, for a backbone.
            **kwargs: other constructor arguments.
        """
        import keras_hub

        if isinstance(model, keras_hub.models.ViTImageClassifier):
            if model.intermediate_dim is not None:
                raise ValueError("ViT classifiers with `intermediate_dim` are not supported.")
            kwargs.setdefault("pooling", model.pooling)
            # The source task's preprocessor comes along: `predict` takes
            # raw images as the keras-hub model does.
            kwargs.setdefault("preprocessor", model.preprocessor)
            loss_model = cls(model.backbone, model.num_classes, **kwargs)
            loss_model.classifier.set_weights(model.output_dense.get_weights())
            return loss_model
        if isinstance(model, keras_hub.models.ViTBackbone):
            if num_classes is None:
                raise ValueError("Converting a backbone needs `num_classes`.")
            return cls(model, num_classes, **kwargs)
        if not isinstance(model, keras_hub.models.Task):
            raise ValueError(
                "`model` must be a keras-hub classifier (e.g. a keras_hub.models."
                f"ViTImageClassifier) or a ViTBackbone; got {type(model).__name__}."
            )
        backbone = LossPredictionModelBackbone(model, dtype=kwargs.get("dtype"))
        classes = int(backbone.head.units)
        if num_classes is not None and num_classes != classes:
            raise ValueError(
                f"`model` classifies {classes} classes; got `num_classes={num_classes}` "
                "(leave it `None` for a classifier)."
            )
        kwargs.setdefault("preprocessor", model.preprocessor)
        loss_model = cls(backbone, classes, pooling=None, **kwargs)
        loss_model.classifier.set_weights(backbone.head.get_weights())
        return loss_model

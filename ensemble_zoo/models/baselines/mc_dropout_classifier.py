import keras
import keras_hub

from ensemble_zoo.models.baselines.mc_dropout_backbone import MCDropoutBackbone
from ensemble_zoo.models.ensemble_classifier import EnsembleClassifier
from ensemble_zoo.models.ensemble_classifier import preprocessor_of
from ensemble_zoo.models.wrapped_models_backbone import backbone_attribute
from ensemble_zoo.models.wrapped_models_backbone import build_member_rows_task
from ensemble_zoo.models.wrapped_models_backbone import wrapping_backbone
from ensemble_zoo.utils.validation import check_positive_int


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class MCDropoutClassifier(EnsembleClassifier, keras_hub.models.ImageClassifier):
    """Monte Carlo dropout as an ensemble: M dropout samples in one pass.

    MC dropout (Gal & Ghahramani, 2016) keeps dropout on at test time and
    treats each stochastic forward pass as an ensemble member. Here the
    input is tiled once to `(members * batch, ...)` and the wrapped model
    runs once on it with dropout active, so the M samples are one batched
    call; `call` returns `(batch, members, classes)` like every zoo
    ensemble, and `predict_uncertainty` decomposes the uncertainty.

    Every `keras.layers.Dropout` in the model is used (for a keras-hub ViT:
    the embedding, attention-probability, block and head dropouts); `rate`
    overrides their rates, which is needed when the model was trained
    without dropout. The network is an `MCDropoutBackbone`: a copy of
    `model` (which is not changed) that always runs in training mode, its
    `BatchNormalization` layers frozen on their moving statistics (the
    dropout layers alone sample). Each dropout layer draws
    from its own seed generator, seeded from `seed`: two classifiers built
    with the same seed give the same samples for the same sequence of
    calls; successive calls give fresh samples.

    Args:
        model: a built single-input Keras classifier returning logits
            `(batch, classes)` (e.g. a keras-hub `ViTImageClassifier`).
        num_members: int, the number of dropout samples M.
        rate: optional float in `[0, 1)`, the rate of every dropout layer;
            `None` keeps the model's rates (or the backbone's).
        seed: optional int. Dropout layer `i` gets seed `seed + i`.
        backbone: an `MCDropoutBackbone`, instead of `model` (how the
            classifier is rebuilt from its config); `rate` and `seed` are
            then its own.
        preprocessor: optional `keras_hub.models.ImageClassifierPreprocessor`.
        **kwargs: other `keras_hub.models.Task` arguments (`name`, `dtype`,
            `compile`).

    Example:

    ```python
    import ensemble_zoo as ez

    vit = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits").members[0]
    mc = ez.models.MCDropoutClassifier.from_model(vit, num_members=8, rate=0.1, seed=0)
    x, _ = ez.datasets.load_arrays("digits", "test")
    mc.predict(x, verbose=0).shape  # (289, 8, 8)
    ```
    """

    backbone_cls = MCDropoutBackbone

    def _export_refusal(self, format):
        """Why `export` refuses `format` (`None`: it does not).

        With every dropout rate 0 the model is deterministic and exports
        everywhere. Otherwise it draws new masks at every call from seed
        generators whose state it updates: only a TensorFlow SavedModel
        written under TensorFlow keeps that state (as variables) and
        samples as Keras does; every other artifact would repeat the masks
        of the state it was traced with, which is not this model.
        """
        rates = [
            layer.rate
            for layer in self._flatten_layers(include_self=False)
            if isinstance(layer, keras.layers.Dropout)
        ]
        if not any(rates):
            return None
        if format == "tf_saved_model" and keras.config.backend() == "tensorflow":
            return None
        return (
            "MC dropout draws new dropout masks at every call from seed "
            "generators whose state the model updates; this artifact would "
            "repeat the masks of the state it was traced with (only a "
            "SavedModel written under TensorFlow keeps the state), which is "
            "not this model's prediction. Export under TensorFlow with "
            "format='tf_saved_model', serve it from Keras "
            "(`predict_uncertainty`), or export a deterministic method "
            "(e.g. Masksembles, whose masks are fixed)."
        )

    # Its outputs are random: `export` checks the artifact's outputs'
    # names and shapes only.
    @property
    def _stochastic_outputs(self):
        return self._export_refusal("onnx") is not None

    def __init__(
        self,
        model=None,
        num_members=None,
        rate=None,
        seed=None,
        backbone=None,
        preprocessor=None,
        **kwargs,
    ):
        backbone = wrapping_backbone(
            MCDropoutBackbone,
            backbone,
            kwargs.get("dtype"),
            method_config={"rate": rate, "seed": seed},
            model=model,
        )
        num_members = check_positive_int(num_members, "num_members")
        # The M samples are one batched call on the member-major tiled batch.
        # Sets `rate` and `seed`, the backbone's.
        build_member_rows_task(self, backbone, preprocessor, num_members, **kwargs)

    model = backbone_attribute("model", "The network that is sampled (a copy held by `backbone`).")

    def get_config(self):
        config = super().get_config()
        config.update({"num_members": self.num_members, **self.backbone.method_config})
        return config

    @classmethod
    def from_model(cls, model, num_members, rate=None, seed=None, **kwargs):
        """MC dropout on `model` (the backbone holds a copy). The copy of a
        keras-hub task loses its preprocessor and the ensemble takes it
        over, as in `DeepEnsembleClassifier.from_model`."""
        kwargs.setdefault("preprocessor", preprocessor_of(model))
        return cls(model, num_members, rate=rate, seed=seed, **kwargs)

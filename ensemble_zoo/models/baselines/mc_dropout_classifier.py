import keras
import keras_hub

from ensemble_zoo.models.wrapped_models_backbone import member_io_shapes
from ensemble_zoo.models.wrapped_models_backbone import wrapped_models
from ensemble_zoo.models.wrapped_models_backbone import MCDropoutBackbone
from ensemble_zoo.models.ensemble_classifier import SubclassedEnsembleClassifier
from ensemble_zoo.models.ensemble_classifier import preprocessor_of
from ensemble_zoo.ops.member_tiling import tile_members
from ensemble_zoo.ops.member_tiling import untile_members
from ensemble_zoo.utils.model_copies import copy_model
from ensemble_zoo.utils.naming import path_scope
from ensemble_zoo.utils.validation import check_positive_int


def dropout_layers(model):
    """The `keras.layers.Dropout` layers of `model`, in a fixed order."""
    return [
        layer
        for layer in model._flatten_layers(include_self=False)
        if isinstance(layer, keras.layers.Dropout)
    ]


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class MCDropoutClassifier(SubclassedEnsembleClassifier, keras_hub.models.ImageClassifier):
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
    without dropout. The model runs in training mode, so models with
    `BatchNormalization` (whose training mode uses batch statistics) are
    refused. Each dropout layer draws from its own seed generator, seeded
    from `seed`: two classifiers built with the same seed give the same
    samples for the same sequence of calls; successive calls give fresh
    samples.

    Args:
        model: a built single-input Keras classifier returning logits
            `(batch, classes)` (e.g. a keras-hub `ViTImageClassifier`). Its
            dropout layers are changed in place; use `from_model` to keep
            the original.
        num_members: int, the number of dropout samples M.
        rate: optional float in `[0, 1)`, the rate of every dropout layer;
            `None` keeps the model's rates.
        seed: optional int. Dropout layer `i` gets seed `seed + i`.
        backbone: an `MCDropoutBackbone`, instead of `model` (how the
            classifier is rebuilt from its config).
        **kwargs: other `keras.Model` arguments.

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

    def __init__(self, model=None, num_members=None, rate=None, seed=None, backbone=None, **kwargs):
        model = wrapped_models(model, backbone, "model", MCDropoutBackbone)
        input_shape, num_classes = member_io_shapes(model, 0)
        if rate is not None and not 0.0 <= rate < 1.0:
            raise ValueError(f"`rate` must be in [0, 1) or None; got {rate!r}.")
        layers = model._flatten_layers(include_self=False)
        if any(isinstance(layer, keras.layers.BatchNormalization) for layer in layers):
            raise ValueError(
                "MCDropoutClassifier runs the model in training mode, which "
                "changes BatchNormalization layers; `model` has some."
            )
        dropouts = dropout_layers(model)
        if not dropouts:
            raise ValueError(f"`model` '{model.name}' has no Dropout layer.")
        super().__init__(**kwargs)
        # === Layers ===
        self.backbone = backbone or MCDropoutBackbone(model=model)
        # === Config ===
        self.num_members = check_positive_int(num_members, "num_members")
        self.num_classes = num_classes
        self.member_input_shape = input_shape
        self.rate = rate
        self.seed = seed
        self._set_dropout(dropouts)
        self.build((None,) + input_shape)
        self.compile()

    def _set_dropout(self, dropouts):
        for index, layer in enumerate(dropouts):
            if self.rate is not None:
                layer.rate = float(self.rate)
            current = getattr(layer, "seed_generator", None)
            if layer.rate == 0 or (current is not None and self.seed is None):
                continue
            # A fresh generator: Keras creates none for a rate-0 layer, and
            # under PyTorch an unseeded one draws from torch's global RNG.
            layer._tracker.unlock()
            if current is not None and current in layer._seed_generators:
                layer._seed_generators.remove(current)
            with path_scope(f"{self.name}/dropout_{index}"):  # unique paths
                layer.seed_generator = keras.random.SeedGenerator(
                    None if self.seed is None else self.seed + index
                )
            layer._tracker.lock()

    def build(self, input_shape):
        self.built = True

    @property
    def model(self):
        """The wrapped network (held by `backbone`)."""
        return self.backbone.model

    def call_members(self, inputs, training=None):
        tiled = tile_members(inputs, self.num_members)
        logits = self.model(tiled, training=True)
        return untile_members(logits, self.num_members)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.num_members, self.num_classes)

    def get_config(self):
        return {
            **super().get_config(),
            "backbone": keras.saving.serialize_keras_object(self.backbone),
            "num_members": self.num_members,
            "rate": self.rate,
            "seed": self.seed,
        }

    @classmethod
    def from_model(cls, model, num_members, rate=None, seed=None, **kwargs):
        """MC dropout on a copy of `model` (same config and weights).

        The copy of a keras-hub task loses its preprocessor and the
        ensemble takes it over, as in `DeepEnsembleClassifier.from_model`.
        """
        kwargs.setdefault("preprocessor", preprocessor_of(model))
        return cls(copy_model(model), num_members, rate=rate, seed=seed, **kwargs)

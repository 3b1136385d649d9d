import keras

from ensemble_zoo.models.wrapped_models_backbone import WrappedModelsBackbone
from ensemble_zoo.models.wrapped_models_backbone import member_io_shapes
from ensemble_zoo.models.wrapped_models_backbone import own_wrapped_model
from ensemble_zoo.models.wrapped_models_backbone import wrapped_inputs
from ensemble_zoo.utils.naming import path_scope


def dropout_layers(model):
    """The `keras.layers.Dropout` layers of `model`, in a fixed order."""
    return [
        layer
        for layer in model._flatten_layers(include_self=False)
        if isinstance(layer, keras.layers.Dropout)
    ]


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class MCDropoutBackbone(WrappedModelsBackbone):
    """A copy of a classifier whose dropout stays on: MC dropout's network.

    The backbone holds a copy of `model` (same config and weights; `model`
    itself is not changed) and sets every `keras.layers.Dropout` in it:
    `rate` replaces their rates when given, and dropout layer `i` draws
    from its own seed generator seeded `seed + i`. Its `call` always runs
    the network in training mode, whatever `training` says: a Monte Carlo
    sample is what every call returns. This is the one place in the zoo
    where a backbone overrides the mode it is called in. The copy's
    `BatchNormalization` layers are frozen (`trainable = False`), which
    Keras runs on their moving statistics in every mode: the dropout layers
    alone sample, and `fit` leaves the normalization as trained (setting
    the ensemble's `trainable` back to `True` would unfreeze them).

    Args:
        model: a built Keras classifier taking one tensor or a dict of
            them (a keras-hub text classifier) and returning logits
            `(batch, classes)`, with at least one `Dropout` layer.
        rate: optional float in `[0, 1)`, the rate of every dropout layer;
            `None` keeps the model's rates.
        seed: optional int; `None` leaves unseeded layers unseeded.
        dtype: optional dtype policy for every layer of the copy.
        adopt_models: bool, keyword-only. `True` holds the given models as
            they are, without a copy or a dtype change: what `from_config`
            passes (models it has just built under the config's dtype).
            Defaults to `False`.
        **kwargs: other `keras_hub.models.Backbone` arguments (`name`).

    Returns (call): one dropout sample of the logits, `(batch, classes)`.
    """

    wrapped = ("model",)
    method_keys = ("rate", "seed")

    def __init__(self, model, rate=None, seed=None, dtype=None, *, adopt_models=False, **kwargs):
        input_spec, num_classes = member_io_shapes(model)
        if rate is not None and not 0.0 <= rate < 1.0:
            raise ValueError(f"`rate` must be in [0, 1) or None; got {rate!r}.")
        if not dropout_layers(model):
            raise ValueError(f"`model` '{model.name}' has no Dropout layer.")
        model = own_wrapped_model(model, dtype, copy=True, adopt=adopt_models)
        self._set_dropout(dropout_layers(model), rate, seed, model.name)
        for layer in model._flatten_layers(include_self=False):
            if isinstance(layer, keras.layers.BatchNormalization):
                layer.trainable = False  # moving statistics in training mode

        # === Functional Model ===
        inputs = wrapped_inputs(input_spec)
        outputs = model(inputs)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        # === Layers ===
        self.model = model

        # === Config ===
        self.rate = None if rate is None else float(rate)
        self.seed = seed
        self.num_classes = num_classes

    @staticmethod
    def _set_dropout(dropouts, rate, seed, scope):
        for index, layer in enumerate(dropouts):
            if rate is not None:
                layer.rate = float(rate)
            current = getattr(layer, "seed_generator", None)
            if layer.rate == 0 and current is not None:
                # As Keras builds a rate-0 Dropout (no generator), so that a
                # copy from the config has the same variables.
                layer._tracker.unlock()
                layer._seed_generators.remove(current)
                layer.seed_generator = None
                layer._tracker.lock()
            if layer.rate == 0 or (current is not None and seed is None):
                continue
            # A fresh generator: Keras creates none for a rate-0 layer, and
            # under PyTorch an unseeded one draws from torch's global RNG.
            layer._tracker.unlock()
            if current is not None and current in layer._seed_generators:
                layer._seed_generators.remove(current)
            with path_scope(f"{scope}/dropout_{index}"):  # unique paths
                layer.seed_generator = keras.random.SeedGenerator(
                    None if seed is None else seed + index
                )
            layer._tracker.lock()

    def call(self, inputs, training=None, mask=None):
        # Dropout on in every call (see the class docstring).
        return super().call(inputs, training=True, mask=mask)

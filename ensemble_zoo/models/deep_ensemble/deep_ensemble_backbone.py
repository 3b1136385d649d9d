import keras
from keras import ops

from ensemble_zoo.models.wrapped_models_backbone import WrappedModelsBackbone
from ensemble_zoo.models.wrapped_models_backbone import member_io_shapes
from ensemble_zoo.models.wrapped_models_backbone import own_wrapped_model
from ensemble_zoo.models.wrapped_models_backbone import wrapped_inputs
from ensemble_zoo.models.wrapped_models_backbone import wrapped_scope


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class DeepEnsembleBackbone(WrappedModelsBackbone):
    """The members of a `DeepEnsembleClassifier`, run one after another.

    Args:
        members: non-empty list of built Keras classifiers with the same
            inputs and number of classes, each mapping a batch (one tensor
            `(batch, ...)`, or a dict of them as keras-hub's text
            classifiers take) to logits `(batch, classes)`. The
            backbone holds copies of them (same config and weights, under
            `dtype` when given; the given models are not changed), built
            in the name scopes `members_0`, `members_1`, ... so that their
            layer paths differ.
        dtype: optional dtype policy for every layer of every member.
        adopt_models: bool, keyword-only. `True` holds the given models as
            they are, without a copy or a dtype change: what `from_config`
            passes (models it has just built under the config's dtype).
            Defaults to `False`.
        **kwargs: other `keras_hub.models.Backbone` arguments (`name`).

    Returns (call): member logits `(batch, members, classes)`.

    Example:

    ```python
    import keras
    import ensemble_zoo as ez

    def member(seed):
        keras.utils.set_random_seed(seed)
        inputs = keras.Input((8, 8, 1))
        x = keras.layers.Flatten()(inputs)
        return keras.Model(inputs, keras.layers.Dense(8)(x))

    backbone = ez.models.DeepEnsembleBackbone([member(0), member(1)])
    backbone(keras.ops.ones((2, 8, 8, 1))).shape  # (2, 2, 8)
    ```
    """

    wrapped = ("members",)

    def __init__(self, members, dtype=None, *, adopt_models=False, **kwargs):
        if (
            isinstance(members, keras.Layer)
            or not isinstance(members, (list, tuple))
            or not members
        ):
            raise ValueError(
                f"`members` must be a non-empty list of Keras models; got {members!r}."
            )
        members = [
            own_wrapped_model(
                m, dtype, copy=True, scope=wrapped_scope("members", i), adopt=adopt_models
            )
            for i, m in enumerate(members)
        ]
        shapes = [member_io_shapes(m, i) for i, m in enumerate(members)]
        input_spec, num_classes = shapes[0]
        for i, (shape, classes) in enumerate(shapes[1:], start=1):
            if shape != input_spec or classes != num_classes:
                raise ValueError(
                    "All members must share the input shape and the number "
                    f"of classes: members[0] maps {input_spec} to "
                    f"{num_classes} classes, members[{i}] maps {shape} to "
                    f"{classes}."
                )

        # === Functional Model ===
        inputs = wrapped_inputs(input_spec)
        outputs = ops.stack([member(inputs) for member in members], axis=1)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        # === Config ===
        self.members = members
        self.num_members = len(members)
        self.num_classes = num_classes

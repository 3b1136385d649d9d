import keras
from keras import ops

from ensemble_zoo.layers.member_layer_arguments import layer_config
from ensemble_zoo.layers.member_layer_arguments import set_member_layer_arguments
from ensemble_zoo.utils.validation import check_bool
from ensemble_zoo.utils.validation import check_built_features
from ensemble_zoo.utils.validation import check_floating
from ensemble_zoo.utils.validation import check_member_axis_input
from ensemble_zoo.utils.validation import check_real
from ensemble_zoo.utils.validation import static_shape

#: `GroupedLayerNormalization`'s config entries, each kept as the attribute of that name.
_CONFIG_KEYS = (
    "num_members",
    "epsilon",
    "center",
    "scale",
    "beta_initializer",
    "gamma_initializer",
)


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class GroupedLayerNormalization(keras.layers.Layer):
    """Layer normalization with a separate scale and offset per member.

    Normalizes the last axis of `(batch, members, ..., features)` inputs
    like `keras.layers.LayerNormalization(axis=-1)`, then applies member
    `m`'s own `gamma[m]` and `beta[m]` (each of shape `(features,)`). Equal
    to `members` separate `LayerNormalization` layers applied to the slices
    `inputs[:, m]`.

    Args:
        num_members: int, the size of the member axis (axis 1).
        epsilon: float added to the variance. Defaults to `1e-3`, as in
            `keras.layers.LayerNormalization`; pass the epsilon of the
            model you convert (keras-hub ViT uses `1e-6`).
        center: bool, whether to add `beta`. Defaults to `True`.
        scale: bool, whether to multiply by `gamma`. Defaults to `True`.
        beta_initializer: Defaults to `"zeros"`.
        gamma_initializer: Defaults to `"ones"`.
        **kwargs: other `keras.layers.Layer` arguments.

    Example:

    ```python
    import numpy as np
    from ensemble_zoo.layers import GroupedLayerNormalization

    norm = GroupedLayerNormalization(num_members=3, epsilon=1e-6)
    x = np.random.normal(size=(2, 3, 5, 16)).astype("float32")
    y = norm(x)  # (2, 3, 5, 16)
    norm.gamma.shape  # (3, 16)
    ```
    """

    def __init__(
        self,
        num_members,
        epsilon=1e-3,
        center=True,
        scale=True,
        beta_initializer="zeros",
        gamma_initializer="ones",
        **kwargs,
    ):
        super().__init__(**kwargs)
        set_member_layer_arguments(self, locals())
        self.epsilon = check_real(epsilon, "epsilon", low=0.0, low_open=True)
        self.center = check_bool(center, "center")
        self.scale = check_bool(scale, "scale")
        self.supports_masking = True

    def build(self, input_shape):
        input_shape = check_member_axis_input(self, input_shape)
        dim = input_shape[-1]
        self.gamma = None
        self.beta = None
        if self.scale:
            self.gamma = self.add_weight(
                name="gamma", shape=(self.num_members, dim), initializer=self.gamma_initializer
            )
        if self.center:
            self.beta = self.add_weight(
                name="beta", shape=(self.num_members, dim), initializer=self.beta_initializer
            )

    def call(self, inputs):
        shape = check_member_axis_input(self, static_shape(inputs))
        check_floating(inputs, "inputs")
        dim = self.gamma if self.gamma is not None else self.beta
        if dim is not None:
            check_built_features(self, shape, (dim.shape[-1],))
        # Keras' fused normalization (3x faster than mean/var on XLA CPU),
        # then each member's own scale and offset.
        outputs = ops.layer_normalization(inputs, axis=-1, epsilon=self.epsilon)
        param_shape = (1, self.num_members) + (1,) * (len(shape) - 3)
        param_shape += (shape[-1],)
        if self.scale:
            outputs = outputs * ops.reshape(self.gamma, param_shape)
        if self.center:
            outputs = outputs + ops.reshape(self.beta, param_shape)
        return outputs

    def compute_output_shape(self, input_shape):
        return check_member_axis_input(self, input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(layer_config(self, _CONFIG_KEYS))
        return config

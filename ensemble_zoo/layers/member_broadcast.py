import keras
from keras import ops

from ensemble_zoo.utils.validation import check_positive_int


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class MemberBroadcast(keras.layers.Layer):
    """Repeats a shared tensor for every member: `(batch, ...)` ->
    `(batch, members, ...)`.

    The entry point of fused ensembles whose members share the input
    (and embedding) but keep their own residual streams afterwards.

    Args:
        num_members: int, the size of the new member axis (axis 1).
        **kwargs: other `keras.layers.Layer` arguments.

    Example:

    ```python
    import numpy as np
    from ensemble_zoo.layers import MemberBroadcast

    tokens = np.zeros((2, 17, 48), "float32")
    MemberBroadcast(3)(tokens).shape  # (2, 3, 17, 48)
    ```
    """

    def __init__(self, num_members, **kwargs):
        super().__init__(**kwargs)
        self.num_members = check_positive_int(num_members, "num_members")

    def call(self, inputs):
        return ops.repeat(ops.expand_dims(inputs, 1), self.num_members, axis=1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.num_members) + tuple(input_shape[1:])

    def get_config(self):
        return {**super().get_config(), "num_members": self.num_members}

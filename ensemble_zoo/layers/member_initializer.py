import keras


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class MemberInitializer(keras.initializers.Initializer):
    """Initializes each member's slice of a `(members, ...)` weight on its own.

    Keras computes fan-in / fan-out of a 3-D kernel `(members, d_in, d_out)`
    as if the member axis were a convolution's receptive field, which would
    shrink Glorot / He scales by `members`. This wrapper calls the base
    initializer once per member with the per-member shape `shape[1:]`, so
    every member is initialized exactly as a separate layer would be. A base
    initializer with an integer seed `s` gives member `m` the seed `s + m`,
    so members differ and the result is reproducible.

    Args:
        initializer: the per-member initializer (name, instance or config).

    Example:

    ```python
    import keras
    from ensemble_zoo.layers import MemberInitializer

    init = MemberInitializer(keras.initializers.GlorotUniform(seed=1))
    kernel = init((3, 16, 8))  # three independently initialized members
    ```
    """

    def __init__(self, initializer):
        self.initializer = keras.initializers.get(initializer)

    def _member_initializer(self, member):
        config = self.initializer.get_config()
        seed = config.get("seed")
        if isinstance(seed, int):
            config["seed"] = seed + member
            return self.initializer.__class__.from_config(config)
        return self.initializer

    def __call__(self, shape, dtype=None):
        shape = tuple(shape)
        if len(shape) < 2:
            raise ValueError(
                "MemberInitializer needs a shape (members, ...); "
                f"got {shape}."
            )
        slices = [
            self._member_initializer(m)(shape[1:], dtype=dtype)
            for m in range(shape[0])
        ]
        return keras.ops.stack(slices, axis=0)

    def get_config(self):
        return {
            "initializer": keras.initializers.serialize(self.initializer)
        }

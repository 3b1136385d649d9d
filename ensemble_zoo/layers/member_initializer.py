import random

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
    so members differ and the result is reproducible; an unseeded one draws
    `s` from Python's `random` (seeded by `keras.utils.set_random_seed`).

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

    def _member_initializers(self, num_members):
        config = self.initializer.get_config()
        if "seed" not in config:
            # Deterministic initializers (zeros, ones, constant).
            return [self.initializer] * num_members
        seed = config["seed"]
        if not isinstance(seed, int):
            # An unseeded Keras initializer repeats its values on every
            # call, so draw a fresh base seed from Python's RNG, which
            # `keras.utils.set_random_seed` also seeds.
            seed = random.randint(0, 2**30)
        members = []
        for m in range(num_members):
            config["seed"] = seed + m
            members.append(self.initializer.__class__.from_config(config))
        return members

    def __call__(self, shape, dtype=None):
        shape = tuple(shape)
        if len(shape) < 2:
            raise ValueError(f"MemberInitializer needs a shape (members, ...); got {shape}.")
        slices = [init(shape[1:], dtype=dtype) for init in self._member_initializers(shape[0])]
        return keras.ops.stack(slices, axis=0)

    def get_config(self):
        return {"initializer": keras.initializers.serialize(self.initializer)}

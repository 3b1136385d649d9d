import math

import keras
from keras import ops

from ensemble_zoo.layers.int8_kernels import Int8KernelsMixin
from ensemble_zoo.layers.member_layer_arguments import add_member_bias
from ensemble_zoo.layers.member_layer_arguments import layer_config
from ensemble_zoo.layers.member_layer_arguments import set_member_layer_arguments
from ensemble_zoo.layers.member_selection import selected_count
from ensemble_zoo.layers.member_selection import selected_member
from ensemble_zoo.utils.validation import check_choice
from ensemble_zoo.utils.validation import check_floating
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_real
from ensemble_zoo.utils.validation import is_integer
from ensemble_zoo.utils.validation import static_shape

#: How the fast weights `r_m`, `s_m` start.
FAST_WEIGHT_INITIALIZERS = ("normal", "random_sign")


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class FastWeightInitializer(keras.initializers.Initializer):
    """BatchEnsemble's rank-1 fast weights: `N(1, stddev)` or random signs.

    Args:
        kind: `"normal"` (entries from `N(1, stddev)`) or `"random_sign"`
            (entries -1 or +1 with probability 1/2).
        stddev: float, the standard deviation of `"normal"`.
        seed: optional int.
    """

    def __init__(self, kind="normal", stddev=0.5, seed=None):
        self.kind = check_choice(kind, "fast_weight_initializer", FAST_WEIGHT_INITIALIZERS)
        self.stddev = check_real(stddev, "fast_weight_stddev", low=0.0)
        self.seed = seed

    def __call__(self, shape, dtype=None):
        if self.kind == "normal":
            return keras.random.normal(shape, 1.0, self.stddev, dtype=dtype, seed=self.seed)
        bits = keras.random.randint(shape, 0, 2, seed=self.seed)
        return ops.cast(2 * bits - 1, dtype or "float32")

    def get_config(self):
        return {"kind": self.kind, "stddev": self.stddev, "seed": self.seed}


def _units_shape(units):
    if is_integer(units):
        return (check_positive_int(units, "units"),)
    if isinstance(units, (str, bytes)) or not hasattr(units, "__iter__"):
        raise TypeError(f"`units` must be an int or a tuple of ints; got {units!r}.")
    shape = tuple(check_positive_int(u, "units") for u in units)
    if not shape:
        raise ValueError("`units` must not be empty.")
    return shape


#: `BatchEnsembleDense`'s config entries, each kept as the attribute of that name.
_CONFIG_KEYS = (
    "units",
    "num_members",
    "num_input_axes",
    "activation",
    "use_bias",
    "kernel_initializer",
    "bias_initializer",
    "fast_weight_initializer",
    "fast_weight_stddev",
    "seed",
)


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class BatchEnsembleDense(Int8KernelsMixin, keras.layers.Layer):
    """A dense layer shared by M members, each with rank-1 fast weights.

    BatchEnsemble (Wen et al., 2020): member `m` uses the kernel
    `W * outer(r_m, s_m)` built from one shared kernel `W` `(d_in, d_out)`
    and its own fast weights `r_m` `(d_in,)` and `s_m` `(d_out,)`, plus its
    own bias `b_m`, computed without ever forming the member kernels:

        y = ((x * r_m) W) * s_m + b_m

    The input is a member-major batch `(num_members * batch, ..., d_in)`
    (`ensemble_zoo.ops.tile_members`): rows `m * batch : (m + 1) * batch`
    belong to member `m`, so a whole network of these layers runs every
    member in one pass, as in the paper.

    `units` may be a tuple, and the last `num_input_axes` input axes may be
    contracted together, so that the layer also replaces the projections
    of `keras.layers.MultiHeadAttention` (query `(dim) -> (heads,
    head_dim)`, output `(heads, head_dim) -> (dim)`): `d_in` and `d_out`
    are the products of those axes, and `r_m`, `s_m` have one entry per
    input and output unit.

    Initialization (a decision): the fast weights default to `N(1, 0.5)`,
    torch-uncertainty's choice and one of the two schemes of Wen et al.
    that the E³ paper sweeps (App. G.1); `"random_sign"` (entries ±1) is
    the other. `N(1, 0.5)` keeps each member's expected kernel equal to
    `W`, so a pretrained backbone converted with
    `BatchEnsembleImageClassifier.from_keras_hub` starts near its own
    function; random signs flip whole rows and columns of `W`. Per-member
    biases start equal (all `bias_initializer`, or the converted layer's
    bias).

    `quantize("int8")` stores the shared kernel in int8 with one scale per
    output unit; the fast weights and biases stay float (see
    `Int8KernelsMixin`).

    Args:
        units: int or tuple of ints, the output's trailing shape.
        num_members: int, the number of members M.
        num_input_axes: int, how many trailing input axes are contracted.
            Defaults to `1`.
        activation: activation applied after the bias. Defaults to `None`.
        use_bias: bool, per-member biases. Defaults to `True`.
        kernel_initializer: initializer of the shared kernel `(d_in, d_out)`.
        bias_initializer: initializer of each member's bias.
        fast_weight_initializer: `"normal"` (default) or `"random_sign"`.
        fast_weight_stddev: float, the standard deviation of `"normal"`.
            Defaults to `0.5`.
        seed: optional int for the fast weights.
        **kwargs: other `keras.layers.Layer` arguments.

    Example:

    ```python
    import numpy as np
    import ensemble_zoo as ez

    layer = ez.layers.BatchEnsembleDense(8, num_members=4)
    x = np.random.normal(size=(2, 16)).astype("float32")
    y = layer(ez.ops.tile_members(x, 4))  # (8, 8): 4 members x 2 samples
    layer.kernel.shape, layer.fast_in.shape, layer.fast_out.shape
    # (16, 8), (4, 16), (4, 8)
    ```
    """

    int8_kernels = {"kernel": (0,)}

    def __init__(
        self,
        units,
        num_members,
        num_input_axes=1,
        activation=None,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        fast_weight_initializer="normal",
        fast_weight_stddev=0.5,
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.units = _units_shape(units)
        set_member_layer_arguments(self, locals())
        self.num_input_axes = check_positive_int(num_input_axes, "num_input_axes")
        self.fast_weight_initializer = check_choice(
            fast_weight_initializer, "fast_weight_initializer", FAST_WEIGHT_INITIALIZERS
        )
        self.fast_weight_stddev = check_real(fast_weight_stddev, "fast_weight_stddev", low=0.0)
        if seed is not None and not is_integer(seed):
            raise TypeError(f"`seed` must be an int or None; got {seed!r}.")
        self.seed = None if seed is None else int(seed)

    def _check_shape(self, input_shape):
        input_shape = tuple(input_shape)
        owner = f"BatchEnsembleDense '{self.name}'"
        if len(input_shape) < self.num_input_axes + 1:
            raise ValueError(
                f"{owner} expects `inputs` of shape (num_members * batch, ..., "
                f"features) with {self.num_input_axes} feature axes; got shape "
                f"{input_shape}."
            )
        features = input_shape[-self.num_input_axes :]
        if None in features:
            raise ValueError(
                f"{owner} needs known feature axes; got `inputs` of shape {input_shape}."
            )
        rows = input_shape[0]
        members = selected_count(self.num_members)
        if rows is not None and rows % members:
            raise ValueError(
                f"{owner} has num_members={self.num_members}, but its `inputs` "
                f"have {rows} rows, not a multiple of it: pass a member-major "
                "batch (ensemble_zoo.ops.tile_members)."
            )
        return input_shape

    def build(self, input_shape):
        input_shape = self._check_shape(input_shape)
        self.input_features = tuple(int(d) for d in input_shape[-self.num_input_axes :])
        d_in, d_out = math.prod(self.input_features), math.prod(self.units)
        self.kernel = self.add_kernel("kernel", (d_in, d_out), self.kernel_initializer)
        seed = self.seed
        self.fast_in = self.add_weight(
            name="fast_in",
            shape=(self.num_members, d_in),
            initializer=FastWeightInitializer(
                self.fast_weight_initializer, self.fast_weight_stddev, seed
            ),
        )
        self.fast_out = self.add_weight(
            name="fast_out",
            shape=(self.num_members, d_out),
            initializer=FastWeightInitializer(
                self.fast_weight_initializer,
                self.fast_weight_stddev,
                None if seed is None else seed + 1,
            ),
        )
        self.bias = add_member_bias(self, d_out)
        self.build_int8_kernels()

    def call(self, inputs):
        shape = self._check_shape(static_shape(inputs))
        check_floating(inputs, "inputs")
        features = shape[-self.num_input_axes :]
        if tuple(features) != self.input_features:
            raise ValueError(
                f"BatchEnsembleDense '{self.name}' was built for input features "
                f"{self.input_features}; got `inputs` of shape {shape}."
            )
        middle = tuple(shape[1 : -self.num_input_axes])
        if None in middle:
            middle = tuple(ops.shape(inputs)[1 : -self.num_input_axes])
        d_in, d_out = self.kernel.shape
        kernel = ops.cast(self.kernel_value("kernel"), inputs.dtype)
        member = selected_member()
        if member is None:
            # (M * B, ..., features) -> (M, B * ..., d_in): member m's rows.
            x = ops.reshape(inputs, (self.num_members, -1, d_in))
            fast_in, fast_out = self.fast_in, self.fast_out
            bias = ops.expand_dims(self.bias, 1) if self.use_bias else None
        else:
            # One member's rows (`single_member`).
            x = ops.reshape(inputs, (1, -1, d_in))
            fast_in, fast_out = (
                ops.expand_dims(ops.take(w, member, axis=0), 0)
                for w in (self.fast_in, self.fast_out)
            )
            bias = ops.take(self.bias, member, axis=0) if self.use_bias else None
        known = all(isinstance(size, int) for size in shape)  # not None or symbolic
        rows = math.prod(shape[: -self.num_input_axes]) if known else None
        if member is not None and rows is not None and rows * (d_in + d_out) > 2 * d_in * d_out:
            # Scaling the kernel (2 d_in d_out products) is cheaper than
            # scaling every row (rows (d_in + d_out)).
            kernel = kernel * ops.cast(fast_in[0][:, None] * fast_out[0][None, :], kernel.dtype)
            y = ops.matmul(x, kernel)
        else:
            x = x * ops.expand_dims(ops.cast(fast_in, x.dtype), 1)
            y = ops.matmul(x, kernel)
            y = y * ops.expand_dims(ops.cast(fast_out, y.dtype), 1)
        if bias is not None:
            y = y + ops.cast(bias, y.dtype)
        y = ops.reshape(y, (-1,) + middle + self.units)
        if self.activation is not None:
            y = self.activation(y)
        return y

    def member_kernels(self):
        """The member kernels `W * outer(r_m, s_m)`, `(M, d_in, d_out)`: what
        member `m` computes, as M separate dense layers would hold it."""
        return (
            self.kernel_value("kernel")[None] * self.fast_in[:, :, None] * self.fast_out[:, None, :]
        )

    def compute_output_shape(self, input_shape):
        input_shape = self._check_shape(input_shape)
        return tuple(input_shape[: -self.num_input_axes]) + self.units

    def get_config(self):
        config = super().get_config()
        config.update(layer_config(self, _CONFIG_KEYS))
        config["units"] = list(self.units) if len(self.units) > 1 else self.units[0]
        return config

import keras
from keras import ops

from ensemble_zoo.layers.int8_kernels import Int8KernelsMixin
from ensemble_zoo.layers.member_initializer import MemberInitializer
from ensemble_zoo.layers.member_layer_arguments import add_member_bias
from ensemble_zoo.layers.member_layer_arguments import layer_config
from ensemble_zoo.layers.member_layer_arguments import set_member_layer_arguments
from ensemble_zoo.layers.member_selection import selected_count
from ensemble_zoo.layers.member_selection import selected_members
from ensemble_zoo.utils.validation import check_choice
from ensemble_zoo.utils.validation import check_floating
from ensemble_zoo.utils.validation import check_member_axis_input
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import static_shape

#: `GroupedDense`'s config entries, each kept as the attribute of that name.
_CONFIG_KEYS = (
    "units",
    "num_members",
    "activation",
    "use_bias",
    "kernel_initializer",
    "bias_initializer",
    "kernel_regularizer",
    "bias_regularizer",
    "member_layout",
)
#: Where the members sit in `GroupedDense`'s input: on axis 1, or folded
#: member-major into the rows.
INPUT_LAYOUTS = ("member_axis", "member_major")


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class GroupedDense(Int8KernelsMixin, keras.layers.Layer):
    """A separate dense layer per ensemble member, applied in one einsum.

    The input carries members on axis 1: `(batch, members, ..., d_in)`.
    Member `m` is multiplied by its own kernel `kernel[m]` of shape
    `(d_in, units)` and gets its own bias `bias[m]`; the output is
    `(batch, members, ..., units)`. This is equivalent to `members`
    separate `keras.layers.Dense` layers, without a Python loop over
    members. The same layer serves grouped projections (Hydra,
    Packed-Ensembles), batched LoRA heads and per-member classifier heads.

    With `member_layout="member_major"` the members are folded into the
    rows instead: `(members * batch, ..., d_in)` with row `m * batch + b`
    for member `m` (`ensemble_zoo.ops.tile_members`), what a network that
    runs every member on one tiled batch passes its layers; the output is
    `(members * batch, ..., units)`. Inside
    `ensemble_zoo.layers.member_selection.single_member(m)` the rows (or
    the member axis, of size 1) are member `m`'s alone and its kernel
    alone computes them.

    Each member's kernel and bias are initialized independently as a
    `Dense` layer's would be (see `MemberInitializer`).
    `quantize("int8")` stores the kernel in int8 with one scale per member
    and output unit (see `Int8KernelsMixin`).

    Args:
        units: int, output size per member.
        num_members: int, the size of the member axis (axis 1 of the input).
        activation: activation applied to the output. Defaults to `None`.
        use_bias: bool. Defaults to `True`.
        kernel_initializer: initializer of each member's `(d_in, units)`
            kernel. Defaults to `"glorot_uniform"`.
        bias_initializer: initializer of each member's bias. Defaults to
            `"zeros"`.
        kernel_regularizer: optional regularizer of the whole kernel.
        bias_regularizer: optional regularizer of the whole bias.
        member_layout: `"member_axis"` (default; inputs `(batch, members,
            ..., d_in)`) or `"member_major"` (members folded into the rows).
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`...).

    Example:

    ```python
    import numpy as np
    from ensemble_zoo.layers import GroupedDense

    heads = GroupedDense(units=10, num_members=4)
    features = np.random.normal(size=(2, 4, 32)).astype("float32")
    logits = heads(features)  # (2, 4, 10): one classifier per member
    heads.kernel.shape  # (4, 32, 10)
    ```
    """

    int8_kernels = {"kernel": (1,)}

    def __init__(
        self,
        units,
        num_members,
        activation=None,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        member_layout="member_axis",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.units = check_positive_int(units, "units")
        self.member_layout = check_choice(member_layout, "member_layout", INPUT_LAYOUTS)
        set_member_layer_arguments(self, locals())
        self.supports_masking = True

    def build(self, input_shape):
        input_shape = self._check_input_shape(input_shape)
        self.input_dim = int(input_shape[-1])
        self.kernel = self.add_kernel(
            "kernel",
            (self.num_members, self.input_dim, self.units),
            MemberInitializer(self.kernel_initializer),
            regularizer=self.kernel_regularizer,
        )
        self.bias = add_member_bias(self, self.units, self.bias_regularizer)
        self.build_int8_kernels()
        self._equation = self._einsum_equation(len(input_shape))

    @staticmethod
    def _einsum_equation(rank):
        # b = batch, m = members, i / o = in / out features; the axes between
        # members and features (tokens, heads, ...) get letters of their own.
        middle = "cdefghjkl"[: rank - 3]
        return f"bm{middle}i,mio->bm{middle}o"

    def _check_input_shape(self, input_shape, num_members=None):
        input_shape = tuple(input_shape)
        if self.member_layout == "member_axis":
            return check_member_axis_input(self, input_shape, num_members)
        if len(input_shape) < 2 or input_shape[-1] is None:
            raise ValueError(
                f"GroupedDense '{self.name}' (member_layout='member_major') expects "
                "`inputs` of shape (members * batch, ..., features) with a known "
                f"last axis; got shape {input_shape}."
            )
        return input_shape

    def call(self, inputs):
        shape = self._check_input_shape(static_shape(inputs), selected_count(self.num_members))
        check_floating(inputs, "inputs")
        if shape[-1] != self.input_dim:
            raise ValueError(
                f"GroupedDense '{self.name}' was built for {self.input_dim} "
                f"input features; got `inputs` of shape {shape}."
            )
        if self.member_layout == "member_major":
            return self._member_rows_call(inputs)
        kernel, members = selected_members(self.kernel_value("kernel"), self.num_members)
        outputs = ops.einsum(self._equation, inputs, kernel)
        if self.use_bias:
            bias, _ = selected_members(self.bias, self.num_members)
            bias_shape = (1, members) + (1,) * (len(shape) - 3) + (self.units,)
            outputs = outputs + ops.reshape(bias, bias_shape)
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs

    def _member_rows_call(self, inputs):
        """Member-major rows: `(M * batch, ..., d_in)` -> `(M, rows, d_in)`,
        one einsum with each member's kernel, and back."""
        kernel, members = selected_members(self.kernel_value("kernel"), self.num_members)
        x = ops.reshape(inputs, (members, -1, self.input_dim))
        outputs = ops.einsum("mni,mio->mno", x, kernel)
        if self.use_bias:
            bias, _ = selected_members(self.bias, self.num_members)
            outputs = outputs + ops.expand_dims(bias, 1)
        middle = tuple(inputs.shape[1:-1])
        if None in middle:
            middle = tuple(ops.shape(inputs)[1:-1])
        outputs = ops.reshape(outputs, (-1,) + middle + (self.units,))
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs

    def compute_output_shape(self, input_shape):
        input_shape = self._check_input_shape(input_shape)
        return input_shape[:-1] + (self.units,)

    def get_config(self):
        config = super().get_config()
        config.update(layer_config(self, _CONFIG_KEYS))
        return config

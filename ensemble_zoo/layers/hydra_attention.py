import math

import keras
from keras import ops

from ensemble_zoo.layers.int8_kernels import Int8KernelsMixin
from ensemble_zoo.layers.member_initializer import MemberInitializer
from ensemble_zoo.layers.member_layer_arguments import layer_config
from ensemble_zoo.layers.member_layer_arguments import set_member_layer_arguments
from ensemble_zoo.utils.backend import check_attention_implementation
from ensemble_zoo.utils.backend import resolve_attention_implementation
from ensemble_zoo.utils.validation import check_floating
from ensemble_zoo.utils.validation import check_member_axis_input
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_real
from ensemble_zoo.utils.validation import is_integer
from ensemble_zoo.utils.validation import static_shape


def _check_member_num_heads(member_num_heads, num_members, num_heads):
    if member_num_heads is None:
        return [num_heads] * num_members
    counts = list(member_num_heads) if hasattr(member_num_heads, "__iter__") else None
    if (
        counts is None
        or len(counts) != num_members
        or any(not is_integer(c) or not 0 <= c <= num_heads for c in counts)
    ):
        raise ValueError(
            f"`member_num_heads` must be {num_members} ints in [0, "
            f"{num_heads}] (heads kept by each member); got {member_num_heads!r}."
        )
    return [int(c) for c in counts]


#: `HydraAttention`'s config entries, each kept as the attribute of that name.
_CONFIG_KEYS = (
    "num_members",
    "num_heads",
    "key_dim",
    "member_num_heads",
    "dropout",
    "use_bias",
    "kernel_initializer",
    "bias_initializer",
    "attention_implementation",
)


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class HydraAttention(Int8KernelsMixin, keras.layers.Layer):
    """Multi-head self-attention for all ensemble members in one call.

    The input holds one residual stream per member,
    `(batch, members, tokens, dim)`. Member `m` has its own query / key /
    value kernels `(dim, num_heads, key_dim)` and output kernel
    `(num_heads, key_dim, dim)` (the layout of
    `keras.layers.MultiHeadAttention`, with a member axis in front). The
    `members * num_heads` heads run in a single
    `keras.ops.dot_product_attention` call; each head only attends within its
    own member's stream, so the result equals `members` separate attention
    layers exactly (Hydra Ensembles; the Hydra paper, "Ensembling Pruned
    Attention Heads for Uncertainty-Aware Efficient Transformers", §4.2). The
    attention is computed with einsums in a head-major layout, as
    `keras.layers.MultiHeadAttention` does without flash attention.

    Members may keep different numbers of heads (pruning is per member):
    `num_heads` is the number of head *slots*, the largest count, and a
    non-trainable `head_mask` `(members, num_heads)` zeroes the unused
    slots after attention. A masked head contributes exactly nothing, the
    same as zeroing its block of the output kernel or slicing it out, and a
    member with no heads outputs its output bias. Shapes stay static, so
    the layer compiles with XLA. Pruning code may also `assign` any 0/1
    pattern to `head_mask` to ablate heads.

    `quantize("int8")` stores the four kernels in int8, one scale per
    member and output unit (see `Int8KernelsMixin`).

    Args:
        num_members: int, the size of the member axis (axis 1).
        num_heads: int, head slots per member.
        key_dim: int, size of each head.
        member_num_heads: optional list of `num_members` ints, the heads
            member `m` keeps (its first `member_num_heads[m]` slots).
            Defaults to `num_heads` for every member.
        dropout: float, dropout on the attention probabilities.
        use_bias: bool. Defaults to `True`.
        kernel_initializer: per-member kernel initializer. Defaults to
            `"glorot_uniform"`.
        bias_initializer: Defaults to `"zeros"`.
        attention_implementation: `"auto"`, `"einsum"` or `"fused"` (see
            above). Defaults to `"auto"`.
        **kwargs: other `keras.layers.Layer` arguments.

    Example:

    ```python
    import numpy as np
    from ensemble_zoo.layers import HydraAttention

    attention = HydraAttention(
        num_members=3, num_heads=4, key_dim=8, member_num_heads=[4, 3, 2]
    )
    x = np.random.normal(size=(2, 3, 17, 32)).astype("float32")
    y = attention(x)  # (2, 3, 17, 32)
    attention.query_kernel.shape  # (3, 32, 4, 8)
    ```
    """

    int8_kernels = {
        "query_kernel": (1,),
        "key_kernel": (1,),
        "value_kernel": (1,),
        "output_kernel": (1, 2),
    }

    def __init__(
        self,
        num_members,
        num_heads,
        key_dim,
        member_num_heads=None,
        dropout=0.0,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        attention_implementation="auto",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.attention_implementation = check_attention_implementation(attention_implementation)
        set_member_layer_arguments(self, locals())
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.key_dim = check_positive_int(key_dim, "key_dim")
        self.member_num_heads = _check_member_num_heads(
            member_num_heads, self.num_members, self.num_heads
        )
        self.dropout = check_real(dropout, "dropout", low=0.0, high=1.0, high_open=True)
        # A seed generator, not a `Dropout` sublayer: Keras' `quantize`
        # only reaches layers without sublayers (as a `Dropout`, no
        # generator at rate 0).
        self.seed_generator = (
            keras.random.SeedGenerator(name="attention_dropout_seed")
            if self.dropout > 0.0
            else None
        )

    def build(self, input_shape):
        input_shape = check_member_axis_input(self, input_shape)
        dim = int(input_shape[-1])
        self.dim = dim
        m, h, k = self.num_members, self.num_heads, self.key_dim
        kernel_init = MemberInitializer(self.kernel_initializer)
        bias_init = MemberInitializer(self.bias_initializer)
        for name in ("query", "key", "value"):
            setattr(
                self,
                f"{name}_kernel",
                self.add_kernel(f"{name}_kernel", (m, dim, h, k), kernel_init),
            )
            setattr(
                self,
                f"{name}_bias",
                self.add_weight(name=f"{name}_bias", shape=(m, h, k), initializer=bias_init)
                if self.use_bias
                else None,
            )
        self.output_kernel = self.add_kernel("output_kernel", (m, h, k, dim), kernel_init)
        self.output_bias = (
            self.add_weight(name="output_bias", shape=(m, dim), initializer=bias_init)
            if self.use_bias
            else None
        )
        mask = [
            [1.0 if slot < count else 0.0 for slot in range(h)] for count in self.member_num_heads
        ]
        self.head_mask = self.add_weight(
            name="head_mask",
            shape=(m, h),
            initializer=keras.initializers.Constant(mask),
            trainable=False,
        )
        self.build_int8_kernels()

    def _project(self, x, name):
        # Head-major (batch, members, heads, tokens, key_dim): every matmul
        # below has its batch axes first, which XLA runs ~25% faster on CPU
        # than the (batch, tokens, heads, key_dim) layout of
        # `ops.dot_product_attention` plus its transposes.
        y = ops.einsum("bmtd,mdhk->bmhtk", x, self.kernel_value(f"{name}_kernel"))
        if self.use_bias:
            y = y + getattr(self, f"{name}_bias")[None, :, :, None, :]
        return y

    def _implementation(self, training):
        if self.dropout > 0.0 and training:
            return "einsum"
        return resolve_attention_implementation(self.attention_implementation)

    def call(self, inputs, attention_mask=None, training=None):
        shape = check_member_axis_input(self, static_shape(inputs))
        if len(shape) != 4:
            raise ValueError(
                f"HydraAttention '{self.name}' expects `inputs` (batch, members, "
                f"tokens, dim); got shape {shape}."
            )
        check_floating(inputs, "inputs")
        mask = None
        if attention_mask is not None:
            mask = ops.cast(attention_mask, "bool")
            tokens = shape[2]
            expected = {2: (shape[0], tokens), 3: (shape[0], tokens, tokens)}
            mask_shape = static_shape(mask)
            if len(mask_shape) in expected and any(
                a is not None and b is not None and a != b
                for a, b in zip(mask_shape, expected[len(mask_shape)])
            ):
                raise ValueError(
                    f"`attention_mask` of shape {mask_shape} does not match "
                    f"`inputs` of shape {shape}: expected (batch, tokens) = "
                    f"{expected[2]} or (batch, tokens, tokens) = {expected[3]}."
                )
            if len(mask.shape) == 2:  # (batch, tokens): keys to attend to
                mask = mask[:, None, None, :]
            elif len(mask.shape) == 3:  # (batch, queries, keys)
                mask = mask[:, None, :, :]
            else:
                raise ValueError(
                    "`attention_mask` must be (batch, tokens) or (batch, "
                    f"tokens, tokens); got shape {tuple(mask.shape)}."
                )
        if self._implementation(training) == "fused":
            z = self._fused_attention(inputs, mask)
            out = ops.einsum("btmhk,mhkd->bmtd", z, self.kernel_value("output_kernel"))
        else:
            z = self._einsum_attention(inputs, mask, training)
            out = ops.einsum("bmhtk,mhkd->bmtd", z, self.kernel_value("output_kernel"))
        if self.use_bias:
            out = out + self.output_bias[None, :, None, :]
        return out

    def _einsum_attention(self, inputs, mask, training):
        """Head-major einsums; returns masked heads `(b, m, h, t, k)`."""
        query = self._project(inputs, "query") * (1.0 / math.sqrt(self.key_dim))
        key = self._project(inputs, "key")
        value = self._project(inputs, "value")
        scores = ops.einsum("bmhtk,bmhsk->bmhts", query, key)
        if mask is not None:
            scores = ops.where(mask[:, None], scores, ops.cast(-1e9, scores.dtype))
        probs = ops.softmax(scores, axis=-1)
        if self.dropout > 0.0 and training:
            probs = keras.random.dropout(probs, self.dropout, seed=self.seed_generator)
        z = ops.einsum("bmhts,bmhsk->bmhtk", probs, value)
        return z * ops.cast(self.head_mask, z.dtype)[None, :, :, None, None]

    def _fused_attention(self, inputs, mask):
        """One `ops.dot_product_attention` over `members * heads` heads;
        returns masked heads `(b, t, m, h, k)`."""
        m, h, k = self.num_members, self.num_heads, self.key_dim

        def project(name):
            y = ops.einsum("bmtd,mdhk->btmhk", inputs, self.kernel_value(f"{name}_kernel"))
            if self.use_bias:
                y = y + getattr(self, f"{name}_bias")[None, None]
            return ops.reshape(y, (-1, ops.shape(y)[1], m * h, k))

        z = ops.dot_product_attention(
            project("query"), project("key"), project("value"), mask=mask, scale=1.0 / math.sqrt(k)
        )  # (b, t, m * h, k)
        z = ops.reshape(z, (-1, ops.shape(z)[1], m, h, k))
        return z * ops.cast(self.head_mask, z.dtype)[None, None, :, :, None]

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(layer_config(self, _CONFIG_KEYS))
        config["member_num_heads"] = list(self.member_num_heads)
        return config

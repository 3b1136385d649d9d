"""L2 self-attention: multi-head self-attention that is Lipschitz."""

import math

import keras
import numpy as np
from keras import ops

from ensemble_zoo.utils.backend import concrete_value
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_rate


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class L2MultiHeadAttention(keras.layers.Layer):
    """Multi-head L2 self-attention (Kim, Papamakarios and Mnih 2021, "The
    Lipschitz Constant of Self-Attention", arXiv 2006.04710).

    Dot-product self-attention is not Lipschitz: its Jacobian grows without
    bound with the inputs. L2 self-attention weighs token `j` for token `i`
    by their squared distance after one projection shared by queries and
    keys, and maps the attended tokens through that projection again:
    per head `h`, with `W_h = W^Q_h` (`dim x key_dim`),

        P_h[i, j] = softmax_j(-||x_i W_h - x_j W_h||^2 / sqrt(key_dim)),
        head_h = P_h X A_h W^V_h,  A_h = W_h W_h^T / sqrt(key_dim),

    and the output is the heads concatenated, times `W^O` (the paper's
    L2-MHA; tying `W^Q = W^K` is what makes it Lipschitz). `X A_h W^V_h`
    is computed as `(X W_h) (W_h^T W^V_h) / sqrt(key_dim)`, at the cost of
    dot-product attention. With `use_bias`, the value and output
    projections have biases (a bias on the shared projection would cancel
    in the distance); the attention weights go through `dropout` in
    training, as Keras' `MultiHeadAttention` does. The distances and the
    softmax are float32 under any precision policy. `attention_mask`
    (`(batch, tokens, tokens)`, true where a token may attend) is the only
    mask it reads: no Keras mask of the inputs, no causal mask.

    It takes `MultiHeadAttention`'s self-attention call, `layer(x, x)`, so
    it replaces one in a built keras-hub model
    (`from_multi_head_attention`).

    Args:
        num_heads: int, attention heads.
        key_dim: int, the width of each head's projection.
        dropout: float in `[0, 1)`, dropout on the attention weights.
            Defaults to `0.0`.
        use_bias: bool, biases on the value and output projections.
            Defaults to `True`.
        kernel_initializer: initializer of the kernels. Defaults to
            `"glorot_uniform"`.
        **kwargs: `keras.layers.Layer` arguments.

    Example:

    ```python
    import numpy as np
    import ensemble_zoo as ez

    layer = ez.layers.L2MultiHeadAttention(num_heads=2, key_dim=4)
    x = np.random.default_rng(0).normal(size=(3, 5, 8)).astype("float32")
    layer(x, x).shape  # (3, 5, 8)
    ```
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        dropout=0.0,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.key_dim = check_positive_int(key_dim, "key_dim")
        self.dropout = check_rate(dropout, "dropout")
        self.use_bias = bool(use_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)

    def build(self, query_shape, value_shape=None, key_shape=None):
        dim = query_shape[-1]
        heads = (dim, self.num_heads, self.key_dim)
        self.query_kernel = self.add_weight(
            name="query_kernel", shape=heads, initializer=self.kernel_initializer
        )
        self.value_kernel = self.add_weight(
            name="value_kernel", shape=heads, initializer=self.kernel_initializer
        )
        self.output_kernel = self.add_weight(
            name="output_kernel",
            shape=(self.num_heads, self.key_dim, dim),
            initializer=self.kernel_initializer,
        )
        self.value_bias = self.output_bias = None
        if self.use_bias:
            self.value_bias = self.add_weight(
                name="value_bias", shape=heads[1:], initializer="zeros"
            )
            self.output_bias = self.add_weight(
                name="output_bias", shape=(dim,), initializer="zeros"
            )

    def call(self, query, value=None, key=None, attention_mask=None, training=None):
        if not (_same(query, value) and _same(query, key)):
            raise ValueError(
                f"{type(self).__name__} is self-attention (it ties the queries and keys): "
                "call it as `layer(x)` or `layer(x, x)`."
            )
        projected = ops.einsum("btd,dhk->bthk", query, self.query_kernel)
        # The distances in float32: `|a|^2 + |b|^2 - 2 a.b` cancels, and a
        # low-precision policy left the diagonal's zeros at up to 32.
        exact = ops.cast(projected, "float32")
        squared = ops.sum(ops.square(exact), axis=-1)  # (batch, tokens, heads)
        products = ops.einsum("bihk,bjhk->bhij", exact, exact)
        norms = ops.transpose(squared, (0, 2, 1))  # (batch, heads, tokens)
        distances = ops.maximum(norms[..., :, None] + norms[..., None, :] - 2.0 * products, 0.0)
        logits = self.attention_logits(distances, query, norms)
        if attention_mask is not None:
            mask = ops.expand_dims(ops.cast(attention_mask, "bool"), 1)
            logits = ops.where(mask, logits, ops.full_like(logits, -1e9))
        weights = ops.softmax(logits, axis=-1)
        weights = self.dropout_layer(ops.cast(weights, self.compute_dtype), training=training)
        values = self.head_values(query, projected)
        if self.use_bias:
            values = values + self.value_bias
        heads = ops.einsum("bhij,bjhv->bihv", weights, values)
        out = ops.einsum("bihv,hvd->bid", heads, self.output_kernel)
        if self.use_bias:
            out = out + self.output_bias
        return out

    def attention_logits(self, distances, inputs, squared_norms):
        """The softmax's input: minus the squared distances over
        `sqrt(key_dim)`.

        Args:
            distances: float32 `(batch, heads, tokens, tokens)`, the squared
                distances of the projected tokens.
            inputs: the layer's input `(batch, tokens, dim)`.
            squared_norms: float32 `(batch, heads, tokens)`, the projected
                tokens' squared norms.
        """
        return -distances / math.sqrt(self.key_dim)

    def head_values(self, inputs, projected):
        """What each head averages, `X A_h W^V_h` (before the value bias):
        `(batch, tokens, heads, key_dim)`."""
        mixing = ops.einsum("dhk,dhv->hkv", self.query_kernel, self.value_kernel)
        return ops.einsum("bthk,hkv->bthv", projected, mixing / math.sqrt(self.key_dim))

    def compute_output_shape(self, query_shape, value_shape=None, key_shape=None):
        return query_shape

    @classmethod
    def from_multi_head_attention(cls, layer, **kwargs):
        """An L2 self-attention in place of a built
        `keras.layers.MultiHeadAttention`: its heads, dropout and bias
        setting; its query, value and output projections' weights (the
        shared projection is its query's; its key projection is dropped).
        Trained as dot-product attention, the weights give another function
        here: fine-tune after converting. `kwargs` go to the constructor
        (a subclass's own arguments)."""
        if not isinstance(layer, keras.layers.MultiHeadAttention) or not layer.built:
            raise TypeError(f"`layer` must be a built keras MultiHeadAttention; got {layer!r}.")
        if layer.attention_axes not in (None, (1,)) or layer._output_shape is not None:
            raise ValueError(
                f"L2 attention attends over the tokens and returns the input's width; "
                f"`{layer.name}` has attention_axes={layer.attention_axes} and "
                f"output_shape={layer._output_shape}."
            )
        if layer.value_dim != layer.key_dim:
            raise ValueError(
                f"L2 attention needs the value width equal to the key width; `{layer.name}` has "
                f"{layer.value_dim} and {layer.key_dim}."
            )
        query, value, output = layer.query_dense, layer.value_dense, layer.output_dense
        dim = query.kernel.shape[0]
        new = cls(
            num_heads=layer.num_heads,
            key_dim=layer.key_dim,
            dropout=layer.dropout,
            use_bias=layer.use_bias,
            name=layer.name,
            dtype=layer.dtype_policy,
            **kwargs,
        )
        new.build((None, None, dim))
        new.query_kernel.assign(query.kernel)
        new.value_kernel.assign(value.kernel)
        new.output_kernel.assign(output.kernel)
        if layer.use_bias:
            new.value_bias.assign(value.bias)
            new.output_bias.assign(output.bias)
        return new

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config


def _same(query, other):
    """Whether `other` is `query` (or `None`): the same tensor, or equal
    values where both have values now (Keras converts each NumPy input
    separately)."""
    if other is None or other is query:
        return True
    first, second = concrete_value(query), concrete_value(other)
    return first is not None and second is not None and np.array_equal(first, second)

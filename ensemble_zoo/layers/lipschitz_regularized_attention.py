"""LRFormer's Lipschitz-regularized self-attention."""

import keras
from keras import ops

from ensemble_zoo.layers.l2_attention import L2MultiHeadAttention
from ensemble_zoo.utils.validation import check_real


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class LipschitzRegularizedAttention(L2MultiHeadAttention):
    """Lipschitz-regularized self-attention (LRSA), the attention of
    LRFormer (Ye, Ma, Cao and Tang 2023, "Mitigating Transformer
    Overconfidence via Lipschitz Regularization", arXiv 2306.06849).

    Like L2 self-attention (`L2MultiHeadAttention`, whose weights and call
    it shares) it weighs token `j` for token `i` by their squared distance
    after one projection shared by queries and keys, and divides it by a
    contractive bound instead of `sqrt(key_dim)`: per head `h`, with
    `Q_h = X W_h`,

        P_h[i, j] = softmax_j(-alpha ||q_i - q_j||^2
                              / (||Q_h||_F max_t ||x_t||_2 + 1e-10)),
        head_h = P_h (X W^V_h + b^V_h),

    and the output is the heads concatenated, times `W^O`, plus `b^O`. The
    values are the usual value projection (L2 attention's
    `X W_h W_h^T W^V_h` is not in LRSA). `||Q_h||_F` is the Frobenius norm
    of one input's projected tokens in that head and `max_t ||x_t||_2` the
    largest norm of its input tokens (the layer's input: in a pre-norm
    ViT, the layer-normalised tokens), both over every token, so each
    input's attention depends on itself alone.

    Decision: the paper is not among the project's papers, and the
    LoRA-Ensemble paper, which runs LRFormer as a HAM10000 baseline, gives
    no details. The formula above is the one two public LRSA
    implementations agree on (the distance's denominator, tied queries and
    keys in the one that ties them, the `1e-10`, and `alpha = 100` as the
    default). They differ in the norms' scope: one takes them per input
    and head, the other over the whole batch and every head; the zoo
    takes them per input and head, so that a prediction does not depend
    on the rest of its batch. As in L2 attention, the distances and the softmax are
    float32 under any precision policy; `attention_mask` masks the
    softmax only, not the norms.

    Args:
        num_heads: int, attention heads.
        key_dim: int, the width of each head's projection.
        alpha: positive float, the distance's scale. Defaults to `100.0`.
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

    layer = ez.layers.LipschitzRegularizedAttention(num_heads=2, key_dim=4)
    x = np.random.default_rng(0).normal(size=(3, 5, 8)).astype("float32")
    layer(x, x).shape  # (3, 5, 8)
    ```
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        alpha=100.0,
        dropout=0.0,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(
            num_heads=num_heads,
            key_dim=key_dim,
            dropout=dropout,
            use_bias=use_bias,
            kernel_initializer=kernel_initializer,
            **kwargs,
        )
        self.alpha = check_real(alpha, "alpha", low=0.0, low_open=True)

    def attention_logits(self, distances, inputs, squared_norms):
        """Minus `alpha` times the squared distances over the contractive
        bound `||Q_h||_F max_t ||x_t||_2` (see the class)."""
        # The square roots' arguments kept off 0, whose gradient is
        # infinite (an all-zero input gave NaN gradients).
        frobenius = ops.sqrt(ops.maximum(ops.sum(squared_norms, axis=-1), 1e-30))  # (batch, heads)
        exact = ops.cast(inputs, "float32")
        token_norms = ops.sqrt(ops.maximum(ops.sum(ops.square(exact), axis=-1), 1e-30))
        largest = ops.max(token_norms, axis=-1)  # (batch,)
        bound = frobenius * largest[:, None] + 1e-10
        return -self.alpha * distances / bound[:, :, None, None]

    def head_values(self, inputs, projected):
        """The value projection `X W^V_h` (before the value bias)."""
        return ops.einsum("btd,dhv->bthv", inputs, self.value_kernel)

    def get_config(self):
        config = super().get_config()
        config["alpha"] = self.alpha
        return config

import keras
from keras import ops

from ensemble_zoo.layers.gelu import gelu_activation as _activation
from ensemble_zoo.layers.grouped_dense import GroupedDense
from ensemble_zoo.layers.grouped_layer_normalization import GroupedLayerNormalization
from ensemble_zoo.layers.hydra_attention import HydraAttention
from ensemble_zoo.models.vit_geometry import vit_block_arguments
from ensemble_zoo.utils.validation import check_positive_int

MLP_MODES = ("merge", "grouped")


def check_mlp_mode(mlp):
    if mlp not in MLP_MODES:
        raise ValueError(
            f"`mlp` must be one of {MLP_MODES}: 'merge' (one MLP shared by "
            "all members, the paper's choice) or 'grouped' (one MLP per "
            f"member, exact); got {mlp!r}."
        )
    return mlp


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class HydraEncoderBlock(keras.layers.Layer):
    """A transformer block over `(batch, members, tokens, dim)`.

    Pre-norm (`normalize_first=True`, keras-hub's `ViTEncoderBlock`):
    `x + attention(LN1(x))`, then `+ MLP(LN2(.))`. Post-norm
    (`normalize_first=False`, BERT's `TransformerEncoder`):
    `LN1(x + attention(x))`, then `LN2(. + MLP(.))`. Both with per-member
    layer norms, `HydraAttention` (each
    member's own kept heads) and an MLP that is either shared by all
    members (`mlp="merge"`: Hydra's merged MLP, applied to every member's
    stream) or one per member (`mlp="grouped"`, `GroupedDense`).

    Args:
        num_members: int.
        num_heads: int, head slots of this block's attention.
        key_dim: int, size of each head.
        mlp_dim: int, hidden size of the MLP.
        member_num_heads: optional list of `num_members` ints, the heads
            each member keeps.
        mlp: `"merge"` or `"grouped"`. Defaults to `"merge"`.
        dropout_rate: float, dropout after attention and in the MLP.
        attention_dropout: float, dropout on attention probabilities.
        layer_norm_epsilon: float. Defaults to `1e-6` (keras-hub ViT).
        use_mha_bias: bool. Defaults to `True`.
        use_mlp_bias: bool. Defaults to `True`.
        normalize_first: bool, pre-norm (ViT) or post-norm (BERT).
            Defaults to `True`.
        activation: `"gelu"` (exact, ViT) or `"gelu_approximate"` (BERT).
        intermediate_dropout: bool, dropout also between the two MLP
            layers (ViT) or only after them (BERT). Defaults to `True`.
        attention_implementation: `"auto"`, `"einsum"` or `"fused"`, see
            `HydraAttention`. Defaults to `"auto"`.
        groups: int, Packed-Ensembles' `gamma`: each member's attention and
            (grouped) MLP split into `groups` independent groups of
            `dim / groups` channels and `num_heads / groups` heads, i.e.
            block-diagonal projections; the layer norms stay per member.
            Defaults to `1` (Hydra).
        **kwargs: other `keras.layers.Layer` arguments.
    """

    def __init__(
        self,
        num_members,
        num_heads,
        key_dim,
        mlp_dim,
        member_num_heads=None,
        mlp="merge",
        dropout_rate=0.0,
        attention_dropout=0.0,
        layer_norm_epsilon=1e-6,
        use_mha_bias=True,
        use_mlp_bias=True,
        normalize_first=True,
        activation="gelu",
        intermediate_dropout=True,
        attention_implementation="auto",
        groups=1,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.groups = check_positive_int(groups, "groups")
        if self.groups > 1 and (
            num_heads % self.groups or mlp_dim % self.groups or mlp != "grouped"
        ):
            raise ValueError(
                f"`groups` ({groups}) must divide `num_heads` ({num_heads}) and "
                f'`mlp_dim` ({mlp_dim}), and needs `mlp="grouped"`; got mlp={mlp!r}.'
            )
        if self.groups > 1 and member_num_heads is not None:
            if list(member_num_heads) != [num_heads] * num_members:
                raise ValueError(
                    "`member_num_heads` (pruned members) needs `groups=1`; got "
                    f"{member_num_heads!r} with groups={groups}."
                )
            member_num_heads = None
        self._activation_fn = _activation(activation)
        self.normalize_first = bool(normalize_first)
        self.intermediate_dropout = bool(intermediate_dropout)
        self.num_members = num_members
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.mlp_dim = mlp_dim
        self.dropout_rate = dropout_rate
        self.attention_dropout = attention_dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.use_mha_bias = use_mha_bias
        self.use_mlp_bias = use_mlp_bias
        self.activation = activation
        self.attention_implementation = attention_implementation
        self.mlp = check_mlp_mode(mlp)
        self.ln_1 = self._layer_norm("ln_1")
        self.attention = HydraAttention(
            num_members * self.groups,
            num_heads // self.groups,
            key_dim,
            member_num_heads=member_num_heads,
            dropout=attention_dropout,
            use_bias=use_mha_bias,
            attention_implementation=attention_implementation,
            dtype=self.dtype_policy,
            name="attention",
        )
        self.member_num_heads = (
            self.attention.member_num_heads if self.groups == 1 else [num_heads] * num_members
        )
        self.dropout = keras.layers.Dropout(dropout_rate, dtype=self.dtype_policy, name="dropout")
        self.ln_2 = self._layer_norm("ln_2")
        self.mlp_dropout = keras.layers.Dropout(
            dropout_rate, dtype=self.dtype_policy, name="mlp_dropout"
        )

    def _layer_norm(self, name):
        """A per-member layer norm of the block (`ln_1` or `ln_2`)."""
        return GroupedLayerNormalization(
            self.num_members, epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )

    def _grouped_shape(self, shape):
        """`(batch, members, tokens, dim)` -> `(batch, members * groups,
        tokens, dim / groups)`, the layout of the grouped sublayers."""
        shape = tuple(shape)
        return (
            (shape[0], self.num_members * self.groups)
            + shape[2:-1]
            + (int(shape[-1]) // self.groups,)
        )

    def _to_groups(self, x):
        if self.groups == 1:
            return x
        shape = ops.shape(x)
        x = ops.reshape(x, (-1, self.num_members, shape[2], self.groups, shape[3] // self.groups))
        x = ops.transpose(x, (0, 1, 3, 2, 4))
        return ops.reshape(
            x, (-1, self.num_members * self.groups, shape[2], shape[3] // self.groups)
        )

    def _from_groups(self, x):
        if self.groups == 1:
            return x
        shape = ops.shape(x)
        x = ops.reshape(x, (-1, self.num_members, self.groups, shape[2], shape[3]))
        x = ops.transpose(x, (0, 1, 3, 2, 4))
        return ops.reshape(x, (-1, self.num_members, shape[2], self.groups * shape[3]))

    def build(self, input_shape):
        dim = int(input_shape[-1])
        if dim % self.groups:
            raise ValueError(
                f"The input width ({dim}) must be divisible by `groups` ({self.groups})."
            )
        self.ln_1.build(input_shape)
        self.ln_2.build(input_shape)
        input_shape = self._grouped_shape(input_shape)
        dim = int(input_shape[-1])
        self.attention.build(input_shape)
        # The merged MLP is one `Dense` pair (then `groups` is 1); the grouped
        # one a `GroupedDense` pair over the `members * groups` groups.
        if self.mlp == "merge":
            dense, member_axis = keras.layers.Dense, ()
        else:
            dense, member_axis = GroupedDense, (self.num_members * self.groups,)
        common = {
            "use_bias": self.use_mlp_bias,
            "bias_initializer": keras.initializers.RandomNormal(stddev=1e-6),
            "dtype": self.dtype_policy,
        }
        self.dense_1 = dense(
            self.mlp_dim // self.groups,
            *member_axis,
            activation=self._activation_fn,
            name="dense_1",
            **common,
        )
        self.dense_2 = dense(dim, *member_axis, name="dense_2", **common)
        self.dense_1.build(input_shape)
        self.dense_2.build(tuple(input_shape[:-1]) + (self.mlp_dim // self.groups,))

    def _mlp(self, y, training):
        y = self._to_groups(y)
        if self.mlp == "merge":
            # One shared MLP for every member's tokens: a plain 2-D matmul
            # (XLA runs it ~15% faster than on the 4-D tensor).
            shape = ops.shape(y)
            y = ops.reshape(y, (-1, shape[-1]))
        y = self.dense_1(y)
        if self.intermediate_dropout:
            y = self.mlp_dropout(y, training=training)
        y = self.mlp_dropout(self.dense_2(y), training=training)
        if self.mlp == "merge":
            y = ops.reshape(y, shape)
        return self._from_groups(y)

    def _attend(self, x, attention_mask, training):
        x = self.attention(self._to_groups(x), attention_mask=attention_mask, training=training)
        return self._from_groups(x)

    def call(self, inputs, attention_mask=None, training=None):
        if self.normalize_first:
            x = self._attend(self.ln_1(inputs), attention_mask, training)
            x = self.dropout(x, training=training) + inputs
            return x + self._mlp(self.ln_2(x), training)
        x = self._attend(inputs, attention_mask, training)
        x = self.ln_1(self.dropout(x, training=training) + inputs)
        return self.ln_2(x + self._mlp(x, training))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_members": self.num_members,
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "mlp_dim": self.mlp_dim,
                "member_num_heads": list(self.member_num_heads),
                "mlp": self.mlp,
                "dropout_rate": self.dropout_rate,
                "attention_dropout": self.attention_dropout,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "use_mha_bias": self.use_mha_bias,
                "use_mlp_bias": self.use_mlp_bias,
                "normalize_first": self.normalize_first,
                "activation": self.activation,
                "intermediate_dropout": self.intermediate_dropout,
                "attention_implementation": self.attention_implementation,
                "groups": self.groups,
            }
        )
        return config


def hydra_encoder_blocks(num_members, member_num_heads, names, **kwargs):
    """One `HydraEncoderBlock` per layer of a Hydra model.

    Block `l` has `max_m member_num_heads[l][m]` head slots (at least 1),
    so heads that no member keeps cost nothing.

    Args:
        num_members: int.
        member_num_heads: `(num_layers, num_members)` nested list of
            kept-head counts.
        names: the blocks' names, one per layer.
        **kwargs: the other `HydraEncoderBlock` arguments, the same for
            every block.
    """
    return [
        HydraEncoderBlock(
            num_members, num_heads=max(1, max(counts)), member_num_heads=counts, name=name, **kwargs
        )
        for counts, name in zip(member_num_heads, names, strict=True)
    ]


def hydra_vit_blocks(vit, num_members, member_num_heads, **kwargs):
    """The `HydraEncoderBlock`s of a ViT backbone (Hydra's, or
    Packed-Ensembles' with `mlp="grouped"` and `groups`), named as
    keras-hub's `ViTBackbone` names its blocks.

    Args:
        vit: the backbone's `ViTArguments`; each block takes its head size
            `hidden_dim // num_heads`, `mlp_dim` (unless given) and
            `vit_block_arguments`.
        num_members: int.
        member_num_heads: `(num_layers, num_members)` nested list of
            kept-head counts.
        **kwargs: the other `HydraEncoderBlock` arguments.
    """
    kwargs.setdefault("mlp_dim", vit.mlp_dim)
    return hydra_encoder_blocks(
        num_members,
        member_num_heads,
        [f"transformer_block_{layer + 1}" for layer in range(vit.num_layers)],
        key_dim=vit.hidden_dim // vit.num_heads,
        **vit_block_arguments(vit),
        **kwargs,
    )

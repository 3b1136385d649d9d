import keras

from ensemble_zoo.layers.moe.sparse_moe import SparseMoE
from ensemble_zoo.models.vit_geometry import check_heads_divide

#: The sparse-MoE options of `ViTMoEEncoderBlock` (keyword arguments) with
#: their defaults, those of `ViTMoEBackbone`, which passes them on as they
#: are. Each is kept as the attribute of that name.
MOE_OPTIONS = {
    "num_selected_experts": 1,
    "capacity_factor": 1.5,
    "eval_capacity_factor": 8.0,
    "group_size": None,
    "batch_priority": False,
    "noise_std": None,
    "capacity_multiple_of": 1,
    "importance_loss_weight": 0.005,
    "load_loss_weight": 0.005,
    "mlp_activation": "gelu",
    "bfloat16_dispatch": False,
    "dispatcher": "einsum",
    "router": "top_k",
    "num_slots": None,
    "capacity_rounding": None,
}

#: The block arguments that its `SparseMoE` takes.
_SPARSE_MOE_ARGUMENTS = (
    *"num_experts mlp_dim num_members dropout_rate use_mlp_bias seed".split(),
    *MOE_OPTIONS,
)

#: The `SparseMoE` names of the `_SPARSE_MOE_ARGUMENTS` whose names differ.
_SPARSE_MOE_NAMES = {
    "num_selected_experts": "top_k",
    "mlp_activation": "activation",
    "use_mlp_bias": "use_bias",
}

#: The arguments in `ViTMoEEncoderBlock.get_config`, each kept as the
#: attribute of that name.
_CONFIG_KEYS = (
    *"num_heads hidden_dim use_mha_bias attention_dropout layer_norm_epsilon".split(),
    *_SPARSE_MOE_ARGUMENTS,
)


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class ViTMoEEncoderBlock(keras.layers.Layer):
    """A pre-norm ViT block whose MLP is a `SparseMoE` (V-MoE / E³).

    `x = x + Dropout(MHA(LN_1(x))); x = x + MoE(LN_2(x))`, the structure
    and sublayer names (`ln_1`, `mha`, `ln_2`) of keras-hub's
    `ViTEncoderBlock`, with `moe` in place of `mlp`, so a dense block's
    weights copy over one to one (the MLP into every expert). For E³ the
    input is member-major tiled `(members * batch, tokens, dim)`; attention
    and layer norms are shared by the members, routing is per member.

    Args:
        num_heads: int.
        hidden_dim: int.
        mlp_dim: int, each expert's hidden size.
        num_experts: int.
        num_members: int, the E³ ensemble size. Defaults to 1 (V-MoE).
            This and the arguments after it are keyword-only.
        use_mha_bias: bool. Defaults to `True`.
        use_mlp_bias: bool. Defaults to `True`.
        dropout_rate: float, residual and expert dropout. Defaults to 0.
        attention_dropout: float. Defaults to 0.
        layer_norm_epsilon: float. Defaults to `1e-6`.
        seed: int or `None`, seed of the router noise and expert dropout.
        **kwargs: the MoE options below (keyword arguments, defaults in
            `MOE_OPTIONS`: `ViTMoEBackbone`'s), and other
            `keras.layers.Layer` arguments.

    MoE options:
        num_selected_experts: int, K experts per token.
        capacity_factor: float, training capacity factor.
        eval_capacity_factor: float or `None`, capacity factor at inference.
        group_size: int or `None`, see `SparseMoE`.
        batch_priority: bool, Batch-Prioritized Routing.
        noise_std: float or `None`, router noise (default `1 / num_experts`).
        capacity_multiple_of: int, round the capacity up to a multiple of
            this (vmoe: 4).
        importance_loss_weight: float, see `TopKRouter`.
        load_loss_weight: float, see `TopKRouter`.
        mlp_activation: `"gelu"` (exact, keras-hub) or `"gelu_approximate"`
            (tanh, vmoe), the experts' activation.
        bfloat16_dispatch: bool, vmoe's bfloat16 rounding of expert inputs
            and outputs, see `SparseMoE`.
        dispatcher: `"einsum"` or `"indices"`, see `SparseMoE`.
        router: `"top_k"`, `"experts_choice"` or `"soft"`, see `SparseMoE`.
        num_slots: int or `None`, Soft MoE's slots per expert.
        capacity_rounding: `"ceil"`, `"round"` or `None` (the router's
            vmoe default), see `SparseMoE`.
    """

    def __init__(
        self,
        num_heads,
        hidden_dim,
        mlp_dim,
        num_experts,
        *,
        num_members=1,
        use_mha_bias=True,
        use_mlp_bias=True,
        dropout_rate=0.0,
        attention_dropout=0.0,
        layer_norm_epsilon=1e-6,
        seed=None,
        **kwargs,
    ):
        options = {name: kwargs.pop(name, default) for name, default in MOE_OPTIONS.items()}
        super().__init__(**kwargs)
        check_heads_divide(hidden_dim, num_heads)
        # === Layers ===
        self.layer_norm_1 = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="ln_1"
        )
        self.mha = keras.layers.MultiHeadAttention(
            num_heads=num_heads,
            key_dim=hidden_dim // num_heads,
            use_bias=use_mha_bias,
            dropout=attention_dropout,
            dtype=self.dtype_policy,
            name="mha",
        )
        self.dropout = keras.layers.Dropout(dropout_rate, dtype=self.dtype_policy, name="dropout")
        self.layer_norm_2 = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="ln_2"
        )
        moe = {
            "num_experts": num_experts,
            "mlp_dim": mlp_dim,
            "num_members": num_members,
            "dropout_rate": dropout_rate,
            "use_mlp_bias": use_mlp_bias,
            "seed": seed,
            **options,
        }
        self.moe = SparseMoE(
            dtype=self.dtype_policy,
            name="moe",
            **{_SPARSE_MOE_NAMES.get(name, name): value for name, value in moe.items()},
        )
        # === Config ===
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.use_mha_bias = use_mha_bias
        self.attention_dropout = attention_dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        for name, value in moe.items():
            setattr(self, name, value)

    def build(self, input_shape):
        self.layer_norm_1.build(input_shape)
        self.mha.build(input_shape, input_shape)
        self.layer_norm_2.build(input_shape)
        self.moe.build(input_shape)
        self.built = True

    def call(self, inputs, training=None):
        x = self.layer_norm_1(inputs)
        x = self.mha(x, x, training=training)
        x = self.dropout(x, training=training) + inputs
        return x + self.moe(self.layer_norm_2(x), training=training)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in _CONFIG_KEYS})
        return config

import keras
import keras_hub
from keras_hub.src.layers.modeling.position_embedding import PositionEmbedding
from keras_hub.src.layers.modeling.reversible_embedding import ReversibleEmbedding

from ensemble_zoo.layers.grouped_dense import GroupedDense
from ensemble_zoo.layers.member_broadcast import MemberBroadcast
from ensemble_zoo.models.hydra.hydra_backbone import check_member_num_heads
from ensemble_zoo.models.hydra.hydra_encoder_block import check_mlp_mode
from ensemble_zoo.models.hydra.hydra_encoder_block import hydra_encoder_blocks
from ensemble_zoo.models.quantization_modes import QuantizationModesMixin
from ensemble_zoo.models.text_inputs import TEXT_INPUTS
from ensemble_zoo.models.vit_geometry import check_heads_divide
from ensemble_zoo.utils.backend import check_attention_implementation
from ensemble_zoo.utils.validation import check_positive_int

#: The arguments `HydraTextBackbone` shares with keras-hub's `BertBackbone`,
#: with its names and meanings.
BERT_ARGUMENTS = (
    "vocabulary_size",
    "num_layers",
    "num_heads",
    "hidden_dim",
    "intermediate_dim",
    "dropout",
    "max_sequence_length",
    "num_segments",
)


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class HydraTextBackbone(QuantizationModesMixin, keras_hub.models.Backbone):
    """A BERT whose members share the embeddings and keep their own heads.

    Token, position and segment embeddings and their layer norm are those
    of keras-hub's `BertBackbone`, computed once and repeated for every
    member. Then come `num_layers` post-norm `HydraEncoderBlock`s (BERT's
    `x = LN(x + attention(x))`, `x = LN(x + MLP(x))`, approximate GELU,
    epsilon 1e-12) over `(batch, members, tokens, hidden_dim)`, where
    padding tokens are masked as keys, and a per-member tanh pooler on the
    first (`[CLS]`) token. With one member keeping every head this is
    keras-hub's `BertBackbone`.

    Args:
        vocabulary_size: int.
        num_layers: int.
        num_heads: int, heads per layer of the original BERT.
        hidden_dim: int.
        intermediate_dim: int, MLP hidden size.
        num_members: int.
        member_num_heads: optional `(num_layers, num_members)` kept-head
            counts. Defaults to every head.
        mlp: `"merge"` or `"grouped"`. Defaults to `"merge"`.
        dropout: float. Defaults to `0.1`.
        max_sequence_length: int. Defaults to `512`.
        num_segments: int. Defaults to `2`.
        attention_implementation: `"auto"`, `"einsum"` or `"fused"`: how
            every `HydraAttention` computes (see there). Defaults to
            `"auto"`, the fused kernel on accelerators, einsums on CPU.
        dtype: optional dtype policy (or its name) of every layer, e.g.
            `"mixed_bfloat16"`.
        **kwargs: other `keras_hub.models.Backbone` arguments (`name`).

    Inputs: a dict of int `(batch, tokens)` tensors `token_ids`,
    `segment_ids` and `padding_mask` (1 = real token). Outputs: a dict with
    `sequence_output` `(batch, members, tokens, hidden_dim)` and
    `pooled_output` `(batch, members, hidden_dim)`.
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_dim,
        intermediate_dim,
        num_members,
        member_num_heads=None,
        mlp="merge",
        dropout=0.1,
        max_sequence_length=512,
        num_segments=2,
        attention_implementation="auto",
        dtype=None,
        **kwargs,
    ):
        check_attention_implementation(attention_implementation)
        num_layers = check_positive_int(num_layers, "num_layers")
        num_heads = check_positive_int(num_heads, "num_heads")
        num_members = check_positive_int(num_members, "num_members")
        check_mlp_mode(mlp)
        check_heads_divide(hidden_dim, num_heads)
        member_num_heads = check_member_num_heads(
            member_num_heads, num_layers, num_members, num_heads
        )
        init = keras.initializers.TruncatedNormal(stddev=0.02)
        # === Layers === (locals first for the torch backend)
        # The token and segment embeddings: `(count, hidden_dim)` tables.
        table = {"output_dim": hidden_dim, "embeddings_initializer": init, "dtype": dtype}
        token_embedding = ReversibleEmbedding(vocabulary_size, name="token_embedding", **table)
        position_embedding = PositionEmbedding(
            sequence_length=max_sequence_length,
            initializer=init,
            dtype=dtype,
            name="position_embedding",
        )
        segment_embedding = keras.layers.Embedding(num_segments, name="segment_embedding", **table)
        embeddings_add = keras.layers.Add(dtype=dtype, name="embeddings_add")
        embeddings_layer_norm = keras.layers.LayerNormalization(
            epsilon=1e-12, dtype=dtype, name="embeddings_layer_norm"
        )
        embeddings_dropout = keras.layers.Dropout(dropout, dtype=dtype, name="embeddings_dropout")
        broadcast = MemberBroadcast(num_members, dtype=dtype, name="member_broadcast")
        blocks = hydra_encoder_blocks(
            num_members,
            member_num_heads,
            [f"transformer_layer_{layer}" for layer in range(num_layers)],
            key_dim=hidden_dim // num_heads,
            mlp_dim=intermediate_dim,
            mlp=mlp,
            dropout_rate=dropout,
            attention_dropout=dropout,
            layer_norm_epsilon=1e-12,
            normalize_first=False,
            activation="gelu_approximate",
            intermediate_dropout=False,
            attention_implementation=attention_implementation,
            dtype=dtype,
        )
        pooled_dense = GroupedDense(
            hidden_dim, num_members, activation="tanh", dtype=dtype, name="pooled_dense"
        )

        # === Functional model ===
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name) for name in TEXT_INPUTS
        }
        tokens = token_embedding(inputs["token_ids"])
        x = embeddings_add(
            (tokens, position_embedding(tokens), segment_embedding(inputs["segment_ids"]))
        )
        x = embeddings_dropout(embeddings_layer_norm(x))
        x = broadcast(x)
        for block in blocks:
            x = block(x, attention_mask=inputs["padding_mask"])
        pooled = pooled_dense(x[:, :, 0, :])
        super().__init__(
            inputs=inputs,
            outputs={"sequence_output": x, "pooled_output": pooled},
            dtype=dtype,
            **kwargs,
        )
        self.embedding_layers = [
            token_embedding,
            position_embedding,
            segment_embedding,
            embeddings_layer_norm,
        ]
        self.encoder_blocks = blocks
        self.pooled_dense = pooled_dense

        # === Config ===
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.max_sequence_length = max_sequence_length
        self.num_segments = num_segments
        self.num_members = num_members
        self.member_num_heads = member_num_heads
        self.mlp = mlp
        self.attention_implementation = attention_implementation

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "num_layers": self.num_layers,
                "num_heads": self.num_heads,
                "hidden_dim": self.hidden_dim,
                "intermediate_dim": self.intermediate_dim,
                "dropout": self.dropout,
                "max_sequence_length": self.max_sequence_length,
                "num_segments": self.num_segments,
                "num_members": self.num_members,
                "member_num_heads": self.member_num_heads,
                "mlp": self.mlp,
                "attention_implementation": self.attention_implementation,
            }
        )
        return config

import keras
import keras_hub
from keras_hub.src.models.vit.vit_layers import ViTEncoderBlock

from ensemble_zoo.layers.gelu import gelu_activation
from ensemble_zoo.layers.member_tiling import TileMembers
from ensemble_zoo.layers.member_tiling import UntileMembers
from ensemble_zoo.models.quantization_modes import QuantizationModesMixin
from ensemble_zoo.models.vit_geometry import set_vit_attributes
from ensemble_zoo.models.vit_geometry import split_vit_arguments
from ensemble_zoo.models.vit_geometry import vit_block_arguments
from ensemble_zoo.models.vit_geometry import vit_config
from ensemble_zoo.models.vit_geometry import vit_embedding_layers
from ensemble_zoo.models.vit_moe.moe_cost import last_n_moe_layers
from ensemble_zoo.models.vit_moe.vit_moe_encoder_block import MOE_OPTIONS
from ensemble_zoo.models.vit_moe.vit_moe_encoder_block import ViTMoEEncoderBlock
from ensemble_zoo.utils.validation import check_positive_int

#: The config entries of `ViTMoEBackbone` beyond `VIT_ARGUMENTS`, each kept
#: as the attribute of that name.
_MOE_ARGUMENTS = ("num_experts", "moe_layers", "ensemble_size", "seed", *MOE_OPTIONS)


def check_moe_layers(moe_layers, num_layers):
    """Sorted 0-based MoE block indices; `None` means the paper's last-2."""
    if moe_layers is None:
        return list(last_n_moe_layers(num_layers, min(2, num_layers // 2)))
    layers = list(moe_layers)
    valid = (
        layers
        and all(not isinstance(i, bool) and isinstance(i, int) for i in layers)
        and len(set(layers)) == len(layers)
        and all(0 <= i < num_layers for i in layers)
    )
    if not valid:
        raise ValueError(
            "`moe_layers` must be a non-empty list of distinct 0-based block "
            f"indices in [0, {num_layers}); got {moe_layers!r}."
        )
    return sorted(layers)


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class ApproximateGELUViTEncoderBlock(ViTEncoderBlock):
    """keras-hub's `ViTEncoderBlock` with the tanh GELU of vit_jax / vmoe.

    Same sublayers and weights; only the MLP's activation differs.
    """

    def build(self, input_shape):
        super().build(input_shape)
        self.mlp.dense_1.activation = gelu_activation("gelu_approximate")


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class ViTMoEBackbone(QuantizationModesMixin, keras_hub.models.Backbone):
    """A ViT with sparse mixture-of-experts blocks: V-MoE and E³.

    keras-hub's ViT (patch embedding, pre-norm blocks, final layer norm)
    where the blocks in `moe_layers` replace their MLP by a `SparseMoE` of
    `num_experts` expert MLPs, `num_selected_experts` (K) per token.

    - `ensemble_size == 1` is **V-MoE** (Riquelme et al.), a one-member
      ensemble.
    - `ensemble_size = M > 1` is **E³**, the efficient ensemble of experts
      (Allingham et al., "Sparse MoEs meet Efficient Ensembles"): the
      experts are split into M contiguous groups of `E / M`, the tokens are
      tiled M times right before the block that holds the first MoE layer
      (everything earlier runs once), and copy m of every token is routed
      only within expert group m. All other weights are shared and the
      router kernel is V-MoE's `(dim, E)`, so E³ has exactly V-MoE's
      parameters.

    The output is `(batch, members, tokens, hidden_dim)` (the zoo's member
    axis; one member for V-MoE).

    Decisions: the tiled batch is member-major (`ensemble_zoo.ops`
    convention; vmoe uses member-minor `repeat`, which only reorders
    rows); the router noise is `noise_std` (default `1 / E`, the paper's
    value; vmoe's E³ code uses `M / E`); training and inference capacity
    factors default to the paper's fine-tuning values, 1.5 and 8.

    Args:
        num_experts: int, E (per MoE layer).
        num_selected_experts: int, K, at most `E / ensemble_size`.
            Defaults to 1.
        moe_layers: 0-based indices of the MoE blocks. Defaults to the
            paper's "last-2": the last two odd blocks (e.g. 9 and 11 of 12).
        ensemble_size: int, M. Defaults to 1 (V-MoE).
        capacity_factor: float. Defaults to 1.5.
        eval_capacity_factor: float or `None`. Defaults to 8.0.
        group_size: int or `None`, tokens per routing group (per member);
            `None` routes each image's tokens as one group.
        batch_priority: bool, Batch-Prioritized Routing. Defaults to `False`.
        noise_std: float or `None`, router noise std in training.
        capacity_multiple_of: int, round every capacity up to a multiple of
            this. Defaults to 1 (vmoe's default is 4).
        importance_loss_weight: float, weight of the routers' importance
            loss in training. Defaults to 0.005 (the paper's).
        load_loss_weight: float, weight of the routers' load loss.
            Defaults to 0.005.
        mlp_activation: `"gelu"` (exact, keras-hub's ViT, the default) or
            `"gelu_approximate"` (tanh, vit_jax / vmoe), the activation of
            every MLP, dense blocks and experts alike.
        bfloat16_dispatch: bool, round expert inputs and outputs to
            bfloat16 as vmoe's `Bfloat16Dispatcher` does. Defaults to
            `False`.
        seed: int or `None`, seeds the routing noise (block `i` uses
            `seed + i`).
        dispatcher: `"einsum"` (one-hot dispatch, the default) or
            `"indices"` (gather dispatch, `O(tokens * K)` memory); see
            `SparseMoE`. Same outputs; kept in presets.
        router: `"top_k"` (default: V-MoE's noisy top-K), `"experts_choice"`
            (each expert takes its top-C tokens; vmoe's
            `NoisyTopItemsPerExpertRouter`) or `"soft"` (Soft MoE; vmoe's
            `SoftRouter`), the router of every MoE block; see `SparseMoE`.
            Experts Choice and Soft MoE take `num_selected_experts=1`, no
            batch priority, the einsum dispatcher and no auxiliary loss.
        num_slots: int or `None`, Soft MoE's slots per expert; `None`
            derives them from `capacity_factor` (then `eval_capacity_factor`
            must be `None` or equal). Only with `router="soft"`.
        capacity_rounding: `"ceil"`, `"round"` (half to even) or `None`
            (default: vmoe's default for the router, `"ceil"` for top-K and
            Experts Choice, `"round"` for Soft MoE).
        dtype: optional dtype policy (or its name) of every layer, e.g.
            `"mixed_bfloat16"`. Defaults to the global policy.
        **kwargs: keras-hub `ViTBackbone`'s arguments by keyword
            (`split_vit_arguments`; `mlp_dim` is the MLP size of dense
            blocks and of every expert), and `name`.

    Example:

    ```python
    import numpy as np
    from ensemble_zoo.models import ViTMoEBackbone

    e3 = ViTMoEBackbone(
        image_shape=(8, 8, 1), patch_size=2, num_layers=4, num_heads=2,
        hidden_dim=16, mlp_dim=32, num_experts=4, num_selected_experts=1,
        moe_layers=[1, 3], ensemble_size=2,
    )
    e3(np.zeros((3, 8, 8, 1), "float32")).shape  # (3, 2, 17, 16)
    ```
    """

    def __init__(
        self,
        *,
        num_experts,
        num_selected_experts=1,
        moe_layers=None,
        ensemble_size=1,
        capacity_factor=1.5,
        eval_capacity_factor=8.0,
        group_size=None,
        batch_priority=False,
        noise_std=None,
        capacity_multiple_of=1,
        importance_loss_weight=0.005,
        load_loss_weight=0.005,
        mlp_activation="gelu",
        bfloat16_dispatch=False,
        seed=None,
        dispatcher="einsum",
        router="top_k",
        num_slots=None,
        capacity_rounding=None,
        dtype=None,
        **kwargs,
    ):
        num_experts = check_positive_int(num_experts, "num_experts")
        ensemble_size = check_positive_int(ensemble_size, "ensemble_size")
        if num_experts % ensemble_size:
            raise ValueError(
                f"`num_experts` ({num_experts}) must be divisible by "
                f"`ensemble_size` ({ensemble_size}): each member routes to its "
                "own equal share of the experts."
            )
        vit, kwargs = split_vit_arguments(type(self).__name__, kwargs)
        moe_layers = check_moe_layers(moe_layers, vit.num_layers)
        moe_options = {
            "num_selected_experts": num_selected_experts,
            "capacity_factor": capacity_factor,
            "eval_capacity_factor": eval_capacity_factor,
            "group_size": group_size,
            "batch_priority": batch_priority,
            "noise_std": noise_std,
            "capacity_multiple_of": capacity_multiple_of,
            "importance_loss_weight": importance_loss_weight,
            "load_loss_weight": load_loss_weight,
            "mlp_activation": mlp_activation,
            "bfloat16_dispatch": bfloat16_dispatch,
            "dispatcher": dispatcher,
            "router": router,
            "num_slots": num_slots,
            "capacity_rounding": capacity_rounding,
        }
        moe_config = {
            "num_experts": num_experts,
            "moe_layers": moe_layers,
            "ensemble_size": ensemble_size,
            "seed": seed,
            **moe_options,
        }
        gelu_activation(mlp_activation, "mlp_activation")
        dense_block_cls = (
            ViTEncoderBlock if mlp_activation == "gelu" else ApproximateGELUViTEncoderBlock
        )

        # === Layers === (locals first: the torch backend forbids setting
        # layer attributes before keras.Model.__init__)
        embedding, embedding_dropout = vit_embedding_layers(vit, dtype=dtype)
        encoder_blocks = []
        for i in range(vit.num_layers):
            common = dict(
                num_heads=vit.num_heads,
                hidden_dim=vit.hidden_dim,
                mlp_dim=vit.mlp_dim,
                dtype=dtype,
                name=f"transformer_block_{i + 1}",
                **vit_block_arguments(vit),
            )
            if i in moe_layers:
                block = ViTMoEEncoderBlock(
                    num_experts=num_experts,
                    num_members=ensemble_size,
                    seed=None if seed is None else seed + i,
                    **moe_options,
                    **common,
                )
            else:
                block = dense_block_cls(**common)
            encoder_blocks.append(block)
        tile = TileMembers(ensemble_size, dtype=dtype, name="tile_members")
        layer_norm = keras.layers.LayerNormalization(
            epsilon=vit.layer_norm_epsilon, dtype=dtype, name="ln"
        )
        untile = UntileMembers(ensemble_size, dtype=dtype, name="untile_members")

        # === Functional model ===
        inputs = keras.Input(shape=vit.image_shape, name="images")
        x = embedding_dropout(embedding(inputs))
        for i, block in enumerate(encoder_blocks):
            if i == moe_layers[0]:
                x = tile(x)  # E3: tile right before the first MoE block
            x = block(x)
        outputs = untile(layer_norm(x))
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)
        set_vit_attributes(self, vit, embedding, encoder_blocks, layer_norm, moe_config)

    @property
    def moe_blocks(self):
        """The `ViTMoEEncoderBlock`s, in order."""
        return [self.encoder_blocks[i] for i in self.moe_layers]

    @property
    def num_members(self):
        """The members M of the ensemble (`ensemble_size`; 1 for V-MoE)."""
        return self.ensemble_size

    def get_config(self):
        config = super().get_config()
        config.update(vit_config(self, _MOE_ARGUMENTS))
        config["moe_layers"] = list(self.moe_layers)
        return config

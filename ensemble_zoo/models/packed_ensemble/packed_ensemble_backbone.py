import keras

from ensemble_zoo.models.hydra.hydra_encoder_block import hydra_vit_blocks
from ensemble_zoo.models.member_axis_vit_backbone import MemberAxisViTBackbone
from ensemble_zoo.models.vit_cost import num_tokens
from ensemble_zoo.models.vit_geometry import split_vit_arguments
from ensemble_zoo.models.vit_geometry import vit_embedding_layers
from ensemble_zoo.utils.backend import check_attention_implementation
from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_real


def packed_member_geometry(hidden_dim, num_heads, mlp_dim, num_members, alpha, gamma):
    """Each member's `(width, heads, mlp_dim)` in a packed ViT, or raises.

    A member is `alpha / num_members` times as wide as the base ViT
    (`hidden_dim`, `mlp_dim`); heads keep the base's size
    `hidden_dim / num_heads`, so a member has `alpha * num_heads /
    num_members` of them. `gamma` must divide the member's heads and MLP
    width.
    """
    alpha = check_real(alpha, "alpha", low=0.0, low_open=True)
    gamma = check_positive_int(gamma, "gamma")
    key_dim = hidden_dim // num_heads
    sizes = {
        "width": alpha * hidden_dim / num_members,
        "heads": alpha * num_heads / num_members,
        "mlp_dim": alpha * mlp_dim / num_members,
    }
    bad = {k: v for k, v in sizes.items() if v != int(v) or v < 1 or int(v) % gamma}
    if bad:
        raise ValueError(
            f"`alpha` ({alpha}) and `num_members` ({num_members}) must give "
            f"every member a whole number of heads (of size {key_dim}) and MLP "
            f"units, each divisible by `gamma` ({gamma}): alpha * num_heads / "
            f"M = {sizes['heads']}, alpha * mlp_dim / M = {sizes['mlp_dim']}."
        )
    return int(sizes["width"]), int(sizes["heads"]), int(sizes["mlp_dim"])


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class PackedEnsembleBackbone(MemberAxisViTBackbone):
    """A Packed-Ensembles ViT: M narrow ViTs in one grouped network.

    Packed-Ensembles (Laurent et al., ICLR 2023; the baseline of Table 1 of
    the Hydra paper, "Ensembling Pruned Attention Heads for Uncertainty-Aware
    Efficient Transformers", with `M = 3`, `alpha = 2`) widens a base
    network by `alpha` and splits every layer into `M` independent members,
    each split again into `gamma` groups. For a ViT with width `D`, `H` heads
    and MLP width `F`, member `m` is a ViT of width `alpha * D / M`,
    `alpha * H / M` heads (of the base's head size) and MLP width
    `alpha * F / M`; with `gamma > 1` its attention and MLP projections are
    block-diagonal with `gamma` blocks (`gamma` groups of heads and
    channels), its layer norms are whole. Every layer is per member, as
    torch-uncertainty's packed layers are (the first layer sees the whole
    image, the last gives each member's classes), so the members share no
    weight: `alpha=1, gamma=1` is exactly `M` ViTs of width `D / M`.

    Runs all members in one pass: one patch embedding of `M` x the member
    width (member `m` owns channels `[m * w, (m + 1) * w)`), then
    `HydraEncoderBlock`s with per-member (`GroupedDense`) MLPs and
    `HydraAttention` over `M * gamma` groups, and a per-member final layer
    norm. Output: `(batch, members, tokens, member_width)`.

    Args:
        num_members: int, `M`.
        alpha: float, the width factor. Defaults to `2` (the Hydra paper's
            setting).
        gamma: int, groups per member. Defaults to `1`.
        attention_implementation: `"auto"`, `"einsum"` or `"fused"`, see
            `HydraAttention`. Defaults to `"auto"`.
        dtype: optional dtype policy (or its name) of every layer, e.g.
            `"mixed_bfloat16"`. Defaults to the global policy.
        **kwargs: the base ViT's arguments by keyword (keras-hub
            `ViTBackbone`'s; `split_vit_arguments`), and `name`.

    Example:

    ```python
    import numpy as np
    from ensemble_zoo.models import PackedEnsembleBackbone

    backbone = PackedEnsembleBackbone(
        image_shape=(8, 8, 1), patch_size=2, num_layers=2, num_heads=6,
        hidden_dim=48, mlp_dim=96, num_members=4, alpha=2,
    )
    backbone(np.zeros((2, 8, 8, 1), "float32")).shape  # (2, 4, 17, 24)
    ```
    """

    member_arguments = ("num_members", "alpha", "gamma", "attention_implementation")

    def __init__(
        self,
        *,
        num_members,
        alpha=2,
        gamma=1,
        attention_implementation="auto",
        dtype=None,
        **kwargs,
    ):
        check_attention_implementation(attention_implementation)
        num_members = check_positive_int(num_members, "num_members")
        vit, kwargs = split_vit_arguments(type(self).__name__, kwargs)
        width, heads, member_mlp = packed_member_geometry(
            vit.hidden_dim, vit.num_heads, vit.mlp_dim, num_members, alpha, gamma
        )
        tokens = num_tokens(vit.image_shape, vit.patch_size, vit.use_class_token)
        gamma = int(gamma)

        # === Layers ===
        embedding, embedding_dropout = vit_embedding_layers(
            vit, width=num_members * width, dtype=dtype
        )
        split = keras.layers.Reshape((tokens, num_members, width), dtype=dtype, name="member_split")
        members_first = keras.layers.Permute((2, 1, 3), dtype=dtype, name="members_first")
        # Every member keeps its `heads`: the blocks are Hydra's, unpruned.
        encoder_blocks = hydra_vit_blocks(
            vit,
            num_members,
            [[heads] * num_members] * vit.num_layers,
            mlp_dim=member_mlp,
            mlp="grouped",
            attention_implementation=attention_implementation,
            groups=gamma,
            dtype=dtype,
        )
        stem = [embedding, embedding_dropout, split, members_first]
        member = {
            "num_members": num_members,
            "alpha": alpha,
            "gamma": gamma,
            "attention_implementation": attention_implementation,
        }
        self._build_member_vit(vit, member, stem, encoder_blocks, dtype, kwargs)
        self.member_hidden_dim = width
        self.member_num_heads = heads
        self.member_mlp_dim = member_mlp

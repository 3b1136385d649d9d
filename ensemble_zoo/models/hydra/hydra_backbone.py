import keras

from ensemble_zoo.layers.member_broadcast import MemberBroadcast
from ensemble_zoo.models.hydra.hydra_encoder_block import check_mlp_mode
from ensemble_zoo.models.hydra.hydra_encoder_block import hydra_vit_blocks
from ensemble_zoo.models.member_axis_vit_backbone import MemberAxisViTBackbone
from ensemble_zoo.models.vit_geometry import split_vit_arguments
from ensemble_zoo.models.vit_geometry import vit_embedding_layers
from ensemble_zoo.utils.backend import check_attention_implementation
from ensemble_zoo.utils.validation import check_positive_int


def check_member_num_heads(member_num_heads, num_layers, num_members, num_heads):
    """Returns `(num_layers, num_members)` kept-head counts as lists."""
    if member_num_heads is None:
        return [[num_heads] * num_members for _ in range(num_layers)]
    counts = [list(layer) for layer in member_num_heads]
    valid = len(counts) == num_layers and all(
        len(layer) == num_members
        and all(
            not isinstance(c, bool) and isinstance(c, int) and 0 <= c <= num_heads for c in layer
        )
        for layer in counts
    )
    if not valid:
        raise ValueError(
            "`member_num_heads` must be a (num_layers, num_members) = "
            f"({num_layers}, {num_members}) nested list of ints in [0, "
            f"{num_heads}] (heads each member keeps per layer); got "
            f"{member_num_heads!r}."
        )
    return counts


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class HydraBackbone(MemberAxisViTBackbone):
    """A ViT whose members share the embedding and keep their own heads.

    The image is patched and embedded once (keras-hub's
    `ViTPatchingAndEmbedding`: shared, as the members' frozen embeddings
    are in the paper), repeated for every member, and run through
    `num_layers` `HydraEncoderBlock`s, where member `m` uses only its own
    kept heads of each layer, its own layer norms and either the shared
    merged MLP or its own. A final per-member layer norm gives
    `(batch, members, tokens, hidden_dim)`.

    Layer `l` has `max_m member_num_heads[l][m]` head slots (at least 1),
    so pruned heads cost nothing; members with fewer heads are masked.
    With one member keeping every head this is keras-hub's `ViTBackbone`
    (same weights, same outputs).

    Args:
        num_members: int.
        member_num_heads: optional `(num_layers, num_members)` nested list
            of kept-head counts. Defaults to every head for every member.
        mlp: `"merge"` (one MLP shared by the members, the paper's
            choice) or `"grouped"` (one per member). Defaults to `"merge"`.
        attention_implementation: `"auto"`, `"einsum"` or `"fused"`: how
            every `HydraAttention` computes (see there). Defaults to
            `"auto"`, the fused kernel on accelerators, einsums on CPU.
        dtype: optional dtype policy (or its name) of every layer, e.g.
            `"mixed_bfloat16"`. Defaults to the global policy.
        **kwargs: the unpruned ViT's arguments, as keras-hub's
            `ViTBackbone` takes them (`image_shape` to `mlp_dim` required;
            `split_vit_arguments`), and `name`.

    Example:

    ```python
    import numpy as np
    from ensemble_zoo.models import HydraBackbone

    backbone = HydraBackbone(
        image_shape=(8, 8, 1), patch_size=2, num_layers=2, num_heads=4,
        hidden_dim=16, mlp_dim=32, num_members=3,
        member_num_heads=[[3, 3, 2], [4, 2, 3]],
    )
    backbone(np.zeros((2, 8, 8, 1), "float32")).shape  # (2, 3, 17, 16)
    ```
    """

    member_arguments = ("num_members", "member_num_heads", "mlp", "attention_implementation")

    def __init__(
        self,
        *,
        num_members,
        member_num_heads=None,
        mlp="merge",
        attention_implementation="auto",
        dtype=None,
        **kwargs,
    ):
        check_attention_implementation(attention_implementation)
        num_members = check_positive_int(num_members, "num_members")
        check_mlp_mode(mlp)
        vit, kwargs = split_vit_arguments(type(self).__name__, kwargs)
        member_num_heads = check_member_num_heads(
            member_num_heads, vit.num_layers, num_members, vit.num_heads
        )

        # === Layers === (locals first: the torch backend forbids setting
        # layer attributes before keras.Model.__init__)
        embedding, embedding_dropout = vit_embedding_layers(vit, dtype=dtype)
        broadcast = MemberBroadcast(num_members, dtype=dtype, name="member_broadcast")
        encoder_blocks = hydra_vit_blocks(
            vit,
            num_members,
            member_num_heads,
            mlp=mlp,
            attention_implementation=attention_implementation,
            dtype=dtype,
        )
        stem = [embedding, embedding_dropout, broadcast]
        member = {
            "num_members": num_members,
            "member_num_heads": member_num_heads,
            "mlp": mlp,
            "attention_implementation": attention_implementation,
        }
        self._build_member_vit(vit, member, stem, encoder_blocks, dtype, kwargs)
        self.key_dim = vit.hidden_dim // vit.num_heads

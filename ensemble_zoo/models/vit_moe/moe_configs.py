"""The configurations of the E³ and Soft MoE papers as `ViTMoEBackbone`
and `vit_moe_flops` arguments (`vit_moe_config`, `soft_moe_config`), so
their published costs can be checked without building the models."""

from ensemble_zoo.models.vit_moe.moe_cost import VIT_FAMILIES
from ensemble_zoo.models.vit_moe.moe_cost import last_n_moe_layers

#: The sizes that a ViT family's entry in `VIT_FAMILIES` or
#: `_SOFT_MOE_FAMILIES` starts with.
_SIZE_NAMES = ("hidden_dim", "mlp_dim", "num_layers")


def _parse_model(model, families, example):
    """Reads a `"<family>/<patch>"` model name such as `example`.

    Returns:
        `(sizes, rest)`: the `_SIZE_NAMES` and `patch_size` of the model as
        a dict, and the other entries of its family in `families`.
    """
    family, _, patch = str(model).partition("/")
    if family not in families or not patch.isdigit():
        raise ValueError(
            f"`model` must look like {example!r} with a family in {tuple(families)}; got {model!r}."
        )
    entry = families[family]
    sizes = dict(zip(_SIZE_NAMES, entry), patch_size=int(patch))
    return sizes, entry[len(_SIZE_NAMES) :]


def vit_moe_config(
    model,
    num_selected_experts=None,
    ensemble_size=1,
    num_experts=32,
    image_size=384,
    num_classes=1000,
    capacity_factor=1.5,
):
    """`vit_moe_flops` arguments of a configuration of the E³ paper.

    The ViT families S (8 blocks), B (12), L (24) and H (32) with the
    paper's "last-n" MoE placement (last 2 odd blocks for S, B, L, e.g.
    0-based blocks 9 and 11 of B; last 5 for H), E = 32 experts, fine-tuning
    at 384 px on 1000 classes with capacity factor 1.5, 8 images per routing
    group, a `Dense(D) + tanh` pre-logits layer and gather-style dispatch
    (`dispatcher="indices"`), the setting of the paper's Table 20. Pass
    `unit="training_flops"` to `vit_moe_flops` for that table's unit.

    Args:
        model: str. `"S/32"`, `"B/32"`, `"B/16"`, `"L/32"`, `"L/16"` or
            `"H/14"` (any `"<family>/<patch>"` of S, B, L, H).
        num_selected_experts: int or None. K; `None` for the dense ViT.
        ensemble_size: int. M, E³ members (needs `num_selected_experts`).
        num_experts: int. Total experts E.
        image_size: int. Resolution in pixels.
        num_classes: int. Classifier outputs.
        capacity_factor: float. Expert buffer capacity factor.

    Returns:
        A dict of keyword arguments for `vit_moe_flops`.

    Example:

    ```python
    from ensemble_zoo.models.vit_moe import vit_moe_config

    config = vit_moe_config("B/16", num_selected_experts=1, ensemble_size=2)
    assert config["moe_layers"] == (9, 11)
    assert config["patch_size"] == 16 and config["hidden_dim"] == 768
    ```
    """
    sizes, (num_moe,) = _parse_model(model, VIT_FAMILIES, "B/16")
    config = dict(
        sizes,
        image_size=image_size,
        num_classes=num_classes,
        representation_size=sizes["hidden_dim"],
    )
    if num_selected_experts is None:
        if ensemble_size != 1:
            raise ValueError(
                "E³ (`ensemble_size > 1`) needs `num_selected_experts`; a "
                "dense ViT has no experts to partition."
            )
        return config
    config.update(
        moe_layers=last_n_moe_layers(sizes["num_layers"], num_moe),
        num_experts=num_experts,
        num_selected_experts=num_selected_experts,
        ensemble_size=ensemble_size,
        capacity_factor=capacity_factor,
        dispatcher="indices",
    )
    return config


#: Hidden size, MLP size, blocks, heads and MoE blocks (the last n, all
#: consecutive) of the Soft MoE paper's ViTs (vmoe's
#: `projects/soft_moe/configs/common.py` and `pretrain_jft4b.py`).
_SOFT_MOE_FAMILIES = {
    "S": (384, 1536, 12, 6, 6),
    "B": (768, 3072, 12, 12, 6),
    "L": (1024, 4096, 24, 16, 12),
    "H": (1280, 5120, 32, 16, 16),
}


def soft_moe_config(model, num_experts=128, num_slots=1, image_size=224, num_classes=1000):
    """`ViTMoEBackbone` and `vit_moe_flops` arguments of a Soft MoE paper model.

    The Soft MoE paper's (Puigcerver et al. 2023) vision models as vmoe's
    `projects/soft_moe/configs` build them: ViT-S/B/L/H without class token
    (`classifier='gap'`, mean pooling), the last half of the blocks Soft
    MoE (6 of 12 for S and B, 12 of 24 for L, 16 of 32 for H) with
    `num_experts` experts of `num_slots` slots (128 x 1 in its JFT-4B
    models), one routing group per image (224 px, 196 tokens). vmoe's
    models also normalise queries and keys (`attention_qk_norm`), which
    `ViTMoEBackbone` does not: 2 x head_dim scales per block (1,536 of
    S/16's parameters) are left out.

    Args:
        model: str, `"S/16"`, `"B/16"`, ... (a family of S, B, L, H and a
            patch size).
        num_experts: int. Defaults to 128.
        num_slots: int, slots per expert. Defaults to 1.
        image_size: int. Defaults to 224.
        num_classes: int. Defaults to 1000.

    Returns:
        A dict with `"backbone"` (`ViTMoEBackbone` arguments) and
        `"flops"` (`vit_moe_flops` arguments).

    Example:

    ```python
    from ensemble_zoo.models.vit_moe import soft_moe_config
    from ensemble_zoo.models.vit_moe import vit_moe_flops

    config = soft_moe_config("S/16")
    assert config["backbone"]["moe_layers"] == [6, 7, 8, 9, 10, 11]
    # 128 slots for 196 tokens: the experts cost less than a dense MLP.
    cost = vit_moe_flops(**config["flops"])
    assert 4.2e9 < cost["total"] < 4.3e9
    ```
    """
    sizes, (num_heads, num_moe) = _parse_model(model, _SOFT_MOE_FAMILIES, "S/16")
    num_layers, patch = sizes["num_layers"], sizes["patch_size"]
    moe_layers = list(range(num_layers - num_moe, num_layers))
    tokens = (image_size // patch) ** 2
    # What the backbone and the cost count share.
    model = dict(
        sizes, num_experts=num_experts, router="soft", num_slots=num_slots, use_class_token=False
    )
    backbone = dict(
        model,
        image_shape=(image_size, image_size, 3),
        num_heads=num_heads,
        moe_layers=moe_layers,
        eval_capacity_factor=None,
    )
    flops = dict(
        model,
        image_size=image_size,
        num_classes=num_classes,
        moe_layers=tuple(moe_layers),
        group_size=tokens,
    )
    return {"backbone": backbone, "flops": flops}

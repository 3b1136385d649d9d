"""Where members go in a keras-hub model: projections by layer type and role.

keras-hub builds its families from a few standard layers: `Dense` and
`EinsumDense` projections inside attention and feed-forward blocks, held
as attributes named after their role (`query_dense`,
`feedforward_intermediate_dense`, `gate_proj`, ...). A method that puts
members into a network finds its sites here, by type and by those names,
as keras-hub's own `enable_lora` finds its targets by name; it never
checks a family's class. `ROLE_NAMES` lists the names of each role;
`ROLE_OVERRIDES` is the registry of the layers whose names mean another
role than elsewhere (one entry per keras-hub layer class).
"""

import keras

from ensemble_zoo.utils.sublayers import sublayers

#: Roles of the projections, each with the attribute or layer names
#: keras-hub gives that projection (without leading underscores): the
#: attention's query, key, value and output projections (GPT-NeoX fuses the
#: first three, `"query_key_value"`) and the feed-forward block's gate (the
#: one that goes through the activation), up and down projections.
ROLE_NAMES = {
    "query": ("query", "query_dense", "q_proj", "q_dense"),
    "key": ("key", "key_dense", "k_proj", "k_dense"),
    "value": ("value", "value_dense", "v_proj", "v_dense"),
    "attention_output": ("attention_output", "output_dense", "o_proj", "o_dense"),
    "query_key_value": ("query_key_value", "qkv_dense"),
    "mlp_gate": ("gating_ffw", "feedforward_gate_dense", "gate_proj"),
    "mlp_up": (
        "gating_ffw_2",
        "feedforward_intermediate_dense",
        "up_proj",
        "mlp_intermediate_dense",
        "dense_h_to_4h",
    ),
    "mlp_down": (
        "ffw_linear",
        "feedforward_output_dense",
        "down_proj",
        "mlp_output_dense",
        "dense_4h_to_h",
    ),
}
#: The feed-forward roles.
FEEDFORWARD_ROLES = ("mlp_gate", "mlp_up", "mlp_down")

#: The attention roles, and the fused projection that stands for the
#: first three in a family that fuses them.
ATTENTION_ROLES = ("query", "key", "value", "attention_output")
FUSED_ROLE = "query_key_value"

#: keras-hub layer class name -> {attribute: role} for the layers whose
#: projections `ROLE_NAMES` would not name, or would name wrongly: the ViT
#: MLP block's two layers (and Swin's, MiT's and DeiT's), FNet's encoder
#: (no attention; its `output_dense` is the feed-forward output), and the
#: one-letter names of Swin's window attention and MiT's (SegFormer's)
#: attention.
ROLE_OVERRIDES = {
    "MLP": {"dense_1": "mlp_up", "dense_2": "mlp_down"},
    "Mlp": {"fc1": "mlp_up", "fc2": "mlp_down"},
    "MixFFN": {"fc1": "mlp_up", "fc2": "mlp_down"},
    "DeiTIntermediate": {"dense": "mlp_up"},
    "DeiTOutput": {"dense": "mlp_down"},
    "FNetEncoder": {"intermediate_dense": "mlp_up", "output_dense": "mlp_down"},
    "WindowAttention": {"qkv": "query_key_value", "proj": "attention_output"},
    "SegFormerMultiheadAttention": {
        "q": "query",
        "k": "key",
        "v": "value",
        "proj": "attention_output",
    },
}


def projection_role(parent, attribute, projection):
    """The role of `projection`, held by `parent` as `attribute`: the
    parent class's `ROLE_OVERRIDES` entry, else the role whose
    `ROLE_NAMES` hold the attribute (without leading underscores) or the
    layer's name; `None` for none."""
    name = attribute.lstrip("_")
    override = ROLE_OVERRIDES.get(type(parent).__name__)
    if override is not None:
        return override.get(name)
    names = {name, projection.name}
    return next((role for role, known in ROLE_NAMES.items() if names & set(known)), None)


def layers_in_order(model):
    """Every layer under `model` (itself first), depth first, each parent's
    sublayers in the order it holds them: the model's layer order (keras'
    `_flatten_layers` visits each parent's sublayers last to first)."""
    ordered, seen = [], set()
    stack = [model]
    while stack:
        layer = stack.pop()
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        ordered.append(layer)
        stack.extend(reversed(layer._layers))
    return ordered


def projection_sites(model, roles, types=(keras.layers.Dense, keras.layers.EinsumDense)):
    """`[(role, parent, attribute)]` of every projection of a type in
    `types` under `model` whose role is in `roles`, in keras'
    `_flatten_layers` order (each parent's sublayers last to first;
    `layers_in_order` is the model's order), a parent's projections in
    attribute order. Mixture-of-experts
    parts (a path naming an expert) are left out: their MLPs are not one
    projection.

    Example:

    ```python
    import keras_hub
    from ensemble_zoo.models.member_sites import projection_sites

    vit = keras_hub.models.ViTBackbone(
        image_shape=(8, 8, 1), patch_size=2, num_layers=2, num_heads=2,
        hidden_dim=16, mlp_dim=32,
    )
    [role for role, _, _ in projection_sites(vit, ("mlp_up", "mlp_down"))]
    # ['mlp_up', 'mlp_down', 'mlp_up', 'mlp_down']
    ```
    """
    sites = []
    for parent in model._flatten_layers(include_self=True):
        if "expert" in (parent.path or "").lower():
            continue
        for attribute, layer in sublayers(parent):
            if isinstance(layer, types) and "expert" not in attribute.lower():
                role = projection_role(parent, attribute, layer)
                if role in roles:
                    sites.append((role, parent, attribute))
    return sites


def attention_sites(model, targets):
    """`[(parent, attribute)]` of the attention projections of `model` for
    `targets` (names among `ATTENTION_ROLES`), in the model's layer order:
    every attention layer's, whatever its class, found by role. In a
    family that fuses the query, key and value projections (Swin's
    `qkv`), `"query"`, `"key"` and `"value"` share its one site.

    Raises:
        ValueError: `model` has no projection for some target (FNet mixes
            tokens by Fourier transforms and has no attention), or fuses
            the query, key and value and `targets` names only some.
    """
    qkv = ("query", "key", "value")
    found = projection_sites(model, ATTENTION_ROLES + (FUSED_ROLE,))
    present = {role for role, _, _ in found}
    roles = set(targets)
    if roles & set(qkv) and not present & set(qkv) and FUSED_ROLE in present:
        if not set(qkv) <= roles:
            raise ValueError(
                f"`{model.name}` ({type(model).__name__}) computes the query, key and value "
                "in one fused projection: `targets` must name all three or none of them; "
                f"got {list(targets)}."
            )
        roles = (roles - set(qkv)) | {FUSED_ROLE}
    missing = [t for t in targets if t not in present and not (t in qkv and FUSED_ROLE in roles)]
    if missing:
        raise ValueError(
            f"`{model.name}` ({type(model).__name__}) has no attention projection for "
            f"{missing}: LoRA-Ensemble adapts the attention's query, key, value and output "
            "projections (`ensemble_zoo.models.member_sites` finds them by layer type and "
            "role); a model without attention (FNet) cannot take it."
        )
    return [(parent, attribute) for role, parent, attribute in found if role in roles]

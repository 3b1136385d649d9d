"""The V-MoE / E³ cost counter against the E³ paper ("Sparse MoEs meet
Efficient Ensembles") and against real layers."""

import math
import os
from fractions import Fraction

import keras
import numpy as np
import pytest
from conftest import BACKEND

from ensemble_zoo.layers.moe.top_k_router import TopKRouter
from ensemble_zoo.layers.moe.top_k_router import compute_capacity
from ensemble_zoo.models.vit_moe import last_n_moe_layers
from ensemble_zoo.models.vit_moe import vit_moe_config
from ensemble_zoo.models.vit_moe import vit_moe_flops

SIZES = ("S/32", "B/32", "B/16", "L/32", "L/16", "H/14")

# The E³ paper, App. M.1, Table 20: downstream training GFLOPs per image.
# Keys: None for ViT, (K, M) for V-MoE (M = 1) and E³ (M > 1).
TABLE_20 = {
    None: dict(zip(SIZES, (24.01, 77.97, 334.48, 271.83, 1151.71, 3033.60))),
    (1, 1): dict(zip(SIZES, (26.02, 82.35, 351.91, 279.55, 1182.08, 3179.90))),
    (2, 1): dict(zip(SIZES, (31.66, 94.93, 401.98, 301.75, 1270.78, 3617.94))),
    (4, 1): dict(zip(SIZES, (42.95, 120.11, 501.99, 346.25, 1448.06))),
    (8, 1): {"S/32": 65.59, "B/32": 170.44, "L/32": 435.26},
    (1, 2): dict(zip(SIZES, (36.69, 105.89, 452.62, 320.92, 1356.46, 4183.28))),
    (1, 4): {"S/32": 58.03, "B/32": 152.98, "L/32": 403.77},
    (2, 2): dict(zip(SIZES, (47.98, 131.06, 552.65, 365.42, 1533.74))),
    (2, 4): {"S/32": 80.66, "B/32": 203.31, "L/32": 492.77},
    (4, 2): {"S/32": 70.61, "B/32": 181.40, "L/32": 454.43},
}
MOE_ROWS = [(key, size) for key, row in TABLE_20.items() if key for size in row]
# Table 25's "Downstream ΔFLOPs (%)" of E³ (K=1, M=2) over V-MoE (K=2),
# printed by the paper itself (not derived here).
DELTA_FLOPS_E3_VS_VMOE_K2 = dict(zip(SIZES, (15.87, 11.54, 12.60, 6.35, 6.74, 15.63)))


def training_gflops(size, key):
    if key is None:
        config = vit_moe_config(size)
    else:
        config = vit_moe_config(size, key[0], ensemble_size=key[1])
    return vit_moe_flops(**config, unit="training_flops")["total"] / 1e9


# --- (a) the paper's Table 20 -------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_dense_vit_rows_of_table_20(size):
    """Every dense ViT row, within 2% (in fact 0.4-0.7%, and always below:
    the count leaves out the element-wise work XLA also counts)."""
    paper = TABLE_20[None][size]
    error = training_gflops(size, None) / paper - 1
    assert abs(error) < 0.02, (size, error)
    assert -0.01 < error < 0, (size, error)


@pytest.mark.parametrize("key,size", MOE_ROWS)
def test_moe_and_e3_rows_of_table_20(key, size):
    """The 40 V-MoE and E³ cells: 0.1-2.3% below the table with
    gather-style dispatch (the gap grows with K, as the uncounted GELU and
    expert-dropout work on the capacity buffers does)."""
    paper = TABLE_20[key][size]
    error = training_gflops(size, key) / paper - 1
    assert -0.025 < error < 0, (key, size, error)


def test_table_20_excludes_dense_dispatch_einsums():
    """Counting one-hot dispatch/combine einsums at the code's 8 images per
    group overshoots the table by far: it is not the paper's convention."""
    config = vit_moe_config("B/16", 1)
    config["dispatcher"] = "einsum"
    einsum = vit_moe_flops(**config, unit="training_flops")["total"] / 1e9
    assert einsum / TABLE_20[(1, 1)]["B/16"] - 1 > 0.15


# --- (b) E³ savings ------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_e3_saving_against_two_vmoe_k1(size):
    """E³ (K=1, M=2) vs a down-DE of two V-MoE (K=1): the paper's
    29.5% (S/32) ... 42.6% (L/16), within 2 percentage points."""
    paper = 1 - TABLE_20[(1, 2)][size] / (2 * TABLE_20[(1, 1)][size])
    e3, vmoe = training_gflops(size, (1, 2)), training_gflops(size, (1, 1))
    ours = 1 - e3 / (2 * vmoe)
    assert abs(ours - paper) < 0.02, (size, ours, paper)


def test_e3_savings_values():
    expected = {"S/32": 0.295, "B/16": 0.357, "L/16": 0.426, "H/14": 0.342}
    for size, saving in expected.items():
        ours = 1 - training_gflops(size, (1, 2)) / (2 * training_gflops(size, (1, 1)))
        assert abs(ours - saving) < 0.02, (size, ours)


@pytest.mark.parametrize("size", SIZES)
def test_e3_extra_cost_over_vmoe_k2_matches_table_25(size):
    ours = training_gflops(size, (1, 2)) / training_gflops(size, (2, 1)) - 1
    paper = DELTA_FLOPS_E3_VS_VMOE_K2[size]
    assert abs(100 * ours - paper) < 1.0, (size, ours)


@pytest.mark.parametrize("size", SIZES)
def test_e3_sits_between_vmoe_and_the_deep_ensemble(size):
    vmoe = training_gflops(size, (1, 1))
    assert vmoe < training_gflops(size, (1, 2)) < 2 * vmoe


# --- (c) tied to real layers and to hand formulas -----------------------------


def _jaxpr_multiply_adds(jaxpr):
    """Multiply-adds of every dot_general and convolution in a jaxpr."""
    total = 0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            (lhs_contract, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            out = eqn.outvars[0].aval.shape
            total += math.prod(out) * math.prod(lhs[i] for i in lhs_contract)
        elif name == "conv_general_dilated":
            rhs = eqn.invars[1].aval.shape
            out = eqn.outvars[0].aval.shape
            out_features = rhs[eqn.params["dimension_numbers"].rhs_spec[0]]
            total += math.prod(out) * math.prod(rhs) // out_features
        for param in eqn.params.values():
            for sub in param if isinstance(param, (list, tuple)) else [param]:
                if hasattr(sub, "eqns"):
                    total += _jaxpr_multiply_adds(sub)
                elif hasattr(getattr(sub, "jaxpr", None), "eqns"):
                    total += _jaxpr_multiply_adds(sub.jaxpr)
    return total


TINY_VIT = dict(
    image_size=(8, 12), patch_size=2, hidden_dim=8, num_layers=2, mlp_dim=12, num_classes=5
)


def _keras_hub_classifier():
    import keras_hub

    backbone = keras_hub.models.ViTBackbone(
        image_shape=(8, 12, 3), patch_size=2, num_layers=2, num_heads=2, hidden_dim=8, mlp_dim=12
    )
    return keras_hub.models.ViTImageClassifier(backbone, num_classes=5, intermediate_dim=8)


def test_linear_layers_of_a_keras_hub_vit():
    """Kernel sizes of the real Conv2D / EinsumDense / Dense layers times
    the positions they are applied to (any backend)."""
    model = _keras_hub_classifier()
    tokens, patches = 6 * 4 + 1, 6 * 4
    per_layer = {}
    for layer in model.backbone._flatten_layers():
        if isinstance(layer, keras.layers.Conv2D):
            per_layer[layer.path] = math.prod(layer.kernel.shape) * patches
        elif isinstance(layer, (keras.layers.Dense, keras.layers.EinsumDense)):
            per_layer[layer.path] = math.prod(layer.kernel.shape) * tokens
    head = math.prod(model.get_layer("pre_logits").kernel.shape)
    head += math.prod(model.get_layer("predictions").kernel.shape)
    assert len(per_layer) == 1 + 2 * 6  # conv, then q, k, v, out, 2 MLP
    count = vit_moe_flops(**TINY_VIT, representation_size=8)
    expected = sum(per_layer.values()) + head
    assert count["total"] - count["attention_scores"] == expected
    assert count["pre_logits"] + count["head"] == head


@pytest.mark.skipif(keras.config.backend() != "jax", reason="counts the traced JAX program")
def test_every_matmul_of_a_keras_hub_vit():
    """All dot_general / conv multiply-adds of a traced keras-hub
    `ViTImageClassifier` forward pass (attention matmuls included)."""
    import jax

    model = _keras_hub_classifier()
    batch = 3
    images = np.zeros((batch, 8, 12, 3), "float32")
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]
    jaxpr = jax.make_jaxpr(lambda x: model.stateless_call(trainable, non_trainable, x)[0])(images)
    traced = _jaxpr_multiply_adds(jaxpr.jaxpr)
    count = vit_moe_flops(**TINY_VIT, representation_size=8)
    assert traced == batch * count["total"]


def _reference_p_moe(y, router, w1, w2, capacity, block_diagonal=False):
    """A plain E³ p-MoE layer (top-1, vanilla capacity) on `y` of shape
    `(M, G, S, D)`; `router (M, D, E_m)`, `w1 (M, E_m, D, F)`,
    `w2 (M, E_m, F, D)`. With `block_diagonal`, vmoe's layout: the M copies
    of a group are routed together over all E experts."""
    import jax.numpy as jnp

    members, groups, size, _ = y.shape
    experts = router.shape[-1]
    gates = _softmax(jnp.einsum("mgsd,mde->mgse", y, router))
    choice = (gates == gates.max(-1, keepdims=True)).astype(y.dtype)  # (M, G, S, E_m)
    position = jnp.cumsum(choice, axis=2) * choice - 1
    slots = jnp.arange(capacity, dtype=y.dtype)
    dispatch = (position[..., None] == slots).astype(y.dtype)  # +C axis
    combine = gates[..., None] * dispatch
    if block_diagonal:
        # (G, M*S, E, C): member m's tokens only fill block m.
        def block_diagonal_of(blocks):
            full = jnp.zeros((groups, members * size, members * experts, capacity), y.dtype)
            for m in range(members):
                full = full.at[:, m * size : (m + 1) * size, m * experts : (m + 1) * experts].set(
                    blocks[m]
                )
            return full

        full = block_diagonal_of(dispatch)
        tokens = y.transpose(1, 0, 2, 3).reshape(groups, members * size, -1)
        x_e = jnp.einsum("gsec,gsd->egcd", full, tokens)
        x_e = x_e.reshape(members, experts, groups, capacity, -1)
    else:
        x_e = jnp.einsum("mgsec,mgsd->megcd", dispatch, y)
    hidden = jnp.maximum(jnp.einsum("megcd,medf->megcf", x_e, w1), 0)
    y_e = jnp.einsum("megcf,mefd->megcd", hidden, w2)
    if block_diagonal:
        full_combine = block_diagonal_of(combine)
        y_full = y_e.reshape(members * experts, groups, capacity, -1)
        out = jnp.einsum("gsec,egcd->gsd", full_combine, y_full)
        return out.reshape(groups, members, size, -1).transpose(1, 0, 2, 3)
    return jnp.einsum("mgsec,megcd->mgsd", combine, y_e)


def _softmax(x):
    import jax

    return jax.nn.softmax(x, axis=-1)


@pytest.mark.skipif(keras.config.backend() != "jax", reason="counts a traced JAX program")
@pytest.mark.parametrize("routing", ["per_member", "block_diagonal"])
def test_moe_terms_match_a_traced_reference_layer(routing):
    """Router, expert-buffer, dispatch and combine multiply-adds of a real
    (top-1, capacity-limited) E³ layer on B images, against the counter's
    MoE terms for one MoE block."""
    import jax

    members, experts_total, d, f, batch = 2, 8, 6, 10, 4
    tokens = 2 * 3 + 1  # image (4, 6), patch 2, class token
    group = 2 * tokens  # two images per group and member
    capacity = math.ceil(1.5 * 1 * group / (experts_total // members))
    capacity += -capacity % 4
    groups = batch * tokens // group
    experts = experts_total // members
    rng = np.random.default_rng(0)
    shapes = [
        (members, groups, group, d),
        (members, d, experts),
        (members, experts, d, f),
        (members, experts, f, d),
    ]
    args = [rng.normal(size=shape).astype("float32") for shape in shapes]
    layer = lambda *a: _reference_p_moe(  # noqa: E731
        *a, capacity=capacity, block_diagonal=routing == "block_diagonal"
    )
    per_member = _reference_p_moe(*args, capacity=capacity)
    np.testing.assert_allclose(layer(*args), per_member, rtol=1e-5, atol=1e-5)
    traced = _jaxpr_multiply_adds(jax.make_jaxpr(layer)(*args).jaxpr)
    count = vit_moe_flops(
        image_size=(4, 6),
        patch_size=2,
        hidden_dim=d,
        num_layers=1,
        mlp_dim=f,
        num_classes=3,
        moe_layers=(0,),
        num_experts=experts_total,
        num_selected_experts=1,
        ensemble_size=members,
        capacity_factor=1.5,
        group_size=group,
        routing=routing,
    )
    moe = sum(count[k] for k in ("router", "expert_mlp", "dispatch", "combine"))
    assert traced == batch * moe


def test_tiny_e3_by_hand():
    """Every term of a tiny E³ written out: 4 blocks, MoE in blocks 1 and 3,
    tiled from block 1 on."""
    n, p, d, f, e, m, c = 17, 16, 8, 16, 4, 2, 9  # C = ceil(17 / 2) = 9
    count = vit_moe_flops(
        image_size=8,
        patch_size=2,
        hidden_dim=d,
        num_layers=4,
        mlp_dim=f,
        num_classes=10,
        moe_layers=(1, 3),
        num_experts=e,
        ensemble_size=m,
        num_selected_experts=1,
        group_size=n,
        capacity_multiple_of=0,
    )
    copies = 1 + m + m + m  # blocks 0, 1, 2, 3
    expected = {
        "patch_embedding": p * 2 * 2 * 3 * d,
        "attention_projections": copies * 4 * n * d * d,
        "attention_scores": copies * 2 * n * n * d,
        "mlp": (1 + m) * 2 * n * d * f,  # blocks 0 and 2
        "expert_mlp": 2 * m * (e // m) * c * 2 * d * f,
        "router": 2 * m * n * d * (e // m),
        "dispatch": 2 * m * n * (e // m) * c * d,
        "combine": 2 * m * n * (e // m) * c * d,
        "pre_logits": 0,
        "head": m * d * 10,
    }
    for name, value in expected.items():
        assert count[name] == value, name
    assert count["total"] == sum(expected.values())


@pytest.mark.parametrize(
    "group,experts,k,factor,multiple,capacity",
    [(12, 4, 2, 1.0, 4, 8), (24, 8, 2, 0.5, 0, 3), (1160, 32, 1, 1.5, 4, 56)],
)
def test_expert_buffers_use_the_rounded_capacity(group, experts, k, factor, multiple, capacity):
    count = vit_moe_flops(
        image_size=16,
        patch_size=4,
        hidden_dim=4,
        num_layers=2,
        mlp_dim=6,
        num_classes=2,
        moe_layers=(1,),
        num_experts=experts,
        num_selected_experts=k,
        capacity_factor=factor,
        group_size=group,
        capacity_multiple_of=multiple,
    )
    tokens = 17
    assert count["expert_mlp"] == pytest.approx(tokens / group * experts * capacity * 2 * 4 * 6)


def _cost_capacity(group, experts, k, factor, multiple, members=1):
    """The expert buffer size `vit_moe_flops` counts, read back from its
    `expert_mlp` term (one MoE block, `hidden_dim = mlp_dim = 1`)."""
    tokens = 17  # 16 x 16 images, 4 x 4 patches, class token
    count = vit_moe_flops(
        image_size=16,
        patch_size=4,
        hidden_dim=1,
        num_layers=2,
        mlp_dim=1,
        num_classes=2,
        moe_layers=(1,),
        num_experts=experts,
        num_selected_experts=k,
        ensemble_size=members,
        capacity_factor=factor,
        group_size=group,
        capacity_multiple_of=multiple,
    )
    # members * tokens / group groups, experts / members buffers each.
    slots = count["expert_mlp"] / 2 * group / (tokens * experts)
    assert slots == pytest.approx(round(slots), abs=1e-6)
    return round(slots)


def _exact_capacity(group, experts, k, factor, multiple):
    """`ceil(factor * k * group / experts)` in exact rational arithmetic
    (the factor as written in decimal), rounded up to `multiple`, capped at
    the group."""
    raw = Fraction(str(factor)) * k * group / experts
    capacity = max(1, math.ceil(raw))
    capacity += -capacity % max(1, multiple)
    return min(capacity, group)


@pytest.mark.parametrize(
    "group,experts,k,factor,multiple,capacity",
    # 1.1 * 400 / 2 and 1.1 * 100 / 2 are 220.00000000000003 and
    # 55.00000000000001 in floating point: a bare ceil gave 224 (after
    # rounding to 4) and 56, one buffer more than the model allocates.
    [(400, 2, 1, 1.1, 4, 220), (100, 2, 1, 1.1, 0, 55), (100, 2, 1, 1.1, 1, 55)],
)
def test_float_noise_adds_no_slot(group, experts, k, factor, multiple, capacity):
    assert _exact_capacity(group, experts, k, factor, multiple) == capacity
    assert _cost_capacity(group, experts, k, factor, multiple) == capacity
    assert compute_capacity(group, experts, k, factor, multiple_of=max(1, multiple)) == capacity


@pytest.mark.skipif(
    keras.config.backend() != "jax", reason="pure Python arithmetic: checked under one backend"
)
def test_cost_capacity_is_the_router_capacity():
    """For a sweep of routings, the buffers the cost counts are the ones a
    `TopKRouter` of the same configuration allocates (V-MoE and E³ with
    its per-member experts), and both are the exact rounded capacity."""
    groups = (1, 7, 17, 100, 145, 400, 577, 1160, 4616)
    for members, experts, k in [
        (1, 1, 1),
        (1, 2, 1),
        (1, 4, 2),
        (1, 8, 1),
        (1, 32, 2),
        (1, 32, 4),
        (2, 4, 1),
        (2, 32, 1),
        (2, 32, 2),
        (4, 32, 2),
    ]:
        for factor in (0.5, 1.0, 1.05, 1.1, 1.2, 1.25, 1.5, 2.0, 3.3, 8.0):
            for multiple in (1, 4):
                router = TopKRouter(
                    experts,
                    top_k=k,
                    num_members=members,
                    capacity_factor=factor,
                    capacity_multiple_of=multiple,
                )
                for group in groups:
                    config = (group, experts, k, factor, multiple, members)
                    model = router.capacity(group, training=True)
                    assert _cost_capacity(*config) == model, config
                    per_member = experts // members
                    exact = _exact_capacity(group, per_member, k, factor, multiple)
                    assert model == exact, config


def test_tiling_placements():
    config = vit_moe_config("B/32", 1, ensemble_size=2)
    blocks = vit_moe_flops(**config)
    mlp = vit_moe_flops(**config, tile_at="first_moe_mlp")
    inputs = vit_moe_flops(**config, tile_at="input")
    vmoe = vit_moe_flops(**vit_moe_config("B/32", 1))
    n, d = 145, 768
    # Tiling after the first MoE block's attention runs it once, not twice.
    assert blocks["total"] - mlp["total"] == 4 * n * d * d + 2 * n * n * d
    # Tiling at the input repeats everything but the patch embedding and
    # the router: each member routes over its E/M experts only.
    assert inputs["total"] == pytest.approx(
        2 * vmoe["total"] - vmoe["patch_embedding"] - vmoe["router"]
    )
    assert blocks["router"] == vmoe["router"] == 2 * n * d * 32
    # Leading-order saving (L_before + M L_after) / (M L) with L_after = 3.
    assert blocks["mlp"] == (9 + 2 * 1) * 2 * n * d * 3072


def test_one_member_is_vmoe_and_units_scale():
    config = vit_moe_config("S/32", 2)
    vmoe = vit_moe_flops(**config)
    block_diagonal = vit_moe_flops(**{**config, "routing": "block_diagonal"})
    assert vmoe == block_diagonal
    flops = vit_moe_flops(**config, unit="flops")
    training = vit_moe_flops(**config, unit="training_flops")
    for name in vmoe:
        if name == "total":
            continue
        assert flops[name] == 2 * vmoe[name]
        scale = 4 if name == "patch_embedding" else 6
        assert training[name] == pytest.approx(scale * vmoe[name])
    assert vmoe["total"] == pytest.approx(sum(v for k, v in vmoe.items() if k != "total"))


def test_paper_placements():
    assert vit_moe_config("S/32", 2)["moe_layers"] == (5, 7)
    assert vit_moe_config("B/16", 2)["moe_layers"] == (9, 11)
    assert vit_moe_config("L/16", 2)["moe_layers"] == (21, 23)
    assert vit_moe_config("H/14", 2)["moe_layers"] == (23, 25, 27, 29, 31)
    assert last_n_moe_layers(8, 4) == (1, 3, 5, 7)


# --- (d) argument checks ------------------------------------------------------

BASE = dict(
    image_size=32,
    patch_size=8,
    hidden_dim=16,
    num_layers=4,
    mlp_dim=32,
    num_classes=10,
    moe_layers=(1, 3),
    num_experts=8,
)


@pytest.mark.parametrize(
    "overrides,match",
    [
        (dict(num_experts=6, ensemble_size=4), "divisible"),
        (dict(moe_layers=(1, 4)), "out of range"),
        (dict(moe_layers=(-1,)), "out of range"),
        (dict(moe_layers=(3, 3)), "repeated"),
        (dict(moe_layers=(1.0,)), "ints"),
        (dict(num_selected_experts=5, ensemble_size=2), "exceeds"),
        (dict(num_selected_experts=0), "num_selected_experts"),
        (dict(num_experts=0), "num_experts >= 1"),
        (dict(moe_layers=(), ensemble_size=2), "moe_layers` is empty"),
        (dict(capacity_factor=0.0), "capacity_factor"),
        (dict(group_size=0), "group_size"),
        (dict(patch_size=64), "larger than the image"),
        (dict(hidden_dim=0), "hidden_dim"),
        (dict(unit="gflops"), "unit"),
        (dict(dispatcher="scatter"), "dispatcher"),
        (dict(routing="dense"), "routing"),
        (dict(tile_at="block"), "tile_at"),
    ],
)
def test_bad_arguments_raise(overrides, match):
    with pytest.raises(ValueError, match=match):
        vit_moe_flops(**{**BASE, **overrides})


def test_bad_configs_raise():
    with pytest.raises(ValueError, match="family"):
        vit_moe_config("T/16")
    with pytest.raises(ValueError, match="needs `num_selected_experts`"):
        vit_moe_config("B/16", ensemble_size=2)
    with pytest.raises(ValueError, match=r"\[1, 6\]"):
        last_n_moe_layers(12, 7)


@pytest.mark.skipif(BACKEND != "jax", reason="metadata and arithmetic only; one backend")
@pytest.mark.parametrize("name", ["soft_moe_s16_e128", "soft_moe_b16_e128"])
def test_soft_moe_presets_against_the_papers_table(name):
    """The Soft MoE architecture presets, built (`presets/
    make_architecture_presets.py`), against the Soft MoE paper's Table 8:
    parameters within 1% (JFT-4B head), eval GFLOP (2 per multiply-add)
    within 1%, for the Soft MoE and for the dense ViT counted alike; the
    preset's config is `soft_moe_config`'s (not built here: B/16 holds
    3.7 B parameters)."""
    import json

    import ensemble_zoo as ez
    from ensemble_zoo.models.vit_moe import soft_moe_config

    meta = ez.presets.preset_metadata(name)
    paper = meta["paper"]
    assert meta["parameter_count"] == pytest.approx(paper["parameters"], rel=0.01)
    assert 2 * meta["multiply_adds"] / 1e9 == pytest.approx(paper["gflops"], rel=0.01)
    dense = meta["dense_vit"]
    assert dense["parameters"] == pytest.approx(paper["dense_vit"]["parameters"], rel=0.01)
    assert 2 * dense["multiply_adds"] / 1e9 == pytest.approx(paper["dense_vit"]["gflops"], rel=0.01)
    # Soft MoE is cheaper than its dense ViT: 128 slots for 196 tokens.
    assert meta["multiply_adds"] < dense["multiply_adds"]
    config = soft_moe_config(name.split("_")[2][0].upper() + "/16", num_classes=29593)
    path = ez.presets.get_preset_path(name)
    with open(os.path.join(path, "config.json")) as f:
        stored = json.load(f)["config"]
    expected = dict(config["backbone"], patch_size=[16, 16])
    for key, value in expected.items():
        assert stored[key] == (list(value) if isinstance(value, tuple) else value), key
    assert vit_moe_flops(**config["flops"])["total"] == pytest.approx(meta["multiply_adds"], abs=1)

import math

import keras
import numpy as np
import pytest
from scipy.stats import norm
from zoo_testing import np_softmax
from zoo_testing import to_np

from ensemble_zoo.layers import TopKRouter
from ensemble_zoo.layers.moe.top_k_router import compute_capacity
from ensemble_zoo.ops import tile_members


def reference_group_routing(gates, k, capacity, batch_priority):
    """One routing group, as a loop: `gates` (S, E) -> dispatch (S, E, C).

    All top-1 choices are placed (in token order, or by decreasing top-1
    gate with batch priority), then all top-2 choices, ...; a choice that
    finds its expert's buffer full is dropped.
    """
    s, e = gates.shape
    ranked = np.argsort(-gates, axis=1, kind="stable")[:, :k]
    order = np.arange(s)
    if batch_priority:
        order = np.argsort(-gates[np.arange(s), ranked[:, 0]], kind="stable")
    dispatch = np.zeros((s, e, capacity), "float32")
    fill = np.zeros(e, int)
    for rank in range(k):
        for token in order:
            expert = ranked[token, rank]
            if fill[expert] < capacity:
                dispatch[token, expert, fill[expert]] = 1.0
            fill[expert] += 1
    return dispatch


def reference_routing(x, kernel, num_members, k, group_size, capacity, bpr):
    """E³ routing of `(M * batch, tokens, d)` with NumPy, member by member.

    Returns dispatch `(M, G, S, E/M, C)`, combine, and the global per-token
    dispatch `(M * batch, tokens, E, C)`."""
    rows, tokens, d = x.shape
    e = kernel.shape[1]
    e_m = e // num_members
    member_rows = rows // num_members
    groups = member_rows * tokens // group_size
    dispatch = np.zeros((num_members, groups, group_size, e_m, capacity), "float32")
    combine = np.zeros_like(dispatch)
    token_dispatch = np.zeros((rows, tokens, e, capacity), "float32")
    for m in range(num_members):
        xm = x[m * member_rows : (m + 1) * member_rows].reshape(-1, d)
        own = kernel[:, m * e_m : (m + 1) * e_m]
        for g in range(groups):
            xg = xm[g * group_size : (g + 1) * group_size]
            gates = np_softmax(xg @ own)
            dg = reference_group_routing(gates, k, capacity, bpr)
            dispatch[m, g] = dg
            combine[m, g] = gates[..., None] * dg
        flat = dispatch[m].reshape(member_rows * tokens, e_m, capacity)
        block = token_dispatch[m * member_rows : (m + 1) * member_rows]
        block = block.reshape(member_rows * tokens, e, capacity)
        block[:, m * e_m : (m + 1) * e_m] = flat
        token_dispatch[m * member_rows : (m + 1) * member_rows] = block.reshape(
            member_rows, tokens, e, capacity
        )
    return dispatch, combine, token_dispatch


def router_with_kernel(kernel, **kwargs):
    router = TopKRouter(num_experts=kernel.shape[1], **kwargs)
    router.build((None, None, kernel.shape[0]))
    router.kernel.assign(kernel)
    return router


def test_capacity_formula():
    assert compute_capacity(12, 4, 2, 1.0) == 6
    assert compute_capacity(12, 4, 2, 1.0, multiple_of=4) == 8
    assert compute_capacity(24, 8, 2, 0.5) == 3
    assert compute_capacity(4, 2, 1, 1.0) == 2
    # 1.1 * 100 / 10 is 11.000000000000002 in floating point.
    assert compute_capacity(100, 10, 1, 1.1) == 11
    assert compute_capacity(100, 10, 1, 1.11) == 12
    assert compute_capacity(10, 2, 1, 0.01) == 1  # at least one slot
    assert compute_capacity(10, 2, 2, 8.0) == 10  # never above group_size
    router = TopKRouter(
        num_experts=8, top_k=2, num_members=2, capacity_factor=1.5, eval_capacity_factor=8.0
    )
    assert router.capacity(16, training=True) == math.ceil(1.5 * 2 * 16 / 4)
    assert router.capacity(16, training=False) == 16
    with pytest.raises(ValueError, match="capacity_factor"):
        compute_capacity(12, 4, 2, 0.0)


@pytest.mark.parametrize("batch_priority", [False, True])
def test_hand_made_overflow(batch_priority):
    # Gates of 4 tokens over 2 experts; every top-1 choice is expert 0 and
    # C = ceil(1.0 * 1 * 4 / 2) = 2 slots.
    gates = np.array([[0.6, 0.4], [0.9, 0.1], [0.7, 0.3], [0.8, 0.2]], "float32")
    router = router_with_kernel(np.eye(2, dtype="float32"), top_k=1, batch_priority=batch_priority)
    x = np.log(gates)[None]  # (1 example, 4 tokens, 2): logits = log gates
    routing = router.route(x)
    assert routing["capacity"] == 2
    expected = np.zeros((4, 2, 2), "float32")
    if batch_priority:
        # Sorted by top-1 gate: tokens 1 (.9), 3 (.8), 2 (.7), 0 (.6).
        expected[1, 0, 0] = 1
        expected[3, 0, 1] = 1
    else:
        expected[0, 0, 0] = 1
        expected[1, 0, 1] = 1
    np.testing.assert_array_equal(to_np(routing["dispatch"])[0, 0], expected)
    np.testing.assert_allclose(
        to_np(routing["combine"])[0, 0], gates[..., None] * expected, atol=1e-6
    )


def test_top1_choices_fill_buffers_before_top2_choices():
    # Token 0 prefers expert 1, tokens 1 and 2 prefer expert 0; C = 2.
    gates = np.array([[0.3, 0.7], [0.8, 0.2], [0.6, 0.4]], "float32")
    router = router_with_kernel(np.eye(2, dtype="float32"), top_k=2, capacity_factor=2 / 3)
    routing = router.route(np.log(gates)[None])
    assert routing["capacity"] == 2
    expected = np.zeros((3, 2, 2), "float32")
    # Expert 0: top-1 of tokens 1, 2 take both slots; token 0's top-2
    # choice comes later and is dropped (token order would have kept it).
    expected[1, 0, 0] = expected[2, 0, 1] = 1
    # Expert 1: top-1 of token 0, then the top-2 choice of token 1; the
    # top-2 choice of token 2 is dropped.
    expected[0, 1, 0] = expected[1, 1, 1] = 1
    np.testing.assert_array_equal(to_np(routing["dispatch"])[0, 0], expected)


@pytest.mark.parametrize(
    "num_members,num_experts,top_k,group_size,factor,bpr",
    [
        (1, 4, 1, None, 1.0, False),
        (1, 4, 2, 12, 0.5, True),
        (2, 8, 2, None, 0.75, False),
        (2, 8, 2, 6, 0.75, True),
        (4, 8, 1, 12, 1.0, True),
        (4, 8, 2, None, 8.0, False),
    ],
)
def test_matches_numpy_reference(rng, num_members, num_experts, top_k, group_size, factor, bpr):
    batch, tokens, d = 4, 6, 5
    kernel = rng.normal(size=(d, num_experts)).astype("float32")
    router = router_with_kernel(
        kernel,
        top_k=top_k,
        num_members=num_members,
        group_size=group_size,
        capacity_factor=factor,
        batch_priority=bpr,
    )
    x = rng.normal(size=(num_members * batch, tokens, d)).astype("float32")
    routing = router.route(x)
    s = group_size or tokens
    capacity = compute_capacity(s, num_experts // num_members, top_k, factor)
    assert routing["capacity"] == capacity
    dispatch, combine, token_dispatch = reference_routing(
        x, kernel, num_members, top_k, s, capacity, bpr
    )
    if factor < 1:
        assert dispatch.sum() < num_members * batch * tokens * top_k  # drops
    np.testing.assert_array_equal(to_np(routing["dispatch"]), dispatch)
    np.testing.assert_allclose(to_np(routing["combine"]), combine, atol=1e-6)
    np.testing.assert_array_equal(to_np(routing["token_dispatch"]), token_dispatch)
    outputs = router(x)
    np.testing.assert_array_equal(to_np(outputs["dispatch"]), dispatch)


@pytest.mark.parametrize("num_members", [2, 4])
@pytest.mark.parametrize("training", [False, True])
def test_members_reach_only_their_own_experts(rng, num_members, training):
    num_experts, batch, tokens, d = 8, 3, 4, 6
    e_m = num_experts // num_members
    kernel = 0.1 * rng.normal(size=(d, num_experts)).astype("float32")
    # A constant feature that strongly favours the *last* partition's
    # experts: a router that ignored the partition would send everything
    # there.
    kernel[0, -e_m:] += 20.0
    tokens_ = rng.normal(size=(batch, tokens, d)).astype("float32")
    tokens_[..., 0] = 1.0
    x = to_np(tile_members(tokens_, num_members))
    for seed in (0, 1):
        router = router_with_kernel(
            kernel, top_k=2, num_members=num_members, capacity_factor=4.0, noise_std=1.0, seed=seed
        )
        routing = router.route(x, training=training)
        token_dispatch = to_np(routing["token_dispatch"])
        per_expert = token_dispatch.sum(axis=-1)  # (M * batch, tokens, E)
        for m in range(num_members):
            rows = per_expert[m * batch : (m + 1) * batch]
            own = np.zeros(num_experts, bool)
            own[m * e_m : (m + 1) * e_m] = True
            assert rows[..., ~own].sum() == 0
            # Ample capacity: every token reaches top_k of its own experts.
            np.testing.assert_array_equal(rows[..., own].sum(-1), 2.0)
    if not training:
        # Each token's experts are the top 2 of its member's logits.
        own_logits = np.einsum("btd,dme->mbte", tokens_, kernel.reshape(d, num_members, e_m))
        top2 = np.argsort(-own_logits, axis=-1)[..., :2]
        for m in range(num_members):
            chosen = per_expert[m * batch : (m + 1) * batch, :, m * e_m : (m + 1) * e_m]
            expected = np.zeros_like(chosen)
            np.put_along_axis(expected, top2[m], 1.0, axis=-1)
            np.testing.assert_array_equal(chosen, expected)


@pytest.mark.parametrize("num_members", [1, 2])
def test_importance_loss_uniform_and_collapsed(num_members):
    num_experts, d = 8, 3
    e_m = num_experts // num_members
    x = np.random.default_rng(1).normal(size=(num_members * 2, 5, d))
    x = x.astype("float32")
    uniform = router_with_kernel(np.zeros((d, num_experts), "float32"), num_members=num_members)
    for training in (False, True):  # computed on the clean logits
        loss = to_np(uniform.route(x, training=training)["importance_loss"])
        np.testing.assert_allclose(loss, 0.0, atol=1e-10)
    # Every token puts (almost) all its mass on the member's first expert.
    collapsed = np.zeros((d, num_experts), "float32")
    collapsed[:, ::e_m] = 30.0
    x_pos = np.abs(x) + 1.0
    router = router_with_kernel(collapsed, num_members=num_members)
    loss = to_np(router.route(x_pos, training=True)["importance_loss"])
    # CV² of a one-hot importance vector over E/M experts: E/M - 1.
    np.testing.assert_allclose(loss, e_m - 1, rtol=1e-5)


def numpy_load_loss(logits, noisy_logits, sigma, k):
    threshold = np.sort(noisy_logits, axis=-1)[..., -k]
    p = 1.0 - norm.cdf((threshold[..., None] - logits) / sigma)
    load = p.mean(axis=2)  # over the tokens of a group
    return np.mean(load.var(axis=-1) / load.mean(axis=-1) ** 2)


def numpy_importance_loss(logits):
    importance = np_softmax(logits).sum(axis=2)
    return np.mean(importance.var(axis=-1) / importance.mean(axis=-1) ** 2)


@pytest.mark.parametrize("num_members,top_k", [(1, 1), (1, 2), (2, 2)])
def test_load_loss_matches_numpy_formula(rng, num_members, top_k):
    num_experts, d = 8, 4
    kernel = rng.normal(size=(d, num_experts)).astype("float32")
    router = router_with_kernel(kernel, num_members=num_members, top_k=top_k, group_size=10, seed=3)
    x = rng.normal(size=(num_members * 4, 5, d)).astype("float32")
    routing = router.route(x, training=True)
    logits = to_np(routing["logits"])
    noisy = to_np(routing["noisy_logits"])
    # Clean logits are the member's slice of x @ kernel.
    e_m = num_experts // num_members
    expected_logits = np.einsum(
        "mgsd,dme->mgse", x.reshape(num_members, -1, 10, d), kernel.reshape(d, num_members, e_m)
    )
    np.testing.assert_allclose(logits, expected_logits, rtol=1e-5, atol=1e-5)
    assert not np.allclose(noisy, logits)
    np.testing.assert_allclose(to_np(routing["gates"]), np_softmax(noisy), atol=1e-6)
    sigma = 1.0 / num_experts
    np.testing.assert_allclose(
        to_np(routing["load_loss"]), numpy_load_loss(logits, noisy, sigma, top_k), rtol=1e-4
    )
    np.testing.assert_allclose(
        to_np(routing["importance_loss"]), numpy_importance_loss(logits), rtol=1e-5
    )
    # The load loss is 0 for a zero kernel, whatever the noise.
    zero = router_with_kernel(
        np.zeros((d, num_experts), "float32"), num_members=num_members, top_k=top_k, seed=4
    )
    np.testing.assert_allclose(to_np(zero.route(x, training=True)["load_loss"]), 0.0, atol=1e-10)
    assert router.route(x, training=False)["load_loss"] is None


def test_aux_loss_is_added_in_training_only(rng):
    d, num_experts = 4, 4
    kernel = rng.normal(size=(d, num_experts)).astype("float32")
    x = rng.normal(size=(2 * 3, 5, d)).astype("float32")
    kwargs = dict(num_members=2, top_k=1, seed=7, importance_loss_weight=0.3, load_loss_weight=0.7)
    inspected = router_with_kernel(kernel, **kwargs).route(x, training=True)
    router = router_with_kernel(kernel, **kwargs)  # same seed, same noise
    router(x, training=False)
    assert len(router.losses) == 0
    router(x, training=True)
    assert len(router.losses) == 1
    sigma = 1.0 / num_experts
    logits, noisy = to_np(inspected["logits"]), to_np(inspected["noisy_logits"])
    expected = 0.3 * numpy_importance_loss(logits) + 0.7 * numpy_load_loss(logits, noisy, sigma, 1)
    np.testing.assert_allclose(to_np(router.losses[0]), expected, rtol=1e-4)
    # Without noise, only the importance loss is added.
    quiet = router_with_kernel(kernel, noise_std=0.0, **kwargs)
    quiet(x, training=True)
    np.testing.assert_allclose(
        to_np(quiet.losses[0]), 0.3 * numpy_importance_loss(logits), rtol=1e-5
    )


def test_noise_only_in_training_and_seeded(rng):
    d, num_experts = 6, 4
    kernel = rng.normal(size=(d, num_experts)).astype("float32")
    x = rng.normal(size=(64, 16, d)).astype("float32")
    router = router_with_kernel(kernel, noise_std=0.5, seed=1)
    first = router.route(x)
    second = router.route(x)
    np.testing.assert_array_equal(to_np(first["noisy_logits"]), to_np(first["logits"]))
    np.testing.assert_array_equal(to_np(first["combine"]), to_np(second["combine"]))
    train = router.route(x, training=True)
    noise = to_np(train["noisy_logits"]) - to_np(train["logits"])
    assert abs(noise.std() - 0.5) < 0.02 and abs(noise.mean()) < 0.02
    again = router_with_kernel(kernel, noise_std=0.5, seed=1)
    again = again.route(x, training=True)
    np.testing.assert_array_equal(to_np(again["combine"]), to_np(train["combine"]))
    other = router_with_kernel(kernel, noise_std=0.5, seed=2)
    other = other.route(x, training=True)
    assert not np.array_equal(to_np(other["dispatch"]), to_np(train["dispatch"]))
    # The default noise is 1 / num_experts, the paper's sigma.
    assert TopKRouter(num_experts=16).sigma == 1 / 16


def test_config_round_trip_and_symbolic_shapes(rng):
    router = TopKRouter(
        num_experts=8,
        top_k=2,
        num_members=2,
        group_size=10,
        capacity_factor=1.5,
        eval_capacity_factor=4.0,
        capacity_multiple_of=4,
        batch_priority=True,
        noise_std=0.2,
        importance_loss_weight=0.01,
        load_loss_weight=0.02,
        seed=5,
    )
    x = rng.normal(size=(4, 5, 3)).astype("float32")
    expected = router(x)
    config = router.get_config()
    restored = TopKRouter.from_config(config)
    assert restored.get_config() == config
    restored.build(x.shape)
    restored.set_weights(router.get_weights())
    got = restored(x)
    for key in ("dispatch", "combine"):
        np.testing.assert_array_equal(to_np(got[key]), to_np(expected[key]))
    # M=2, G = 2 * 5 / 10 = 1, S = 10, E/M = 4, C = ceil(4 * 2 * 10 / 4) = 20
    # -> capped at 10.
    shapes = router.compute_output_shape((4, 5, 3))
    assert shapes["dispatch"] == (2, 1, 10, 4, 10)
    symbolic = router(keras.Input((5, 3)))
    assert tuple(symbolic["combine"].shape) == (2, None, 10, 4, 10)


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="num_experts.*num_members"):
        TopKRouter(num_experts=6, num_members=4)
    with pytest.raises(ValueError, match="top_k"):
        TopKRouter(num_experts=8, num_members=4, top_k=3)
    with pytest.raises(ValueError, match="capacity_factor"):
        TopKRouter(num_experts=8, capacity_factor=0.0)
    with pytest.raises(ValueError, match="eval_capacity_factor"):
        TopKRouter(num_experts=8, eval_capacity_factor=-1.0)
    with pytest.raises(ValueError, match="noise_std"):
        TopKRouter(num_experts=8, noise_std=-0.1)
    with pytest.raises(ValueError, match="group_size"):
        TopKRouter(num_experts=8, group_size=0)
    with pytest.raises(ValueError, match="batch_priority"):
        TopKRouter(num_experts=8, batch_priority="yes")
    router = TopKRouter(num_experts=4, num_members=2, group_size=4)
    with pytest.raises(ValueError, match="at least 2 axes"):
        router(np.zeros((4,), "float32"))
    with pytest.raises(ValueError, match="num_members"):
        router(np.zeros((3, 2, 8), "float32"))
    with pytest.raises(ValueError, match="group_size"):
        router(np.zeros((2, 3, 8), "float32"))
    router(np.zeros((4, 2, 8), "float32"))
    with pytest.raises(ValueError, match="8 features"):
        router(np.zeros((4, 2, 5), "float32"))

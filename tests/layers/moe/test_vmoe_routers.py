"""Experts Choice and Soft MoE against vmoe's own code.

`tests/fixtures/vmoe/routers.npz` was written by vmoe's
`NoisyTopItemsPerExpertRouter`, `SoftRouter` and `MlpMoeBlock`
(`make_router_fixture.py`, pinned commit, see the fixture's README): the
routers' dispatch and combine tensors and metrics on shared inputs and
weights (with tied gates: two equal tokens in group 0, a group of equal
tokens in group 2), and the MoE layer's outputs with bfloat16 and float32
dispatch. Every comparison is at float32 round-off (<= 1e-5).
"""

import json
import os

import keras
import numpy as np
import pytest
from conftest import REPO_ROOT
from conftest import jit_compile
from zoo_testing import to_np

from ensemble_zoo.layers import ExpertsChoiceRouter
from ensemble_zoo.layers import SoftRouter
from ensemble_zoo.layers import SparseMoE
from ensemble_zoo.losses import EnsembleSparseCategoricalCrossentropy

FIXTURE = np.load(os.path.join(REPO_ROOT, "tests", "fixtures", "vmoe", "routers.npz"))
META = json.loads(str(FIXTURE["config_json"]))
X = FIXTURE["router_x"]  # (3 groups, 10 tokens, 8)
ROUNDING = {"ceil": "ceil", "round": "round"}


def ec_router(settings):
    router = ExpertsChoiceRouter(
        num_experts=4,
        capacity_factor=settings["capacity_factor"],
        capacity_rounding=settings["capacity_ceil_or_round"],
        capacity_multiple_of=settings["capacity_multiple_of"],
    )
    router.build(X.shape)
    router.kernel.assign(FIXTURE["ec_kernel"])
    return router


def experts_choice_dispatch(gates, capacity):
    """NumPy Experts Choice: each expert takes its `capacity` largest gates,
    ties to the lower token index; `(S, E, C)` one-hot slots."""
    dispatch = np.zeros(gates.shape + (capacity,), "float32")
    for expert in range(gates.shape[1]):
        order = np.argsort(-gates[:, expert], kind="stable")[:capacity]
        dispatch[order, expert, np.arange(capacity)] = 1.0
    return dispatch


def check_metrics(ours, vmoes):
    assert sorted(ours) == sorted(vmoes)
    for key, value in vmoes.items():
        assert float(to_np(ours[key])) == pytest.approx(value, abs=1e-6), key


@pytest.mark.parametrize("name", sorted(META["ec"]))
def test_experts_choice_equals_vmoes_router(name):
    """Dispatch (which tokens, in which slot, ties to the lower token
    index), combine weights and metrics, for ceil / round / multiple-of
    capacities (C = 3, round(3.75) = 4, 3 -> 4)."""
    settings = META["ec"][name]["settings"]
    routing = ec_router(settings).route(X)
    dispatch = FIXTURE[f"ec_{name}_dispatch"].astype("float32")
    combine = FIXTURE[f"ec_{name}_combine"].copy()
    assert routing["capacity"] == dispatch.shape[-1]
    # Every expert fills every slot; the tied group takes tokens 0..C-1.
    np.testing.assert_array_equal(dispatch.sum(axis=1), 1.0)
    np.testing.assert_array_equal(
        dispatch[2].sum(axis=(1, 2)) > 0, np.arange(10) < dispatch.shape[-1]
    )
    tied = to_np(routing["gates"])[0, 2]
    if not np.all(tied == tied[:1]):
        # TensorFlow's CPU matmul can round equal rows apart (by blocks of
        # rows), so group 2's tokens no longer tie: the rule is then checked
        # on the gates this backend computed (stable sort: lower index first).
        dispatch = dispatch.copy()
        dispatch[2] = experts_choice_dispatch(tied, dispatch.shape[-1])
        combine[2] = tied[..., None] * dispatch[2]
    np.testing.assert_array_equal(to_np(routing["dispatch"])[0], dispatch)
    np.testing.assert_allclose(to_np(routing["combine"])[0], combine, atol=1e-6)
    check_metrics(routing["metrics"], META["ec"][name]["metrics"])


@pytest.mark.parametrize("name", sorted(META["soft"]))
def test_soft_router_equals_vmoes(name):
    """Dispatch (softmax over tokens), combine (softmax over all slots) and
    every metric, similarities included; slots from `num_slots` or from
    the capacity factor with round half to even (2.5 -> 2, 3.5 -> 4)."""
    meta = META["soft"][name]
    settings = dict(meta["settings"])
    router = SoftRouter(num_experts=4, **settings)
    router.build(X.shape)
    assert router.capacity(10) == meta["slots"]
    router.mu.assign(FIXTURE[f"soft_{name}_mu"])
    router.scale.assign(meta["scale"])
    routing = router.route(X)
    for key in ("dispatch", "combine"):
        np.testing.assert_allclose(to_np(routing[key])[0], FIXTURE[f"soft_{name}_{key}"], atol=1e-6)
    check_metrics(routing["metrics"], meta["metrics"])


def layer_from_fixture(kind, bfloat16):
    """Our `SparseMoE` with the weights of vmoe's `MlpMoeBlock` fixture."""
    meta = META["layer"][kind]
    router = meta["router"]
    if kind == "ec":
        dispatch = router["dispatcher"]
        extra = dict(
            router="experts_choice",
            capacity_factor=dispatch["capacity_factor"],
            capacity_rounding=dispatch["capacity_ceil_or_round"],
            capacity_multiple_of=dispatch["capacity_multiple_of"],
        )
    else:
        extra = dict(router="soft", num_slots=router["num_slots"])
    layer = SparseMoE(
        num_experts=meta["num_experts"],
        mlp_dim=meta["mlp_dim"],
        activation="gelu_approximate",
        bfloat16_dispatch=bfloat16,
        **extra,
    )
    layer.build(X.shape)
    param = lambda key: FIXTURE[f"layer_{kind}_param/{key}"]  # noqa: E731
    if kind == "ec":
        layer.router.kernel.assign(param("Router/dense/kernel"))
    else:
        layer.router.mu.assign(param("Router/mu"))
        layer.router.scale.assign(param("Router/scale"))
    for ours, theirs in ((layer.dense_1, "Dense_0"), (layer.dense_2, "Dense_1")):
        ours.kernel.assign(param(f"Mlp/{theirs}/kernel"))
        ours.bias.assign(param(f"Mlp/{theirs}/bias"))
    return layer


@pytest.mark.parametrize("kind", ["ec", "soft"])
def test_moe_layer_equals_vmoes_mlp_moe_block(kind):
    """The whole MoE layer (router, experts, dispatch, combine), with
    float32 dispatch to round-off, and with vmoe's bfloat16 dispatch
    (Experts Choice's `bfloat16=True`, Soft MoE's hard-wired
    `Bfloat16Dispatcher`) to round-off as well on this input."""
    for bfloat16, key in ((False, "output_f32"), (True, "output")):
        layer = layer_from_fixture(kind, bfloat16)
        np.testing.assert_allclose(
            to_np(layer(X)), FIXTURE[f"layer_{kind}_{key}"], atol=1e-5, rtol=0
        )
    # The two references differ by far more than the tolerance.
    assert (
        np.abs(FIXTURE[f"layer_{kind}_output"] - FIXTURE[f"layer_{kind}_output_f32"]).max() > 1e-3
    )


def test_experts_choice_index_dispatch_equals_one_hot(rng):
    """Experts Choice through gathers (`dispatcher="indices"`) gives the
    one-hot einsum's outputs and gradients, E³ with 2 members, a group of
    2 images, tied tokens included."""
    x = rng.normal(size=(4, 6, 5)).astype("float32")
    x[0, 3] = x[0, 1]
    layers = {}
    for dispatcher in ("einsum", "indices"):
        layer = SparseMoE(
            num_experts=4,
            mlp_dim=7,
            num_members=2,
            group_size=12,
            router="experts_choice",
            capacity_factor=1.5,
            dispatcher=dispatcher,
            bias_initializer="random_normal",
        )
        layer.build(x.shape)
        layers[dispatcher] = layer
    layers["indices"].set_weights(layers["einsum"].get_weights())
    from ensemble_zoo.utils.gradients import loss_gradients

    target = rng.normal(size=x.shape).astype("float32")
    outputs, grads = {}, {}
    for name, layer in layers.items():
        model = keras.Sequential([keras.Input(x.shape[1:]), layer])
        outputs[name] = to_np(layer(x))
        grads[name] = loss_gradients(
            model,
            lambda y, p: keras.ops.mean(keras.ops.square(keras.ops.subtract(p, y))),
            x,
            target,
            model.trainable_variables,
        )
    np.testing.assert_allclose(outputs["indices"], outputs["einsum"], atol=1e-5)
    for a, b in zip(grads["indices"], grads["einsum"]):
        np.testing.assert_allclose(a, b, atol=1e-5)
    routing = layers["indices"].router(x, dispatcher="indices")
    assert tuple(routing["token_slot"].shape) == (2, 1, 2, 12)  # E/M entries per token


def np_experts_choice(gates, capacity):
    """One group: `gates` (S, E) -> dispatch (S, E, C) with a stable sort."""
    s, e = gates.shape
    dispatch = np.zeros((s, e, capacity), "float32")
    for expert in range(e):
        order = np.argsort(-gates[:, expert], kind="stable")[:capacity]
        dispatch[order, expert, np.arange(capacity)] = 1.0
    return dispatch


def test_experts_choice_members_reach_only_their_own_experts(rng):
    """E³ partition: member m's tokens are chosen only by its experts, by
    the softmax over those experts' columns of the kernel (NumPy loop)."""
    router = ExpertsChoiceRouter(num_experts=6, num_members=2, group_size=8)
    x = rng.normal(size=(4, 4, 5)).astype("float32")  # 2 members x 2 rows
    routing = router.route(x)
    kernel = to_np(router.kernel)
    capacity = routing["capacity"]
    assert capacity == 3  # ceil(8 / 3)
    for m in range(2):
        tokens = x[2 * m : 2 * m + 2].reshape(-1, 5)
        logits = tokens @ kernel[:, 3 * m : 3 * m + 3]
        gates = np.exp(logits - logits.max(-1, keepdims=True))
        gates /= gates.sum(-1, keepdims=True)
        np.testing.assert_array_equal(
            to_np(routing["dispatch"])[m, 0], np_experts_choice(gates, capacity)
        )
    token = to_np(routing["token_dispatch"])  # (4, 4, 6, C)
    assert token[:2, :, 3:].sum() == 0 and token[2:, :, :3].sum() == 0


@pytest.mark.parametrize("router", ["experts_choice", "soft"])
def test_noise_only_in_training_and_seeded(rng, router):
    x = rng.normal(size=(2, 6, 4)).astype("float32")
    extra = {"num_slots": 2} if router == "soft" else {}
    layers = [
        SparseMoE(num_experts=4, mlp_dim=3, router=router, noise_std=0.5, seed=7, **extra)
        for _ in range(2)
    ]
    layers[0].build(x.shape)
    layers[1].build(x.shape)
    layers[1].set_weights(layers[0].get_weights())
    clean = to_np(layers[0](x))
    np.testing.assert_array_equal(clean, to_np(layers[0](x, training=False)))
    noisy = to_np(layers[0](x, training=True))
    assert not np.allclose(noisy, clean)
    np.testing.assert_array_equal(noisy, to_np(layers[1](x, training=True)))
    assert layers[0].losses == []  # no auxiliary loss


class TinyRoutedClassifier(keras.Model):
    """E³ with 2 members: an Experts Choice MoE layer, then a Soft MoE one."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.experts_choice = SparseMoE(
            num_experts=4,
            mlp_dim=8,
            num_members=2,
            router="experts_choice",
            capacity_factor=1.0,
            eval_capacity_factor=2.0,
        )
        self.soft = SparseMoE(num_experts=4, mlp_dim=8, num_members=2, router="soft", num_slots=2)
        self.head = keras.layers.Dense(3)

    def call(self, x, training=None):
        from ensemble_zoo.ops import tile_members
        from ensemble_zoo.ops import untile_members

        x = tile_members(x, 2)
        x = x + self.experts_choice(x, training=training)
        x = x + self.soft(x, training=training)
        logits = self.head(keras.ops.mean(x, axis=1))
        return untile_members(logits, 2)  # (batch, members, classes)


def test_trains_compiled_and_routers_learn(rng):
    """Static shapes: fit under `jit_compile=True` (JAX, TensorFlow), with a
    partial last batch; both routers get gradients (Experts Choice through
    its combine weights, Soft MoE through both softmaxes and `scale`)."""
    x = rng.normal(size=(20, 4, 5)).astype("float32")
    y = rng.integers(0, 3, size=(20,))
    model = TinyRoutedClassifier()
    model(x[:2])
    model.compile(
        keras.optimizers.Adam(0.02),
        EnsembleSparseCategoricalCrossentropy(),
        jit_compile=jit_compile(),
    )
    routers = model.experts_choice.router.weights + model.soft.router.weights
    assert len(routers) == 3  # kernel; mu and scale
    before_weights = [to_np(w) for w in routers]
    before = model.evaluate(x, y, batch_size=8, verbose=0)
    model.fit(x, y, batch_size=8, epochs=12, verbose=0)
    assert model.evaluate(x, y, batch_size=8, verbose=0) < 0.8 * before
    for old, new in zip(before_weights, routers):
        assert not np.allclose(old, to_np(new))
    np.testing.assert_allclose(
        model.predict(x, batch_size=8, verbose=0), to_np(model(x)), rtol=1e-4, atol=1e-5
    )


def test_config_round_trips_and_bad_arguments():
    for router, extra in (("experts_choice", {}), ("soft", {"num_slots": 3})):
        layer = SparseMoE(
            num_experts=4,
            mlp_dim=5,
            router=router,
            capacity_rounding="round",
            noise_std=0.1,
            seed=2,
            **extra,
        )
        config = layer.get_config()
        clone = SparseMoE.from_config(config)
        assert clone.get_config() == config
        assert type(clone.router) is type(layer.router)
    with pytest.raises(ValueError, match="`top_k`=2 is the top-K router's"):
        SparseMoE(num_experts=4, mlp_dim=4, router="experts_choice", top_k=2)
    with pytest.raises(ValueError, match="batch_priority"):
        SparseMoE(num_experts=4, mlp_dim=4, router="soft", batch_priority=True)
    with pytest.raises(ValueError, match="einsums only"):
        SparseMoE(num_experts=4, mlp_dim=4, router="soft", dispatcher="indices")
    SparseMoE(num_experts=4, mlp_dim=4, router="experts_choice", dispatcher="indices")
    with pytest.raises(ValueError, match="slots are weights"):
        SparseMoE(num_experts=4, mlp_dim=4, router="soft", eval_capacity_factor=8.0)
    with pytest.raises(ValueError, match="`num_slots` is Soft MoE's"):
        SparseMoE(num_experts=4, mlp_dim=4, num_slots=2)
    with pytest.raises(ValueError, match="`router` must be one of"):
        SparseMoE(num_experts=4, mlp_dim=4, router="hash")
    with pytest.raises(ValueError, match="capacity_rounding"):
        ExpertsChoiceRouter(num_experts=4, capacity_rounding="floor")
    with pytest.raises(ValueError, match="round.*= 0 slots"):
        SoftRouter(num_experts=4, capacity_factor=0.1).build((1, 10, 8))
    with pytest.raises(ValueError, match="num_slots"):
        SoftRouter(num_experts=4, num_slots=0)

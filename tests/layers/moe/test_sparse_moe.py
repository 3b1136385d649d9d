import os

import keras
import numpy as np
import pytest
from conftest import jit_compile
from keras import ops
from scipy.special import erf
from test_top_k_router import reference_routing
from zoo_testing import to_np

from ensemble_zoo.layers import SparseMoE
from ensemble_zoo.layers.moe.top_k_router import compute_capacity
from ensemble_zoo.losses import EnsembleSparseCategoricalCrossentropy
from ensemble_zoo.ops import tile_members
from ensemble_zoo.ops import untile_members


def gelu(x):
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def bfloat16(x):
    """Round to nearest even bfloat16, as float32 (NumPy bit arithmetic)."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32)


def expert_mlp(weights, e, x, layer=None):
    """Expert `e` as a separate NumPy ViT MLP (with vmoe's tanh GELU and
    bfloat16 dispatch rounding if `layer` asks for them)."""
    w1, b1, w2, b2 = weights
    vmoe = layer is not None and layer.bfloat16_dispatch
    activation = gelu_tanh if layer is not None and layer.activation == "gelu_approximate" else gelu
    x = bfloat16(x) if vmoe else x
    y = activation(x @ w1[e] + b1[e]) @ w2[e] + b2[e]
    return bfloat16(y) if vmoe else y


def reference_moe(layer, x, group_size=None):
    """NumPy loop over tokens: each kept (token, expert) pair adds
    gate * expert_mlp(token); dropped pairs add nothing."""
    kernel = to_np(layer.router.kernel)
    weights = [
        to_np(w)
        for w in (
            layer.dense_1.kernel,
            layer.dense_1.bias,
            layer.dense_2.kernel,
            layer.dense_2.bias,
        )
    ]
    m, e_m = layer.num_members, layer.num_experts // layer.num_members
    rows, tokens, d = x.shape
    s = group_size or tokens
    capacity = compute_capacity(
        s, e_m, layer.top_k, layer.router.capacity_factor, layer.router.capacity_multiple_of
    )
    dispatch, combine, _ = reference_routing(
        x, kernel, m, layer.top_k, s, capacity, layer.router.batch_priority
    )
    out = np.zeros_like(x, dtype="float64")
    member_rows = rows // m
    for member in range(m):
        rows_m = slice(member * member_rows, (member + 1) * member_rows)
        flat_x = x[rows_m].reshape(-1, d)
        flat_out = np.zeros_like(flat_x, dtype="float64")
        for g in range(dispatch.shape[1]):
            for i in range(s):
                token = g * s + i
                for e in range(e_m):
                    gate = combine[member, g, i, e].sum()
                    if dispatch[member, g, i, e].sum() == 0:
                        continue
                    flat_out[token] += gate * expert_mlp(
                        weights, member * e_m + e, flat_x[token], layer
                    )
        out[rows_m] = flat_out.reshape(member_rows, tokens, d)
    return out, dispatch


def random_layer(rng, x_shape, **kwargs):
    layer = SparseMoE(
        bias_initializer="random_normal", router_kernel_initializer="random_normal", **kwargs
    )
    layer.build(x_shape)
    # A router scale that gives varied, non-tied gates.
    kernel = rng.normal(size=tuple(layer.router.kernel.shape)).astype("float32")
    layer.router.kernel.assign(kernel)
    return layer


@pytest.mark.parametrize(
    "num_members,top_k,group_size,factor,bpr,vmoe",
    [
        (1, 1, None, 1.0, False, False),
        (1, 2, 8, 0.5, True, True),
        (2, 1, None, 0.5, False, False),
        (2, 2, 8, 1.0, True, False),
        (4, 1, 4, 1.0, False, True),
    ],
)
@pytest.mark.parametrize("dispatcher", ["einsum", "indices"])
def test_matches_numpy_expert_loop(
    rng, num_members, top_k, group_size, factor, bpr, vmoe, dispatcher
):
    """`vmoe` rows add vmoe's tanh GELU, bfloat16 dispatch rounding and
    capacity rounded up to a multiple of 4."""
    batch, tokens, d = 2, 4, 6
    shape = (num_members * batch, tokens, d)
    extra = {}
    if vmoe:
        extra = dict(activation="gelu_approximate", bfloat16_dispatch=True, capacity_multiple_of=4)
    layer = random_layer(
        rng,
        shape,
        num_experts=8,
        mlp_dim=5,
        top_k=top_k,
        num_members=num_members,
        group_size=group_size,
        capacity_factor=factor,
        batch_priority=bpr,
        dispatcher=dispatcher,
        **extra,
    )
    x = rng.normal(size=shape).astype("float32")
    expected, dispatch = reference_moe(layer, x, group_size)
    if factor < 1 and not vmoe:
        # Some token is dropped by all of its experts: its output is 0.
        dropped = dispatch.sum(axis=(-1, -2)) == 0
        assert dropped.any()
    got = to_np(layer(x))
    assert got.shape == shape
    # bfloat16 dispatch: a dispatched value within float32 round-off of a
    # bfloat16 rounding boundary may round the other way than NumPy's
    # (PyTorch's CPU kernels vary their summation order between runs;
    # about 1 run in 20 flipped one value, moving an output by 7e-5): one
    # flip is allowed there, round-off everywhere else.
    atol = 2e-4 if vmoe else 1e-5
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=atol)


def test_dropped_tokens_give_zero_output():
    # Hand-made: 4 tokens whose top-1 expert is expert 0; C = 2.
    gates = np.array([[0.6, 0.4], [0.9, 0.1], [0.7, 0.3], [0.8, 0.2]], "float32")
    x = np.log(gates)[None]
    for bpr, kept in ((False, [0, 1]), (True, [1, 3])):
        layer = SparseMoE(num_experts=2, mlp_dim=3, batch_priority=bpr, bias_initializer="ones")
        layer.build(x.shape)
        layer.router.kernel.assign(np.eye(2, dtype="float32"))
        out = to_np(layer(x))[0]
        dropped = [t for t in range(4) if t not in kept]
        np.testing.assert_array_equal(out[dropped], 0.0)
        assert np.all(np.abs(out[kept]).sum(-1) > 0)


@pytest.mark.parametrize("num_members", [2, 4])
@pytest.mark.parametrize("bpr", [False, True])
def test_e3_equals_per_member_vmoe(rng, num_members, bpr):
    """E³ with M members == M separate V-MoE layers (M=1) of E/M experts
    whose weights are the member's slices, each on its member's rows."""
    num_experts, batch, tokens, d = 8, 2, 4, 6
    e_m = num_experts // num_members
    x = rng.normal(size=(num_members * batch, tokens, d)).astype("float32")
    kwargs = dict(mlp_dim=5, top_k=1, capacity_factor=0.75, batch_priority=bpr)
    e3 = random_layer(rng, x.shape, num_experts=num_experts, num_members=num_members, **kwargs)
    got = to_np(e3(x))
    router = to_np(e3.router.kernel)
    experts = [to_np(w) for w in e3.dense_1.weights + e3.dense_2.weights]
    for m in range(num_members):
        own = slice(m * e_m, (m + 1) * e_m)
        vmoe = SparseMoE(num_experts=e_m, **kwargs)
        vmoe.build((batch, tokens, d))
        vmoe.router.kernel.assign(router[:, own])
        for var, value in zip(vmoe.dense_1.weights + vmoe.dense_2.weights, experts):
            var.assign(value[own])
        rows = slice(m * batch, (m + 1) * batch)
        np.testing.assert_allclose(got[rows], to_np(vmoe(x[rows])), rtol=1e-5, atol=1e-6)


def test_upcycled_experts_equal_the_dense_keras_hub_mlp(rng):
    from keras_hub.src.models.vit.vit_layers import MLP

    d, f, num_experts = 6, 10, 4
    dense = MLP(hidden_dim=d, mlp_dim=f)
    x = rng.normal(size=(2, 5, d)).astype("float32")
    dense_out = to_np(dense(x))
    w1, b1 = (to_np(w) for w in dense.dense_1.weights)
    w2, b2 = (to_np(w) for w in dense.dense_2.weights)

    def upcycle(**kwargs):
        layer = SparseMoE(num_experts=num_experts, mlp_dim=f, **kwargs)
        layer.build(x.shape)
        for var, value in zip(layer.dense_1.weights + layer.dense_2.weights, (w1, b1, w2, b2)):
            var.assign(np.stack([value] * num_experts))
        return layer

    # K = all experts and C >= tokens: the gates sum to 1, MoE == MLP.
    full = upcycle(top_k=num_experts, capacity_factor=1.0)
    np.testing.assert_allclose(to_np(full(x)), dense_out, rtol=1e-5, atol=1e-6)
    # E³ with K = E / M: each member's gates sum to 1.
    e3 = upcycle(top_k=2, num_members=2)
    np.testing.assert_allclose(
        to_np(e3(tile_members(x, 2))), np.concatenate([dense_out] * 2), rtol=1e-5, atol=1e-6
    )
    # K = 1: the output is scaled by the un-renormalised top gate p_max.
    top1 = upcycle(top_k=1, capacity_factor=4.0)
    p_max = to_np(top1.route(x)["gates"]).max(-1).reshape(2, 5, 1)
    np.testing.assert_allclose(to_np(top1(x)), p_max * dense_out, rtol=1e-5, atol=1e-6)
    assert np.all(p_max < 1.0)


def test_noise_only_in_training_and_seeded(rng):
    x = rng.normal(size=(2 * 3, 4, 6)).astype("float32")
    kwargs = dict(num_experts=4, mlp_dim=5, num_members=2, noise_std=2.0)
    layer = random_layer(rng, x.shape, seed=11, **kwargs)
    np.testing.assert_array_equal(to_np(layer(x)), to_np(layer(x)))
    config = layer.get_config()

    def fresh(seed):
        other = SparseMoE.from_config({**config, "seed": seed})
        other.build(x.shape)
        other.set_weights(layer.get_weights())
        return to_np(other(x, training=True))

    first = fresh(11)
    np.testing.assert_array_equal(first, fresh(11))
    assert not np.allclose(first, fresh(12))
    assert not np.allclose(first, to_np(layer(x)))


class TinyE3Classifier(keras.Model):
    def __init__(self, num_members=2, dispatcher="einsum", **kwargs):
        super().__init__(**kwargs)
        self.num_members = num_members
        self.embed = keras.layers.Dense(8)
        self.moe = SparseMoE(
            num_experts=4,
            mlp_dim=16,
            num_members=num_members,
            seed=0,
            capacity_factor=1.5,
            eval_capacity_factor=4.0,
            dispatcher=dispatcher,
        )
        self.head = keras.layers.Dense(3)

    def call(self, x, training=None):
        h = tile_members(self.embed(x), self.num_members)
        h = h + self.moe(h, training=training)
        h = untile_members(h, self.num_members)  # (batch, M, tokens, 8)
        return self.head(ops.mean(h, axis=2))  # (batch, M, classes)


def test_index_dispatch_equals_one_hot_dispatch_and_gradients(rng):
    """The index form lists exactly the one-hot dispatch's (token, slot)
    pairs and gates; outputs, gradients and aux losses are equal."""
    shape = (2 * 3, 5, 6)
    layers = {
        d: random_layer(
            np.random.default_rng(1),
            shape,
            num_experts=8,
            mlp_dim=5,
            top_k=2,
            num_members=2,
            capacity_factor=0.6,
            batch_priority=True,
            dispatcher=d,
            seed=0,
        )
        for d in ("einsum", "indices")
    }
    layers["indices"].set_weights(layers["einsum"].get_weights())
    x = rng.normal(size=shape).astype("float32")
    one_hot = layers["einsum"].route(x)
    index = layers["indices"].router.route(ops.convert_to_tensor(x), dispatcher="indices")
    m, g, s, e_m, c = one_hot["dispatch"].shape
    rebuilt = np.zeros((m, g, s, e_m * c))
    combine = np.zeros((m, g, s, e_m * c))
    slot_token, valid = to_np(index["slot_token"]), to_np(index["slot_valid"])
    for mm, gg, slot in zip(*np.nonzero(valid)):
        rebuilt[mm, gg, slot_token[mm, gg, slot], slot] = 1.0
    token_slot, weight = to_np(index["token_slot"]), to_np(index["token_weight"])
    for mm, gg, k, t in zip(*np.nonzero(weight)):
        combine[mm, gg, t, token_slot[mm, gg, k, t]] += weight[mm, gg, k, t]
    np.testing.assert_array_equal(rebuilt, to_np(one_hot["dispatch"]).reshape(m, g, s, -1))
    np.testing.assert_allclose(combine, to_np(one_hot["combine"]).reshape(m, g, s, -1), atol=1e-7)
    assert rebuilt.sum() < 2 * m * g * s  # some choices were dropped
    from ensemble_zoo.utils.gradients import loss_gradients

    target = rng.normal(size=shape).astype("float32")
    grads, outputs, losses = {}, {}, {}
    for d, layer in layers.items():
        model = keras.Sequential([keras.Input(shape[1:]), layer])
        grads[d] = loss_gradients(
            model,
            lambda y, p: ops.mean(ops.square(ops.subtract(p, y))),
            x,
            target,
            model.trainable_variables,
        )
        outputs[d] = to_np(layer(x))
        layer(x, training=True)
        losses[d] = float(to_np(layer.losses[0]))
    np.testing.assert_allclose(outputs["indices"], outputs["einsum"], atol=1e-5)
    for a, b in zip(grads["indices"], grads["einsum"]):
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert losses["indices"] == pytest.approx(losses["einsum"], rel=1e-6)


@pytest.mark.parametrize("dispatcher", ["einsum", "indices"])
def test_trains_under_jit_with_aux_losses(rng, dispatcher):
    x = rng.normal(size=(24, 4, 5)).astype("float32")
    y = rng.integers(0, 3, size=(24,))
    model = TinyE3Classifier(dispatcher=dispatcher)
    model(x[:2])
    model.compile(
        keras.optimizers.Adam(0.02),
        EnsembleSparseCategoricalCrossentropy(),
        jit_compile=jit_compile(),
    )
    router_before = to_np(model.moe.router.kernel)
    before = model.evaluate(x, y, batch_size=8, verbose=0)
    # 24 samples in batches of 10: a partial last batch as well.
    model.fit(x, y, batch_size=10, epochs=15, verbose=0)
    after = model.evaluate(x, y, batch_size=8, verbose=0)
    assert after < 0.8 * before
    # The router gets gradients through the combine weights (K = 1).
    assert not np.allclose(to_np(model.moe.router.kernel), router_before)
    # Compiled prediction matches the eager inference call.
    np.testing.assert_allclose(
        model.predict(x, batch_size=8, verbose=0), to_np(model(x)), rtol=1e-4, atol=1e-5
    )
    model(x, training=True)
    assert len(model.losses) == 1
    assert float(to_np(model.losses[0])) > 0
    model(x, training=False)
    assert len(model.losses) == 0


def test_config_and_saving_round_trip(tmp_path, rng):
    inputs = keras.Input((4, 6))
    layer = SparseMoE(
        num_experts=4,
        mlp_dim=5,
        top_k=2,
        num_members=2,
        group_size=8,
        capacity_factor=0.75,
        eval_capacity_factor=1.0,
        capacity_multiple_of=2,
        batch_priority=True,
        noise_std=0.1,
        importance_loss_weight=0.01,
        load_loss_weight=0.02,
        dropout_rate=0.1,
        activation="gelu_approximate",
        bfloat16_dispatch=True,
        bias_initializer="random_normal",
        seed=3,
        dispatcher="indices",
    )
    model = keras.Model(inputs, layer(inputs))
    assert tuple(model.output.shape) == (None, 4, 6)
    x = rng.normal(size=(4, 4, 6)).astype("float32")
    path = os.path.join(tmp_path, "moe.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    np.testing.assert_array_equal(to_np(restored(x)), to_np(model(x)))
    config = layer.get_config()
    clone = SparseMoE.from_config(config)
    assert clone.get_config() == config
    clone.build(x.shape)
    clone.set_weights(layer.get_weights())
    np.testing.assert_array_equal(to_np(clone(x)), to_np(layer(x)))
    assert layer.compute_output_shape((4, 4, 6)) == (4, 4, 6)


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="num_experts.*num_members"):
        SparseMoE(num_experts=6, mlp_dim=4, num_members=4)
    with pytest.raises(ValueError, match="top_k"):
        SparseMoE(num_experts=4, mlp_dim=4, num_members=2, top_k=3)
    with pytest.raises(ValueError, match="capacity_factor"):
        SparseMoE(num_experts=4, mlp_dim=4, capacity_factor=-1.0)
    with pytest.raises(ValueError, match="mlp_dim"):
        SparseMoE(num_experts=4, mlp_dim=0)
    with pytest.raises(ValueError, match="dropout_rate"):
        SparseMoE(num_experts=4, mlp_dim=4, dropout_rate=1.0)
    with pytest.raises(ValueError, match="dispatcher"):
        SparseMoE(num_experts=4, mlp_dim=4, dispatcher="scatter")
    layer = SparseMoE(num_experts=4, mlp_dim=4, num_members=2)
    with pytest.raises(ValueError, match="num_members"):
        layer(np.zeros((3, 2, 8), "float32"))
    layer(np.zeros((4, 2, 8), "float32"))
    with pytest.raises(ValueError, match="8 features"):
        layer(np.zeros((4, 2, 6), "float32"))
    with pytest.raises(ValueError, match="group_size"):
        SparseMoE(num_experts=4, mlp_dim=4, group_size=3)(np.zeros((1, 2, 8), "float32"))

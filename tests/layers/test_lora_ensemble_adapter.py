import keras
import numpy as np
import pytest
from zoo_testing import to_np

from ensemble_zoo.layers import LoRAEnsembleAdapter
from ensemble_zoo.ops import tile_members
from ensemble_zoo.ops import untile_members


def query_projection():
    """Like MultiHeadAttention's query: (dim) -> (heads, head_dim)."""
    layer = keras.layers.EinsumDense(
        "abc,cde->abde", output_shape=(None, 3, 4), bias_axes="de", name="query"
    )
    layer.build((None, 5, 6))
    return layer, np.random.default_rng(0).normal(size=(2, 5, 6)).astype("float32")


def output_projection():
    """Like MultiHeadAttention's output: (heads, head_dim) -> (dim)."""
    layer = keras.layers.EinsumDense(
        "abcd,cde->abe", output_shape=(None, 6), bias_axes="e", name="out"
    )
    layer.build((None, 5, 3, 4))
    return layer, np.random.default_rng(1).normal(size=(2, 5, 3, 4)).astype("float32")


def gemma_query_projection():
    """Gemma's query: heads before the contracted axis in the kernel
    `(heads, dim, head_dim)`."""
    layer = keras.layers.EinsumDense(
        "btd,ndh->btnh", output_shape=(None, 3, 4), bias_axes="nh", name="query"
    )
    layer.build((None, 5, 6))
    return layer, np.random.default_rng(3).normal(size=(2, 5, 6)).astype("float32")


def dense_projection():
    layer = keras.layers.Dense(7, name="dense")
    layer.build((None, 6))
    return layer, np.random.default_rng(2).normal(size=(3, 6)).astype("float32")


PROJECTIONS = [query_projection, output_projection, gemma_query_projection, dense_projection]


def randomize(adapter, seed=0):
    rng = np.random.default_rng(seed)
    adapter.lora_b.assign(rng.normal(size=adapter.lora_b.shape).astype("float32"))


def reference(base, x, kernel):
    """The base layer with its kernel replaced, in NumPy."""
    x = np.asarray(x, "float64")
    kernel = np.asarray(kernel, "float64")
    if isinstance(base, keras.layers.Dense):
        out = x @ kernel
    else:
        out = np.einsum(base.equation, x, kernel)
    return out + to_np(base.bias)


@pytest.mark.parametrize("make", PROJECTIONS, ids=lambda f: f.__name__)
def test_zero_b_every_member_equals_base(make):
    base, x = make()
    adapter = LoRAEnsembleAdapter(base, num_members=3, rank=2, seed=0)
    out = to_np(untile_members(adapter(tile_members(x, 3)), 3))
    for m in range(3):
        np.testing.assert_allclose(out[:, m], to_np(base(x)), atol=1e-6)


@pytest.mark.parametrize("make", PROJECTIONS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("lora_alpha", [None, 6.0])
def test_batched_members_equal_merged_kernels(make, lora_alpha):
    base, x = make()
    adapter = LoRAEnsembleAdapter(base, num_members=3, rank=2, lora_alpha=lora_alpha, seed=0)
    randomize(adapter)
    out = to_np(untile_members(adapter(tile_members(x, 3)), 3))
    scale = 1.0 if lora_alpha is None else lora_alpha / 2
    a, b = to_np(adapter.lora_a), to_np(adapter.lora_b)
    base_out = to_np(base(x))
    # The paper's update on the flattened projection: the input's
    # contracted (trailing) axes times A_m B_m, into the output's trailing
    # axes; the merged kernel, run through the layer's own equation, must
    # give the same output whatever the kernel's axis order.
    d_in, d_out = a.shape[1], b.shape[2]
    rows = x.reshape(-1, d_in)
    for m in range(3):
        expected = base_out + (scale * rows @ a[m] @ b[m]).reshape(base_out.shape)
        np.testing.assert_allclose(out[:, m], expected, atol=1e-4)
        merged = to_np(adapter.merged_kernel(m))
        np.testing.assert_allclose(reference(base, x, merged), expected, atol=1e-4)
    assert d_in * d_out == to_np(base.kernel).size


def test_one_member_equals_keras_lora():
    base, x = dense_projection()
    adapter = LoRAEnsembleAdapter(base, num_members=1, rank=3, seed=0)
    randomize(adapter)
    keras_lora = keras.layers.Dense(7)
    keras_lora.build((None, 6))
    keras_lora.kernel.assign(to_np(base.kernel))
    keras_lora.bias.assign(to_np(base.bias))
    keras_lora.enable_lora(3, lora_alpha=3)
    keras_lora.lora_kernel_a.assign(to_np(adapter.lora_a)[0])
    keras_lora.lora_kernel_b.assign(to_np(adapter.lora_b)[0])
    np.testing.assert_allclose(to_np(adapter(x)), to_np(keras_lora(x)), atol=1e-5)


def test_initialization_statistics_and_seed():
    base = keras.layers.Dense(64)
    base.build((None, 96))
    adapter = LoRAEnsembleAdapter(base, num_members=4, rank=8, a_gain=10.0, seed=5)
    a = to_np(adapter.lora_a)
    bound = 10.0 * np.sqrt(6.0 / (96 + 8))
    assert np.all(to_np(adapter.lora_b) == 0)
    assert np.abs(a).max() <= bound
    np.testing.assert_allclose(a.std(axis=(1, 2)), bound / np.sqrt(3), rtol=0.1)
    assert not np.allclose(a[0], a[1])
    again = LoRAEnsembleAdapter(base, num_members=4, rank=8, a_gain=10.0, seed=5)
    np.testing.assert_array_equal(to_np(again.lora_a), a)
    assert not base.trainable
    assert [w.name for w in adapter.trainable_weights] == ["lora_a", "lora_b"]


def test_config_round_trip():
    base, x = query_projection()
    adapter = LoRAEnsembleAdapter(base, num_members=2, rank=2, lora_alpha=4.0, a_gain=3.0, seed=1)
    randomize(adapter)
    clone = LoRAEnsembleAdapter.from_config(adapter.get_config())
    clone.build(x.shape)
    clone.set_weights(adapter.get_weights())
    assert clone.get_config() == adapter.get_config()
    tiled = tile_members(x, 2)
    np.testing.assert_allclose(to_np(clone(tiled)), to_np(adapter(tiled)), atol=1e-6)


def test_bad_arguments_are_clear_errors():
    base, _ = dense_projection()
    with pytest.raises(ValueError, match="rank"):
        LoRAEnsembleAdapter(base, num_members=2, rank=0)
    with pytest.raises(ValueError, match="a_gain"):
        LoRAEnsembleAdapter(base, num_members=2, rank=1, a_gain=0.0)
    relu = keras.layers.Dense(3, activation="relu")
    relu.build((None, 4))
    with pytest.raises(ValueError, match="linear"):
        LoRAEnsembleAdapter(relu, num_members=2, rank=1)
    inner = keras.layers.EinsumDense("abc,bd->acd", output_shape=(4, 3))
    inner.build((None, 5, 4))  # contracts an axis that is not trailing
    with pytest.raises(ValueError, match="equation"):
        LoRAEnsembleAdapter(inner, num_members=2, rank=1)
    with pytest.raises(ValueError, match="member_layout"):
        LoRAEnsembleAdapter(base, num_members=2, rank=1, member_layout="rows")
    with pytest.raises(
        TypeError, match="`base_layer` must be a keras.layers.Dense or keras.layers.EinsumDense"
    ):
        norm = keras.layers.LayerNormalization()
        norm.build((None, 4))
        norm.kernel = norm.gamma
        LoRAEnsembleAdapter(norm, num_members=2, rank=1)
    # Inputs: rows that do not split into the members, and features other
    # than the base layer's (both failed inside a reshape or an einsum).
    adapter = LoRAEnsembleAdapter(base, num_members=2, rank=1)
    with pytest.raises(ValueError, match="multiple of 2; got shape \\(3, 6\\)"):
        adapter(np.zeros((3, 6), "float32"))
    with pytest.raises(ValueError, match="built for 6 input features"):
        adapter(np.zeros((4, 5), "float32"))
    batch_major = LoRAEnsembleAdapter(base, num_members=3, rank=1, member_layout="batch_major")
    with pytest.raises(ValueError, match="batch-major.*multiple of 3"):
        batch_major(np.zeros((4, 6), "float32"))


def test_tile_and_untile_members():
    x = np.arange(6.0, dtype="float32").reshape(3, 2)
    tiled = to_np(tile_members(x, 2))
    np.testing.assert_array_equal(tiled, np.concatenate([x, x]))
    back = to_np(untile_members(tiled * np.repeat([1.0, 10.0], 3)[:, None], 2))
    np.testing.assert_array_equal(back[:, 0], x)
    np.testing.assert_array_equal(back[:, 1], 10 * x)
    with pytest.raises(ValueError, match="num_members"):
        tile_members(x, 0)


@pytest.mark.parametrize(
    "make", [gemma_query_projection, dense_projection], ids=lambda f: f.__name__
)
def test_batch_major_rows_equal_member_major_rows(make):
    """Row `b * M + m` of a batch-major adapter is row `m * batch + b` of
    the member-major one with the same weights."""
    base, x = make()
    member_major = LoRAEnsembleAdapter(base, num_members=3, rank=2, seed=0)
    randomize(member_major)
    batch_major = LoRAEnsembleAdapter(
        base, num_members=3, rank=2, seed=0, member_layout="batch_major"
    )
    batch_major.set_weights(member_major.get_weights())
    expected = to_np(untile_members(member_major(tile_members(x, 3)), 3))
    out = to_np(batch_major(np.repeat(x, 3, axis=0)))
    np.testing.assert_allclose(out.reshape(expected.shape), expected, atol=1e-5)
    assert batch_major.get_config()["member_layout"] == "batch_major"


@pytest.mark.parametrize("rows", [1, 30])  # low-rank products, then the merged kernel
def test_single_member_equals_its_rows_of_the_tiled_pass(rows):
    from ensemble_zoo.layers.member_selection import single_member

    base = keras.layers.EinsumDense("btd,ndh->btnh", output_shape=(None, 3, 4), bias_axes="nh")
    base.build((None, 2, 6))
    adapter = LoRAEnsembleAdapter(base, num_members=3, rank=2, seed=0)
    randomize(adapter)
    x = np.random.default_rng(4).normal(size=(rows, 2, 6)).astype("float32")
    tiled = to_np(untile_members(adapter(tile_members(x, 3)), 3))
    for m in range(3):
        with single_member(m):
            # float32 round-off of outputs near 100: relative as well
            np.testing.assert_allclose(to_np(adapter(x)), tiled[:, m], rtol=1e-6, atol=1e-5)

"""The zoo's workarounds for dependency bugs are scoped to its own models.

Importing `ensemble_zoo` once replaced Keras functions for every model in
the process. Now it changes nothing (checked in a fresh interpreter); the
replacements are installed only inside `zoo_workarounds()`, which the zoo's
models enter around their forward computation; and each workaround has a
test that fails once its dependency no longer has the bug (then delete the
workaround, see `ensemble_zoo/utils/workarounds.py`).

Nothing was ever replaced under TensorFlow, and no workaround applies
there: those tests run under JAX and PyTorch.
"""

import importlib

import keras
import numpy as np
import pytest
from conftest import BACKEND
from conftest import run_python
from zoo_testing import to_np

from ensemble_zoo.utils import workaround_replacements
from ensemble_zoo.utils import workarounds
from ensemble_zoo.utils.backend import ZooWorkaroundsMixin
from ensemble_zoo.utils.backend import installed_workarounds
from ensemble_zoo.utils.backend import zoo_workarounds

requires_workarounds = pytest.mark.skipif(
    BACKEND == "tensorflow", reason="no workaround applies under TensorFlow"
)

# Runs in a fresh interpreter: everything that the old import-time patches
# replaced (and `JaxVariable`'s initializer, which a preset loader once
# swapped while it built), every function and
# class in a loaded Keras / keras-hub module, and the outputs of a plain
# keras-hub model and of seeded random ops, before and after importing
# `ensemble_zoo`, and after running a zoo model and loading a preset.
IMPORT_CHECK = r"""
import importlib
import sys

import keras
import keras_hub
import numpy as np

BACKEND = keras.config.backend()
TARGETS = {
    "jax": [
        "keras.src.backend.jax.nn:dot_product_attention",
        "keras.src.backend.jax.nn:_can_use_flash_attention",
        "keras.src.backend.jax.core:JaxVariable._initialize_with_initializer",
    ],
    "torch": [
        "keras.src.backend.torch.nn:_can_use_flash_attention",
        "keras.src.backend.torch.random:torch_seed_generator",
        "keras.src.backend.torch.core:convert_to_tensor",
        "keras.src.backend.torch.core:slice",
        "keras.src.backend.torch.numpy:einsum",
    ],
}[BACKEND]


def resolve(target):
    module, path = target.split(":")
    obj = importlib.import_module(module)
    for name in path.split("."):
        obj = getattr(obj, name)
    return obj


def functions_and_classes():
    return {
        (name, key): value
        for name, module in list(sys.modules.items())
        if module is not None and name.split(".")[0] in ("keras", "keras_hub")
        for key, value in list(vars(module).items())
        if callable(value)
    }


keras.utils.set_random_seed(0)
x = np.random.default_rng(0).random((2, 8, 8, 1)).astype("float32")
kwargs = dict(image_shape=(8, 8, 1), patch_size=2, num_layers=1, num_heads=2,
              hidden_dim=8, mlp_dim=16)
vit = keras_hub.models.ViTBackbone(**kwargs)
vit_float16 = keras_hub.models.ViTBackbone(**kwargs, dtype="mixed_float16")
vit_float16.set_weights(vit.get_weights())


def random_ops(seed, dropout):
    return [keras.random.normal((4,), seed=seed),
            keras.random.uniform((4,), seed=seed),
            dropout(keras.ops.ones((8,)), training=True)]


def fresh():
    return keras.random.SeedGenerator(1), keras.layers.Dropout(0.5, seed=2)


def outputs():
    out = [vit(x), vit_float16(x)]  # eager, under mixed_float16 too
    if BACKEND == "jax":
        out.append(vit.predict(x, verbose=0))  # jitted
    out += random_ops(*fresh())
    if BACKEND == "torch":
        import torch

        torch._dynamo.reset()
        keras.utils.set_random_seed(3)
        out += torch.compile(random_ops, backend="eager")(*fresh())
    return [np.asarray(keras.ops.convert_to_numpy(o)) for o in out]


targets = [resolve(t) for t in TARGETS]
names = functions_and_classes()
before = outputs()

import ensemble_zoo  # noqa: E402

after_import = outputs()
ensemble = ensemble_zoo.models.DeepEnsembleClassifier.from_model(
    keras_hub.models.ViTImageClassifier(
        backbone=vit, num_classes=3, preprocessor=None
    ),
    2,
)
ensemble(x)
ensemble_zoo.models.EnsembleClassifier.from_preset("vit_tiny_digits")
after_zoo_model = outputs()

replaced = [
    t for t, original in zip(TARGETS, targets) if resolve(t) is not original
]
assert not replaced, f"replaced: {replaced}"
changed = [
    f"{name}.{key}" for (name, key), value in names.items()
    if vars(sys.modules[name]).get(key) is not value
]
assert not changed, f"changed: {changed[:20]}"
for label, outs in (("import", after_import), ("zoo model", after_zoo_model)):
    for i, (a, b) in enumerate(zip(before, outs)):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (label, i)
print("unchanged", len(TARGETS), len(names), len(before))
"""


@requires_workarounds
def test_importing_ensemble_zoo_changes_nothing_in_keras():
    """In a fresh interpreter: the functions the zoo used to replace are
    Keras' own after the import, after a zoo model ran and after a preset
    loaded; so is every function and class of every loaded Keras /
    keras-hub module; a plain keras-hub ViT (eager, under mixed_float16,
    jitted under JAX) and seeded random streams (eager, and under
    torch.compile) give bit-identical outputs with and without the
    import. (Checked against the old import-time patches: each of the
    three checks failed.)"""
    out = run_python(IMPORT_CHECK, timeout=300)
    assert "unchanged" in out


def _module_functions():
    return {
        w.name: getattr(importlib.import_module(w.module), w.attribute)
        for w in workarounds.workarounds_for()
    }


@requires_workarounds
def test_scope_installs_inside_restores_outside_and_on_errors():
    names = {w.name for w in workarounds.workarounds_for()}
    originals = {w.name: w.original() for w in workarounds.workarounds_for()}
    replacements = {w.name: w.replacement() for w in workarounds.workarounds_for()}
    assert names and _module_functions() == originals
    with zoo_workarounds():
        assert set(installed_workarounds()) == names
        assert _module_functions() == replacements
        with zoo_workarounds():  # a zoo model inside a zoo model
            assert _module_functions() == replacements
        assert _module_functions() == replacements  # still the outer's
    assert installed_workarounds() == ()
    assert _module_functions() == originals
    with pytest.raises(RuntimeError, match="boom"):
        with zoo_workarounds():
            raise RuntimeError("boom")
    assert _module_functions() == originals


def test_mixin_runs_call_inside_the_scope():
    seen = []

    class Probe(keras.layers.Layer):
        def call(self, x):
            seen.append(installed_workarounds())
            return x

    class ScopedModel(ZooWorkaroundsMixin, keras.Model):
        pass

    inputs = keras.Input((3,))
    model = ScopedModel(inputs, Probe()(inputs))
    model(np.ones((1, 3), "float32"))
    assert seen[-1] == tuple(w.name for w in workarounds.workarounds_for())
    assert installed_workarounds() == ()


# === Each workaround is still needed ===


def _on_jax_cpu():
    from ensemble_zoo.utils.backend import accelerator

    return BACKEND == "jax" and accelerator() == "cpu"


requires_jax_cpu = pytest.mark.skipif(
    not _on_jax_cpu(), reason="XLA:CPU's missing float16 dot, JAX only"
)


@requires_jax_cpu
def test_jax_float16_attention_on_cpu_is_still_needed():
    """`jax_float16_attention_on_cpu`: without it, jitted float16
    attention does not compile on a CPU (keras-team/keras-hub#2338)."""
    import jax

    q = np.random.default_rng(0).random((2, 4, 2, 8)).astype("float16")
    with pytest.raises(Exception, match="F16_F16_F32"):
        jax.jit(lambda q: keras.ops.dot_product_attention(q, q, q))(q)
    with zoo_workarounds():
        out = jax.jit(lambda q: keras.ops.dot_product_attention(q, q, q))(q)
    assert out.dtype == np.float16
    q32 = q.astype("float32")
    reference = to_np(keras.ops.dot_product_attention(q32, q32, q32))
    np.testing.assert_allclose(to_np(out).astype("float32"), reference, atol=2e-3)


@requires_jax_cpu
def test_zoo_model_runs_float16_attention_jitted_on_cpu():
    """`EnsembleClassifier.call` enters the scope: a deep ensemble of
    keras-hub ViTs under mixed_float16, jitted outside Keras' step
    functions, compiles on a CPU where the plain ViT does not."""
    import jax
    from zoo_testing import tiny_vit

    import ensemble_zoo as ez

    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        vit = tiny_vit(num_layers=1)
        model = ez.models.DeepEnsembleClassifier.from_model(vit, 2)
    finally:
        keras.config.set_dtype_policy(previous)
    x = np.random.default_rng(0).random((2, 8, 8, 1)).astype("float32")

    def forward(m):
        def run(trainable, non_trainable, x):
            return m.stateless_call(trainable, non_trainable, x)[0]

        trainable = [v.value for v in m.trainable_variables]
        non_trainable = [v.value for v in m.non_trainable_variables]
        return jax.jit(run)(trainable, non_trainable, x)

    with pytest.raises(Exception, match="F16_F16_F32"):
        forward(vit)
    logits = to_np(forward(model))
    assert logits.dtype == np.float32 and logits.shape == (2, 2, 5)
    assert np.isfinite(logits).all()


requires_torch = pytest.mark.skipif(BACKEND != "torch", reason="torch.compile")


def _dynamo_run(fn, *args, scoped):
    """Compiles `fn` with dynamo's `eager` backend (graph capture only),
    calls it twice; returns (graph breaks, graphs)."""
    import torch
    from torch._dynamo.utils import counters

    def step(*args):
        if scoped:
            with zoo_workarounds():
                return fn(*args)
        return fn(*args)

    torch._dynamo.reset()
    counters.clear()
    try:
        compiled = torch.compile(step, backend="eager")
        compiled(*args)
        compiled(*args)
        return dict(counters["graph_break"]), counters["stats"]["unique_graphs"]
    finally:
        torch._dynamo.reset()


@requires_torch
def test_torch_flash_attention_check_is_still_needed():
    """`torch_flash_attention_check_under_compile`: without it, Keras'
    flash-attention check (a pybind `SDPAParams`) breaks the graph of every
    attention under torch.compile (fixed by keras-team/keras#23327)."""
    q = keras.ops.ones((2, 4, 2, 8))

    def attention(q):
        return keras.ops.dot_product_attention(q, q, q)

    breaks, graphs = _dynamo_run(attention, q, scoped=False)
    assert breaks and graphs > 1, (breaks, graphs)
    assert any("pybind11" in reason for reason in breaks), breaks
    assert _dynamo_run(attention, q, scoped=True) == ({}, 1)


@requires_torch
def test_torch_seeded_random_is_still_needed():
    """`torch_seeded_random_under_compile`: without it, every seeded random
    op (a `SeedGenerator`, dropout) breaks the graph under torch.compile,
    at Keras' `torch.compiler.disable`d `torch_seed_generator`
    (pytorch/pytorch#88576)."""
    seed = keras.random.SeedGenerator(1)
    dropout = keras.layers.Dropout(0.5, seed=2)
    x = keras.ops.ones((8,))

    def noisy(x):
        return dropout(x, training=True) + keras.random.normal((8,), seed=seed)

    breaks, graphs = _dynamo_run(noisy, x, scoped=False)
    assert graphs > 1, (breaks, graphs)
    assert any("torch_seed_generator" in r for r in breaks), breaks
    assert _dynamo_run(noisy, x, scoped=True) == ({}, 1)


def _dynamo_fails_or_breaks(fn, *args):
    """Whether dynamo, without the workarounds, breaks `fn`'s graph or
    cannot trace it at all."""
    try:
        breaks, graphs = _dynamo_run(fn, *args, scoped=False)
    except Exception:
        return True
    return bool(breaks) or graphs > 1


@requires_torch
def test_torch_numpy_scalar_cast_is_still_needed():
    """`torch_numpy_scalars_under_compile`: keras-hub's Gemma attention
    casts a NumPy scalar (`1 / np.sqrt(head_dim)`) with `ops.cast`, and
    Keras' `convert_to_tensor` reads the traced array's `dtype`, which
    dynamo cannot trace."""
    x = keras.ops.ones((2, 3))

    def scaled(x):
        return x * keras.ops.cast(1 / np.sqrt(8), x.dtype)

    assert _dynamo_fails_or_breaks(scaled, x)
    assert _dynamo_run(scaled, x, scoped=True) == ({}, 1)


@requires_torch
def test_torch_slice_at_a_tensor_start_is_still_needed():
    """`torch_tensor_slice_start_under_compile`: Gemma 3's attention reads
    its cache with `ops.slice` at the decode step's tensor index; Keras'
    `torch.narrow` at a tensor start leaves data-dependent sizes that
    dynamo cannot trace. The gathered slice equals Keras' eager one."""
    import torch

    cache = keras.ops.reshape(keras.ops.arange(2 * 6 * 3, dtype="float32"), (2, 6, 3))
    index = torch.tensor(2)

    def read(cache, index):
        return keras.ops.slice(cache, [0, index, 0], (2, 1, 3))

    assert _dynamo_fails_or_breaks(read, cache, index)
    assert _dynamo_run(read, cache, index, scoped=True) == ({}, 1)
    expected = to_np(read(cache, index))
    with zoo_workarounds():
        np.testing.assert_array_equal(
            to_np(torch.compile(read, backend="eager")(cache, index)), expected
        )


@requires_torch
def test_torch_cpu_einsum_contraction_is_still_needed():
    """`torch_cpu_einsum_contractions`, compiled: inductor compiles `EinsumDense`'s
    one-token contraction into its own reduction kernel, not the BLAS
    matrix product that `tensordot` gets (the compiled decode step ran 3x
    slower than the eager one on a CPU); the rewrite equals the einsum
    for every equation keras-hub's decoders use, and leaves the others."""
    import torch
    from torch._dynamo.utils import counters

    def extern_calls(fn, *args):
        torch._dynamo.reset()
        counters.clear()
        with torch._inductor.config.patch(fx_graph_cache=False):
            torch.compile(fn, dynamic=False)(*args)
        torch._dynamo.reset()
        return counters["inductor"]["extern_calls"]

    x, w = torch.randn(1, 1, 8), torch.randn(8, 16)
    assert extern_calls(lambda a, b: torch.einsum("btd,df->btf", a, b), x, w) == 0
    assert (
        extern_calls(
            lambda a, b: workaround_replacements.tensordot_einsum("btd,df->btf", a, b), x, w
        )
        == 1
    )
    rng = np.random.default_rng(0)
    for equation, shapes in [
        ("btd,df->btf", [(2, 3, 8), (8, 16)]),
        ("btd,ndh->btnh", [(2, 3, 8), (4, 8, 5)]),
        ("btnh,nhd->btd", [(2, 3, 4, 5), (4, 5, 8)]),
        ("bqm,muh->bquh", [(2, 3, 8), (8, 4, 5)]),
        ("bquh,uhm->bqm", [(2, 3, 4, 5), (4, 5, 8)]),
        ("btd,dr->btr", [(2, 3, 8), (8, 2)]),
    ]:
        a, b = (torch.as_tensor(rng.normal(size=s), dtype=torch.float32) for s in shapes)
        np.testing.assert_allclose(
            to_np(workaround_replacements.tensordot_einsum(equation, a, b)),
            to_np(torch.einsum(equation, a, b)),
            atol=1e-5,
            err_msg=equation,
        )
    a = torch.randn(2, 3)
    for kept in ("ij,ij->ij", "ij,jk->ijk", "ii,ij->j", "...j,jk->...k", "ij,jk->k"):
        b = (
            torch.randn(2, 3)
            if kept.startswith("ij,ij") or kept.startswith("ii")
            else torch.randn(3, 4)
        )
        assert (
            workaround_replacements.tensordot_einsum(
                kept, a if not kept.startswith("ii") else torch.randn(2, 2), b
            )
            is None
        ), kept


@requires_torch
def test_torch_cpu_products_through_onednn_equal_mkl_and_refuse_the_rest():
    """`torch_cpu_einsum_contractions` and `torch_cpu_matmul_through_onednn`,
    eager: oneDNN's products equal PyTorch's for every `EinsumDense`
    equation and weight layout keras-hub's decoders use, within float32
    round-off; they step aside (`None`, Keras' function runs) for a
    gradient, another dtype, a product too small to pay, one row against a
    column-major weight, a weight that is not a matrix without a copy
    (unless its outer axis is an output axis: one product per slice) and
    an equation that is not a pure contraction; inside `zoo_workarounds()`
    `keras.ops` gives the same numbers as outside. (Why: MKL's SGEMM on AMD
    CPUs, `benchmarks/cpu_matmul.py`.)"""
    import torch

    from ensemble_zoo.utils import onednn_products as od

    rng = np.random.default_rng(0)

    def t(*shape):
        return torch.as_tensor(rng.normal(size=shape), dtype=torch.float32)

    for equation, a, b in [
        ("btd,df->btf", t(4, 2, 256), t(256, 1024)),
        ("btf,fd->btd", t(8, 1, 1024), t(1024, 256)),
        ("btnh,nhd->btd", t(4, 2, 4, 64), t(4, 64, 512)),
        ("bsd,kdh->bskh", t(8, 1, 512), t(1, 512, 256)),
        # Gemma's query kernel: no (n, k) view, one product per head.
        ("btd,ndh->btnh", t(8, 1, 512), t(4, 512, 256)),
    ]:
        out = od.onednn_einsum(equation, a, b)
        assert out is not None, equation
        np.testing.assert_allclose(
            to_np(out), to_np(torch.einsum(equation, a, b)), atol=2e-4, err_msg=equation
        )
    x, w, embedding = t(2, 4, 512), t(512, 1024), t(2048, 1024)
    np.testing.assert_allclose(to_np(od.onednn_matmul(x, w)), to_np(x @ w), atol=2e-4)
    one_row = t(1, 1024)
    np.testing.assert_allclose(
        to_np(od.onednn_matmul(one_row, embedding.t())), to_np(one_row @ embedding.t()), atol=2e-4
    )
    refused = [
        od.onednn_matmul(t(1, 512), w),  # one row, column-major weight
        od.onednn_matmul(t(2, 8), t(8, 8)),  # too small to pay
        od.onednn_matmul(x.double(), w.double()),
        od.onednn_einsum("btd,ndh->btnh", t(8, 1, 512), t(4, 512, 128)),  # slices too small
        od.onednn_einsum("bmd,mdr->bmr", t(4, 8, 512), t(8, 512, 512)),  # m kept
        od.onednn_einsum("ij,jk->k", t(64, 512), w),
        od.onednn_einsum("ij,jk->ik", t(4, 1), t(1024, 1024)),  # broadcast j
    ]
    assert all(r is None for r in refused)
    trained = w.clone().requires_grad_(True)
    assert od.onednn_matmul(x, trained) is None
    with torch.no_grad():
        assert od.onednn_matmul(x, trained) is not None
    inside = []
    with zoo_workarounds():
        inside.append(to_np(keras.ops.einsum("btd,df->btf", x, w)))
        inside.append(to_np(keras.ops.matmul(x, w)))
    np.testing.assert_allclose(inside[0], to_np(torch.einsum("btd,df->btf", x, w)), atol=2e-4)
    np.testing.assert_allclose(inside[1], to_np(x @ w), atol=2e-4)


requires_jax = pytest.mark.skipif(BACKEND != "jax", reason="a JAX workaround")


@requires_jax
def test_jax_cudnn_attention_is_asked_per_shape(caplog):
    """`jax_cudnn_attention_per_shape`: where Keras' check says cuDNN's
    fused attention may run, the replacement traces it for the shape
    (`jax.eval_shape`) and says no where that raises, once per shape and
    without a log line; a "no" from Keras' check stays a no. On this CPU
    tracing cuDNN's attention raises, as it does for ViT's 197 tokens on
    a GPU."""
    import jax

    calls = []

    def keras_check(query, key, value, bias, raise_error=False):
        calls.append(query.shape)
        return True

    check = workaround_replacements.cudnn_attention_only_where_it_traces(
        keras_check, platform=lambda: "gpu"
    )
    q = jax.numpy.ones((2, 197, 4, 64), "bfloat16")
    with caplog.at_level("WARNING"):
        assert check(q, q, q, None) is False
        assert check(q, q, q, None) is False
    assert len(calls) == 2 and not caplog.records
    refusing = workaround_replacements.cudnn_attention_only_where_it_traces(
        lambda *args, **kwargs: False, platform=lambda: "gpu"
    )
    assert refusing(q, q, q, None) is False
    on_cpu = workaround_replacements.cudnn_attention_only_where_it_traces(
        keras_check, platform=lambda: "cpu"
    )
    assert on_cpu(q, q, q, None) is True  # only a GPU is asked again

"""BatchEnsemble on a keras-hub ViT: the fused model equals its members run
one at a time as plain keras-hub ViTs whose kernels are
`W * outer(r_m, s_m)`; parameter counts follow Wen et al.'s formula."""

import keras
import keras_hub
import numpy as np
import pytest
from conftest import jit_compile
from zoo_testing import tiny_vit
from zoo_testing import to_np64

import ensemble_zoo as ez
from ensemble_zoo.models import BatchEnsembleImageClassifier
from ensemble_zoo.models.batch_ensemble.apply_batch_ensemble import projection_sites


@pytest.fixture(scope="module")
def vit_and_model():
    vit = tiny_vit()
    model = BatchEnsembleImageClassifier.from_keras_hub(vit, num_members=3, seed=0)
    rng = np.random.default_rng(0)
    for layer in model.batch_ensemble_layers:  # members differ in their biases too
        layer.bias.assign(to_np64(layer.bias) + rng.normal(scale=0.1, size=layer.bias.shape))
    return vit, model


def reference_member(vit, model, m):
    """A copy of the plain ViT with member m's kernels computed in NumPy."""
    clone = keras_hub.models.ViTImageClassifier.from_config(vit.get_config())
    clone.set_weights(vit.get_weights())
    be_layers = model.batch_ensemble_layers
    plain = [getattr(p, a) for p, a in projection_sites(clone.backbone)] + [clone.output_dense]
    assert len(plain) == len(be_layers) == 2 * 6 + 1
    for dense, be in zip(plain, be_layers):
        w, r, s = to_np64(be.kernel), to_np64(be.fast_in)[m], to_np64(be.fast_out)[m]
        dense.kernel.assign((w * np.outer(r, s)).reshape(dense.kernel.shape))
        dense.bias.assign(to_np64(be.bias)[m].reshape(dense.bias.shape))
    return clone


def test_each_member_equals_a_plain_vit_with_its_rank_one_kernels(vit_and_model):
    vit, model = vit_and_model
    x = np.random.default_rng(1).random((5, 8, 8, 1)).astype("float32")
    logits = to_np64(model(x))
    assert logits.shape == (5, 3, 5)
    for m in range(3):
        reference = to_np64(reference_member(vit, model, m)(x))
        np.testing.assert_allclose(logits[:, m], reference, atol=1e-5)
        np.testing.assert_allclose(to_np64(model.member_model(m)(x)), reference, atol=1e-5)
    assert np.abs(logits[:, 0] - logits[:, 1]).max() > 1e-3  # members differ


def test_parameter_count_is_wen_et_al_formula(vit_and_model):
    """Each converted layer keeps its d_in x d_out kernel, adds M * (d_in +
    d_out) fast weights, and holds M biases where the plain layer had one."""
    vit, model = vit_and_model
    m = model.num_members
    extra = 0
    for layer in model.batch_ensemble_layers:
        d_in, d_out = layer.kernel.shape
        extra += m * (d_in + d_out) + (m - 1) * d_out
    assert model.count_params() == vit.count_params() + extra
    assert all(v.trainable for v in model.weights)  # every weight trains


def test_converted_members_start_from_the_pretrained_kernels(vit_and_model):
    vit, model = vit_and_model
    from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import attention_layers

    query = attention_layers(model.backbone)[1]._query_dense
    plain = attention_layers(vit.backbone)[1]._query_dense
    np.testing.assert_allclose(to_np64(query.kernel), to_np64(plain.kernel).reshape(16, -1))


def test_fit_trains_shared_and_fast_weights_and_saves(tmp_path):
    model = BatchEnsembleImageClassifier.from_keras_hub(tiny_vit(), num_members=2, seed=1)
    model.compile(optimizer=keras.optimizers.SGD(0.1), jit_compile=jit_compile())
    x, y = ez.datasets.load_arrays("digits", "train")
    x, y = x[:32], np.minimum(y[:32], 4)
    head = model.head
    before = {
        k: to_np64(v) for k, v in (("w", head.kernel), ("r", head.fast_in), ("s", head.fast_out))
    }
    history = model.fit(x, y, epochs=3, batch_size=16, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    for key, v in (("w", head.kernel), ("r", head.fast_in), ("s", head.fast_out)):
        assert np.abs(to_np64(v) - before[key]).max() > 1e-6, key
    model.save_to_preset(tmp_path / "be")
    loaded = ez.models.EnsembleClassifier.from_preset(tmp_path / "be")
    assert isinstance(loaded, BatchEnsembleImageClassifier)
    np.testing.assert_allclose(
        to_np64(loaded.predict(x[:4], verbose=0)),
        to_np64(model.predict(x[:4], verbose=0)),
        atol=1e-5,
    )

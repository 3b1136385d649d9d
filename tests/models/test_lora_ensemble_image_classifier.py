import keras
import keras_hub
import numpy as np
import pytest
from conftest import jit_compile
from conftest import requires_jit
from keras import ops
from zoo_testing import tiny_vit
from zoo_testing import to_np

from ensemble_zoo.models import EnsembleClassifier
from ensemble_zoo.models import LoRAEnsembleImageClassifier
from ensemble_zoo.models import apply_lora_ensemble
from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import attention_layers
from ensemble_zoo.utils.gradients import loss_gradients

PROJECTIONS = ("_query_dense", "_key_dense", "_value_dense", "_output_dense")


def images(n=6, seed=1):
    return np.random.default_rng(seed).random((n, 8, 8, 1)).astype("float32")


def randomize_adapters(model, seed=0):
    rng = np.random.default_rng(seed)
    for adapter in model.adapters:
        adapter.lora_b.assign(rng.normal(scale=0.2, size=adapter.lora_b.shape).astype("float32"))
    model.head.kernel.assign(rng.normal(scale=0.2, size=model.head.kernel.shape).astype("float32"))


def merged_member(vit, model, m):
    """A plain keras-hub classifier with member m's kernels merged in NumPy."""
    clone = keras_hub.models.ViTImageClassifier.from_config(vit.get_config())
    clone.set_weights(vit.get_weights())
    pairs = zip(attention_layers(clone.backbone), attention_layers(model.backbone))
    for attention, adapted in pairs:
        for attribute in PROJECTIONS:
            dense = getattr(attention, attribute)
            adapter = getattr(adapted, attribute)
            a, b = to_np(adapter.lora_a)[m], to_np(adapter.lora_b)[m]
            kernel = to_np(dense.kernel)
            dense.kernel.assign(kernel + (a @ b).reshape(kernel.shape))
    clone.output_dense.kernel.assign(to_np(model.head.kernel)[m])
    clone.output_dense.bias.assign(to_np(model.head.bias)[m])
    return clone


@pytest.mark.parametrize("pooling", ["token", "gap"])
def test_zero_b_every_member_equals_the_keras_hub_model(pooling):
    vit = tiny_vit(pooling=pooling)
    model = LoRAEnsembleImageClassifier.from_keras_hub(vit, num_members=3, rank=2, seed=0)
    x = images()
    out = model.predict(x, verbose=0)
    assert out.shape == (6, 3, 5)
    for m in range(3):
        np.testing.assert_allclose(out[:, m], vit.predict(x, verbose=0), atol=1e-5)
    # The keras-hub model is copied, not changed.
    assert all(w.trainable for w in vit.trainable_weights) and vit.trainable_weights


def test_batched_ensemble_equals_separate_merged_models():
    vit = tiny_vit()
    model = LoRAEnsembleImageClassifier.from_keras_hub(vit, num_members=3, rank=2, seed=0)
    randomize_adapters(model)
    x = images()
    out = model.predict(x, verbose=0)
    for m in range(3):
        expected = merged_member(vit, model, m).predict(x, verbose=0)
        np.testing.assert_allclose(out[:, m], expected, atol=1e-5)
    assert np.abs(out[:, 0] - out[:, 1]).max() > 1e-2


def test_only_adapters_and_heads_train_and_backbone_stays_bit_identical():
    model = LoRAEnsembleImageClassifier.from_keras_hub(
        tiny_vit(), num_members=2, rank=2, seed=0, reuse_head=False, num_classes=5
    )
    trainable = {w.path for w in model.trainable_weights}
    expected = {w.path for a in model.adapters for w in (a.lora_a, a.lora_b)}
    expected |= {model.head.kernel.path, model.head.bias.path}
    assert trainable == expected
    frozen = [to_np(w).copy() for w in model.backbone.non_trainable_weights]
    heads = to_np(model.head.kernel).copy()
    model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=jit_compile())
    x = images(16)
    model.fit(x, np.arange(16) % 5, epochs=2, batch_size=8, verbose=0)
    for before, after in zip(frozen, model.backbone.non_trainable_weights):
        np.testing.assert_array_equal(to_np(after), before)
    assert all(np.abs(to_np(a.lora_b)).max() > 0 for a in model.adapters)
    assert not np.allclose(to_np(model.head.kernel), heads)


def test_sgd_steps_follow_the_gradients():
    """Two `train_on_batch` SGD steps equal updates by independently
    computed gradients (gradients left over from step 1 would show)."""
    model = LoRAEnsembleImageClassifier.from_keras_hub(tiny_vit(), num_members=2, rank=2, seed=0)
    randomize_adapters(model)
    model.compile(optimizer=keras.optimizers.SGD(0.1), jit_compile=jit_compile())
    x, y = images(8), np.arange(8) % 5
    loss = model.loss
    for _ in range(2):
        before = [to_np(v).copy() for v in model.trainable_variables]
        grads = loss_gradients(model, loss, x, y, model.trainable_variables)
        model.train_on_batch(x, y)
        for b, g, v in zip(before, grads, model.trainable_variables):
            np.testing.assert_allclose(to_np(v), b - 0.1 * g, atol=1e-5, err_msg=v.path)


def test_member_losses_only_reach_their_own_parameters():
    model = LoRAEnsembleImageClassifier.from_keras_hub(tiny_vit(), num_members=3, rank=2, seed=0)
    randomize_adapters(model)
    x, y = images(4), np.arange(4) % 5

    def member_one_loss(labels, logits):
        return ops.mean(
            keras.losses.sparse_categorical_crossentropy(labels, logits[:, 1], from_logits=True)
        )

    variables = model.trainable_variables
    grads = loss_gradients(model, member_one_loss, x, y, variables)
    for variable, grad in zip(variables, grads):
        assert grad.shape[0] == 3
        assert np.abs(grad[[0, 2]]).max() == 0, variable.path
        if "lora_a" not in variable.path:  # A gets no gradient while B = 0
            assert np.abs(grad[1]).max() > 0, variable.path


def test_preset_and_adapter_weights_round_trip(tmp_path):
    model = LoRAEnsembleImageClassifier.from_keras_hub(tiny_vit(), num_members=3, rank=2, seed=0)
    randomize_adapters(model)
    x = images()
    expected = model.predict(x, verbose=0)
    model.save_to_preset(str(tmp_path / "preset"))
    loaded = EnsembleClassifier.from_preset(str(tmp_path / "preset"))
    assert isinstance(loaded, LoRAEnsembleImageClassifier)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), expected, atol=1e-6)

    path = str(tmp_path / "adapters.h5")
    model.save_adapter_weights(path)
    fresh = LoRAEnsembleImageClassifier.from_keras_hub(tiny_vit(), num_members=3, rank=2, seed=9)
    fresh.load_adapter_weights(path)
    np.testing.assert_allclose(fresh.predict(x, verbose=0), expected, atol=1e-6)

    other = LoRAEnsembleImageClassifier.from_keras_hub(tiny_vit(), num_members=3, rank=4)
    with pytest.raises(ValueError, match="rank: file 2, model 4"):
        other.load_adapter_weights(path)
    fewer = LoRAEnsembleImageClassifier.from_keras_hub(
        tiny_vit(), num_members=3, rank=2, targets=("query", "value")
    )
    with pytest.raises(ValueError, match="adapters.h5"):
        fewer.load_adapter_weights(path)
    (tmp_path / "bad.h5").write_text("not hdf5")
    with pytest.raises(ValueError, match="bad.h5"):
        model.load_adapter_weights(str(tmp_path / "bad.h5"))


def test_adapter_weights_of_the_earlier_classifier_layout_still_load(tmp_path):
    """Classifier adapter files from before the one adapter format (groups
    `adapters/<index>_<name>`, `num_members` and `rank` attributes), written
    here by hand from the layout, load into the same model."""
    import h5py

    model = LoRAEnsembleImageClassifier.from_keras_hub(tiny_vit(), num_members=2, rank=2, seed=0)
    randomize_adapters(model)
    path = str(tmp_path / "earlier.h5")
    with h5py.File(path, "w") as f:
        f.attrs["num_members"], f.attrs["rank"] = 2, 2
        for index, adapter in enumerate(model.adapters):
            group = f"adapters/{index:03d}_{adapter.name}"
            f[f"{group}/lora_a"] = to_np(adapter.lora_a)
            f[f"{group}/lora_b"] = to_np(adapter.lora_b)
        f["head/kernel"], f["head/bias"] = to_np(model.head.kernel), to_np(model.head.bias)
    fresh = LoRAEnsembleImageClassifier.from_keras_hub(tiny_vit(), num_members=2, rank=2, seed=5)
    fresh.load_adapter_weights(path)
    for a, b in zip(model.weights, fresh.weights, strict=True):
        np.testing.assert_array_equal(to_np(a), to_np(b))
    other = LoRAEnsembleImageClassifier.from_keras_hub(tiny_vit(), num_members=3, rank=2)
    with pytest.raises(ValueError, match="num_members=2"):
        other.load_adapter_weights(path)


def test_bad_arguments_are_clear_errors():
    vit = tiny_vit()
    with pytest.raises(ValueError, match="num_classes"):
        LoRAEnsembleImageClassifier.from_keras_hub(vit.backbone, num_members=2, rank=2)
    with pytest.raises(ValueError, match="reuse_head"):
        LoRAEnsembleImageClassifier.from_keras_hub(vit, num_classes=3, reuse_head=True)
    with pytest.raises(ValueError, match="targets"):
        LoRAEnsembleImageClassifier.from_keras_hub(vit, targets=("query", "mlp"))
    with pytest.raises(ValueError, match="pooling"):
        LoRAEnsembleImageClassifier.from_keras_hub(vit, pooling="max")
    with pytest.raises(TypeError, match="`model` must be a keras_hub.models.ViTImageClassifier"):
        LoRAEnsembleImageClassifier.from_keras_hub("vit")
    backbone = tiny_vit().backbone
    apply_lora_ensemble(backbone, num_members=2, rank=1)
    with pytest.raises(ValueError, match="already has LoRA-Ensemble adapters"):
        apply_lora_ensemble(backbone, num_members=2, rank=1)
    model = LoRAEnsembleImageClassifier.from_keras_hub(vit, num_members=2, rank=1)
    with pytest.raises(ValueError, match=r"\(batch, 8, 8, 1\)"):
        model(np.zeros((2, 8, 8), "float32"))


@requires_jit
def test_trains_and_predicts_with_jit_compile():
    model = LoRAEnsembleImageClassifier.from_keras_hub(
        tiny_vit(), num_members=2, rank=2, seed=0, reuse_head=False, num_classes=5
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=jit_compile())
    x, y = images(32), np.arange(32) % 5
    history = model.fit(x, y, epochs=5, batch_size=16, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]

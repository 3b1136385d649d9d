"""MIMO on a keras-hub ViT: stacked inputs, member heads, the E³ paper's
widening of a pretrained ViT, and Havasi et al.'s batches."""

import keras
import numpy as np
import pytest
from conftest import jit_compile
from zoo_testing import tiny_vit
from zoo_testing import to_np64

import ensemble_zoo as ez
from ensemble_zoo.models import MIMOImageClassifier
from ensemble_zoo.models.mimo import mimo_batch


@pytest.fixture(scope="module")
def vit_and_model():
    vit = tiny_vit()
    return vit, MIMOImageClassifier.from_keras_hub(vit, num_members=3, seed=0)


def test_widened_vit_starts_as_the_pretrained_one(vit_and_model):
    vit, model = vit_and_model
    x = np.random.default_rng(1).random((4, 8, 8, 1)).astype("float32")
    bias = to_np64(vit.output_dense.bias)
    expected = (to_np64(vit(x)) - bias) / 3 + bias  # head scaled by 1/M
    logits = to_np64(model(x))
    assert logits.shape == (4, 3, 5)
    for m in range(3):
        np.testing.assert_allclose(logits[:, m], expected, atol=1e-5)
    assert model.backbone.inputs[0].shape[-1] == 3
    # Havasi et al.: only the first layer's inputs and the last layer's
    # outputs grow M-fold: + (M - 1) (p^2 C D) + (M - 1) (D K + K).
    assert model.count_params() == vit.count_params() + 2 * (2 * 2 * 1 * 16) + 2 * (16 * 5 + 5)


def test_member_m_is_head_m_on_the_stacked_inputs(vit_and_model):
    _, model = vit_and_model
    rng = np.random.default_rng(2)
    for w in (model.head.kernel, model.backbone.get_layer("vit_patching_and_embedding").weights[1]):
        w.assign(rng.normal(scale=0.3, size=w.shape).astype("float32"))  # members differ
    images = rng.random((3, 4, 8, 8, 1)).astype("float32")  # one image per input
    stacked = np.concatenate(list(images), axis=-1)
    logits = to_np64(model(stacked))
    features = to_np64(model.backbone(stacked))[:, 0]
    kernel, bias = to_np64(model.head.kernel), to_np64(model.head.bias)
    for m in range(3):
        head = slice(5 * m, 5 * (m + 1))
        np.testing.assert_allclose(logits[:, m], features @ kernel[:, head] + bias[head], atol=1e-5)
    # at test time every input sees the same image: a plain keras-hub ViT
    same = to_np64(model(images[0]))
    np.testing.assert_allclose(
        same, to_np64(model(np.concatenate([images[0]] * 3, axis=-1))), atol=1e-6
    )
    np.testing.assert_allclose(to_np64(model.member_model(1)(images[0])), same[:, 1], atol=1e-5)
    assert np.abs(same[:, 0] - same[:, 1]).max() > 1e-3


def test_mimo_batches_repeat_and_share_inputs_as_havasi_et_al():
    images = np.arange(8, dtype="float32").reshape(8, 1, 1, 1) * np.ones((8, 2, 2, 1), "float32")
    labels = np.arange(8)
    stacked, member_labels = mimo_batch(images, labels, 3, 0.25, 2, np.random.default_rng(0))
    assert stacked.shape == (16, 2, 2, 3) and member_labels.shape == (16, 3)
    for m in range(3):  # member m's channel holds the image of its label
        np.testing.assert_array_equal(stacked[:, 0, 0, m], member_labels[:, m])
        assert (np.bincount(member_labels[:, m], minlength=8) == 2).all()  # batch repetition
    # the last 25% of positions show every member the same example
    shared = (member_labels == member_labels[:, :1]).all(axis=1)
    assert shared[12:].all() and shared[:12].mean() < 0.5


def test_fit_on_per_member_labels_and_preset_round_trip(tmp_path):
    model = MIMOImageClassifier.from_keras_hub(
        tiny_vit(1), num_members=2, batch_repetition=2, seed=0
    )
    model.compile(optimizer=keras.optimizers.Adam(3e-3), jit_compile=jit_compile())
    x, y = ez.datasets.load_arrays("digits", "train")
    x, y = x[:64], np.minimum(y[:64], 4)
    history = model.fit(x, y, epochs=3, batch_size=32, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    model.save_to_preset(tmp_path / "mimo")
    loaded = ez.models.EnsembleClassifier.from_preset(tmp_path / "mimo")
    assert isinstance(loaded, MIMOImageClassifier) and loaded.member_input_shape == (8, 8, 1)
    np.testing.assert_allclose(
        to_np64(loaded.predict(x[:4], verbose=0)),
        to_np64(model.predict(x[:4], verbose=0)),
        atol=1e-5,
    )


def test_per_member_labels_in_loss_and_accuracy():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(6, 3, 4)).astype("float32")
    labels = rng.integers(0, 4, size=(6, 3))
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -np.take_along_axis(log_p, labels[..., None], -1)[..., 0].mean()
    loss = ez.losses.EnsembleSparseCategoricalCrossentropy()
    np.testing.assert_allclose(float(to_np64(loss(labels, logits))), expected, rtol=1e-5)
    metric = ez.metrics.EnsembleAccuracy()
    metric.update_state(labels, logits)
    np.testing.assert_allclose(
        float(to_np64(metric.result())), (logits.argmax(-1) == labels).mean(), rtol=1e-6
    )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(input_repetition=1.5), "input_repetition"),
        (dict(batch_repetition=0), "batch_repetition"),
    ],
)
def test_bad_mimo_arguments_are_named(vit_and_model, kwargs, match):
    with pytest.raises(ValueError, match=match):
        MIMOImageClassifier.from_keras_hub(vit_and_model[0], **kwargs)


def test_backbone_channels_must_stack_the_members():
    with pytest.raises(ValueError, match="num_members"):
        MIMOImageClassifier(tiny_vit().backbone, num_classes=5, num_members=3)

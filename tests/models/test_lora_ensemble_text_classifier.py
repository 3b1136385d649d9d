import keras
import keras_hub
import numpy as np
import pytest
import zoo_testing
from conftest import jit_compile
from conftest import requires_jit
from conftest import requires_saved_model
from zoo_testing import text_inputs
from zoo_testing import to_np

from ensemble_zoo.models import EnsembleClassifier
from ensemble_zoo.models import LoRAEnsembleTextClassifier
from ensemble_zoo.models.lora_ensemble.apply_lora_ensemble import attention_layers

PROJECTIONS = ("_query_dense", "_key_dense", "_value_dense", "_output_dense")


def tiny_bert(seed=0):
    return zoo_testing.tiny_bert(seed, dropout=0.0)


def randomize_adapters(model, seed=0):
    rng = np.random.default_rng(seed)
    for adapter in model.adapters:
        adapter.lora_b.assign(rng.normal(scale=0.2, size=adapter.lora_b.shape).astype("float32"))


def merged_member(bert, model, m):
    clone = keras_hub.models.BertTextClassifier.from_config(bert.get_config())
    clone.set_weights(bert.get_weights())
    pairs = zip(attention_layers(clone.backbone), attention_layers(model.backbone))
    for attention, adapted in pairs:
        for attribute in PROJECTIONS:
            dense, adapter = getattr(attention, attribute), getattr(adapted, attribute)
            a, b = to_np(adapter.lora_a)[m], to_np(adapter.lora_b)[m]
            kernel = to_np(dense.kernel)
            dense.kernel.assign(kernel + (a @ b).reshape(kernel.shape))
    clone.output_dense.kernel.assign(to_np(model.head.kernel)[m])
    clone.output_dense.bias.assign(to_np(model.head.bias)[m])
    return clone


def test_zero_b_members_equal_keras_hub_bert_with_padding():
    bert = tiny_bert()
    model = LoRAEnsembleTextClassifier.from_keras_hub(bert, num_members=3, rank=2, seed=0)
    x = text_inputs()
    out = model.predict(x, verbose=0)
    assert out.shape == (4, 3, 3)
    for m in range(3):
        np.testing.assert_allclose(out[:, m], bert.predict(x, verbose=0), atol=1e-5)


def test_batched_ensemble_equals_separate_merged_models():
    bert = tiny_bert()
    model = LoRAEnsembleTextClassifier.from_keras_hub(bert, num_members=3, rank=2, seed=0)
    randomize_adapters(model)
    x = text_inputs()
    out = model.predict(x, verbose=0)
    for m in range(3):
        expected = merged_member(bert, model, m).predict(x, verbose=0)
        np.testing.assert_allclose(out[:, m], expected, atol=1e-5)
    assert np.abs(out[:, 0] - out[:, 2]).max() > 1e-3


def test_preset_round_trip_and_errors(tmp_path):
    model = LoRAEnsembleTextClassifier.from_keras_hub(tiny_bert(), num_members=2, rank=2, seed=0)
    randomize_adapters(model)
    x = text_inputs()
    model.save_to_preset(str(tmp_path / "p"))
    loaded = EnsembleClassifier.from_preset(str(tmp_path / "p"))
    assert isinstance(loaded, LoRAEnsembleTextClassifier)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0), atol=1e-6)
    with pytest.raises(ValueError, match="token_ids"):
        model(x["token_ids"])
    with pytest.raises(ValueError, match="max_sequence_length"):
        model({k: np.concatenate([v, v], 1) for k, v in x.items()})
    with pytest.raises(TypeError, match="BertTextClassifier"):
        LoRAEnsembleTextClassifier.from_keras_hub(keras.layers.Dense(2))
    with pytest.raises(ValueError, match="num_classes"):
        LoRAEnsembleTextClassifier.from_keras_hub(tiny_bert().backbone)


@requires_jit
def test_trains_with_jit_compile_and_keeps_backbone_frozen():
    model = LoRAEnsembleTextClassifier.from_keras_hub(
        tiny_bert().backbone, num_members=2, rank=2, num_classes=3, seed=0
    )
    frozen = [to_np(w).copy() for w in model.backbone.non_trainable_weights]
    x, y = text_inputs(16, seed=2), np.arange(16) % 3
    model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=jit_compile())
    history = model.fit(x, y, epochs=4, batch_size=8, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    for before, after in zip(frozen, model.backbone.non_trainable_weights):
        np.testing.assert_array_equal(to_np(after), before)


@requires_saved_model
def test_saved_model_serves_text_inputs(tmp_path):
    import tensorflow as tf

    model = LoRAEnsembleTextClassifier.from_keras_hub(tiny_bert(), num_members=2, rank=2, seed=0)
    randomize_adapters(model)
    x = text_inputs()
    model.export(str(tmp_path / "sm"))
    loaded = tf.saved_model.load(str(tmp_path / "sm"))
    served = loaded.serve({k: tf.constant(v) for k, v in x.items()})
    np.testing.assert_allclose(
        served["member_logits"].numpy(), model.predict(x, verbose=0), atol=1e-5
    )

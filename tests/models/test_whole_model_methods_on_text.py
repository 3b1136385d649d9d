"""The methods that wrap whole models (deep ensemble, MC dropout, sub-network
masks) on every text classifier family keras-hub ships: the members take
the family's dict of token inputs (`fixtures/tiny_text_classifiers.py`).
Each member of a deep ensemble equals the model it copies; MC dropout at
rate 0 equals the model and with dropout draws distinct members; each
sub-network member equals the model with its masks multiplied into the
feed-forward kernels (found by role); the inputs are checked
against the model's keys and dtypes. The whole list runs under PyTorch (no
compilation); JAX and TensorFlow run a slice that rotates with the day."""

import keras
import keras_hub
import numpy as np
import pytest
from fixtures.tiny_text_classifiers import FAMILIES
from fixtures.tiny_text_classifiers import build_text_classifier
from fixtures.tiny_text_classifiers import text_inputs
from zoo_testing import families_this_run
from zoo_testing import to_np

from ensemble_zoo.export import ExportedModel
from ensemble_zoo.models import DeepEnsembleClassifier
from ensemble_zoo.models import EnsembleClassifier
from ensemble_zoo.models import MCDropoutClassifier
from ensemble_zoo.models import SubnetworkEnsembleClassifier

SLICE = 3


def feedforward_dense(classifier, family):
    """The feed-forward `Dense` layers of a keras-hub text classifier, by
    the attribute names keras-hub gives them (FNet's encoder has no
    attention and names them otherwise)."""
    names = ("intermediate_dense", "output_dense") if family == "f_net" else FEEDFORWARD
    found = []
    for layer in classifier.backbone._flatten_layers():
        for name in names:
            dense = getattr(layer, "_" + name, getattr(layer, name, None))
            if isinstance(dense, keras.layers.Dense):
                found.append(dense)
    return found


FEEDFORWARD = ("feedforward_intermediate_dense", "feedforward_output_dense")


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


@pytest.mark.parametrize("family", families_this_run(FAMILIES, SLICE))
def test_wrapped_model_methods_take_the_familys_inputs(family):
    models = [build_text_classifier(family, seed) for seed in (0, 1)]
    x = text_inputs(models[0])
    ensemble = DeepEnsembleClassifier(models)
    logits = ensemble.predict(x, verbose=0)
    for m, model in enumerate(models):
        np.testing.assert_allclose(logits[:, m], to_np(model(x)), atol=1e-5)

    mc = MCDropoutClassifier(models[0], num_members=2, rate=0.0)
    np.testing.assert_allclose(
        mc.predict(x, verbose=0), np.stack([to_np(models[0](x))] * 2, 1), atol=1e-5
    )
    sampled = MCDropoutClassifier(models[0], num_members=2, rate=0.5, seed=0)
    out = sampled.predict_uncertainty(x)
    assert np.abs(out["member_logits"][:, 0] - out["member_logits"][:, 1]).max() > 1e-4
    assert out["epistemic"].shape == (3,)

    # Sub-network masks on the feed-forward blocks: each member equals a
    # copy of the model with its masks multiplied into the kernels.
    masks = SubnetworkEnsembleClassifier(models[0], num_members=2, seed=0)
    assert len(masks.masked_layers) == 2 * masks.backbone.model.backbone.num_layers
    rng = np.random.default_rng(0)
    for layer in masks.masked_layers:
        for logits in layer.mask_logits():
            logits.assign(rng.normal(size=logits.shape).astype("float32") * 3)
    logits = masks.predict(x, verbose=0)
    for m in range(2):
        reference = build_text_classifier(family, 0)
        dense = feedforward_dense(reference, family)
        assert len(dense) == len(masks.masked_layers)
        for layer, wrapper in zip(dense, masks.masked_layers, strict=True):
            column = sigmoid(to_np(wrapper.column_logits)[m])
            row = sigmoid(to_np(wrapper.row_logits)[m])
            layer.kernel.assign(to_np(layer.kernel) * np.outer(column, row))
            if layer.bias is not None:  # RoFormer-V2 has none
                layer.bias.assign(to_np(layer.bias) * row)
        np.testing.assert_allclose(logits[:, m], to_np(reference(x)), atol=1e-5)


def test_text_deep_ensemble_preprocesses_trains_and_round_trips(tmp_path):
    """Raw strings through the classifier's preprocessor, which the
    ensemble takes over; `fit`; a preset that reloads with the same
    outputs; a clear error for other keys or float ids."""
    classifier = build_text_classifier("bert")
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(45)]
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocabulary)
    classifier.preprocessor = keras_hub.models.BertTextClassifierPreprocessor(
        tokenizer, sequence_length=8
    )
    ensemble = DeepEnsembleClassifier.from_model(classifier, num_members=2, seed=0)
    texts = ["w1 w2 w3", "w4", "w5 w6"]
    ensemble.compile(optimizer=keras.optimizers.Adam(0.05))
    history = ensemble.fit(texts, np.array([0, 1, 2]), batch_size=3, epochs=8, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    expected = ensemble.predict(texts, verbose=0)
    ensemble.save_to_preset(str(tmp_path / "preset"))
    loaded = EnsembleClassifier.from_preset(str(tmp_path / "preset"))
    assert isinstance(loaded.preprocessor, keras_hub.models.BertTextClassifierPreprocessor)
    np.testing.assert_allclose(loaded.predict(texts, verbose=0), expected, atol=1e-5)

    tokens = classifier.preprocessor(texts)
    tokens = {k: to_np(v).astype("int32") for k, v in tokens.items()}
    # ONNX (every backend writes it) takes the token dict, padded to the
    # backbone's max_sequence_length outside TensorFlow.
    loaded.export(str(tmp_path / "model.onnx"), format="onnx")
    served = ExportedModel(str(tmp_path / "model.onnx"))(tokens)
    np.testing.assert_allclose(served["member_logits"], expected, atol=1e-5)
    with pytest.raises(ValueError, match="expects a dict with keys"):
        ensemble({"token_ids": tokens["token_ids"]})
    with pytest.raises(TypeError, match="`token_ids` must hold int32"):
        ensemble({**tokens, "token_ids": tokens["token_ids"].astype("float32")})
    with pytest.raises(ValueError, match="share their length"):
        ensemble({**tokens, "padding_mask": tokens["padding_mask"][:, :4]})

"""BatchEnsemble on a keras-hub BERT (the text variant): each member
equals a plain keras-hub BertTextClassifier whose kernels are
`W * outer(r_m, s_m)`."""

import keras
import keras_hub
import numpy as np
import pytest
from zoo_testing import to_np64

from ensemble_zoo.models import BatchEnsembleTextClassifier
from ensemble_zoo.models.batch_ensemble.apply_batch_ensemble import projection_sites


@pytest.fixture(scope="module")
def bert_and_model():
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=50,
        num_layers=2,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=8,
    )
    bert = keras_hub.models.BertTextClassifier(backbone, num_classes=3, preprocessor=None)
    model = BatchEnsembleTextClassifier.from_keras_hub(
        bert, num_members=3, seed=0, fast_weight_stddev=0.5
    )
    rng = np.random.default_rng(0)
    for layer in model.batch_ensemble_layers:
        layer.bias.assign(to_np64(layer.bias) + rng.normal(scale=0.1, size=layer.bias.shape))
    return bert, model


def inputs(batch=4):
    rng = np.random.default_rng(1)
    mask = np.ones((batch, 8), "int32")
    mask[0, 5:] = 0  # padding
    return {
        "token_ids": rng.integers(1, 50, size=(batch, 8)).astype("int32"),
        "segment_ids": np.zeros((batch, 8), "int32"),
        "padding_mask": mask,
    }


def test_each_member_equals_a_plain_bert_with_its_rank_one_kernels(bert_and_model):
    bert, model = bert_and_model
    x = inputs()
    logits = to_np64(model(x))
    assert logits.shape == (4, 3, 3)
    be_layers = model.batch_ensemble_layers
    for m in range(3):
        clone = keras_hub.models.BertTextClassifier.from_config(bert.get_config())
        clone.set_weights(bert.get_weights())
        plain = [getattr(p, a) for p, a in projection_sites(clone.backbone)] + [clone.output_dense]
        assert len(plain) == len(be_layers) == 2 * 6 + 1
        for dense, be in zip(plain, be_layers):
            w, r, s = to_np64(be.kernel), to_np64(be.fast_in)[m], to_np64(be.fast_out)[m]
            dense.kernel.assign((w * np.outer(r, s)).reshape(dense.kernel.shape))
            dense.bias.assign(to_np64(be.bias)[m].reshape(dense.bias.shape))
        np.testing.assert_allclose(logits[:, m], to_np64(clone(x)), atol=1e-5)
    np.testing.assert_allclose(to_np64(model.member_model(1)(x)), logits[:, 1], atol=1e-5)
    assert np.abs(logits[:, 0] - logits[:, 1]).max() > 1e-3


def test_parameter_count_and_config_round_trip(bert_and_model):
    bert, model = bert_and_model
    extra = sum(
        3 * (layer.kernel.shape[0] + layer.kernel.shape[1]) + 2 * layer.kernel.shape[1]
        for layer in model.batch_ensemble_layers
    )
    assert model.count_params() == bert.count_params() + extra
    clone = BatchEnsembleTextClassifier.from_config(model.get_config())
    clone.set_weights(model.get_weights())
    np.testing.assert_allclose(to_np64(clone(inputs(2))), to_np64(model(inputs(2))), atol=1e-6)


def test_a_vit_is_refused():
    vit = keras_hub.models.ViTBackbone(
        image_shape=(8, 8, 1), patch_size=2, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16
    )
    with pytest.raises(TypeError, match="BertBackbone"):
        BatchEnsembleTextClassifier(vit, num_classes=2)

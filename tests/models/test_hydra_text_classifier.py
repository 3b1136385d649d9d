import keras_hub
import numpy as np
import pytest
import zoo_testing
from conftest import jit_compile
from conftest import requires_jit
from zoo_testing import perturb_weights
from zoo_testing import text_inputs
from zoo_testing import to_np

from ensemble_zoo.models import EnsembleClassifier
from ensemble_zoo.models import HydraTextClassifier


def tiny_bert(seed=0):
    return perturb_weights(zoo_testing.tiny_bert(seed), seed)


MASKS = np.array(
    [[[1, 1, 1, 1], [0, 1, 1, 0]], [[1, 0, 0, 0], [1, 1, 1, 1]], [[0, 0, 0, 0], [1, 0, 1, 1]]], bool
)


def ablated(bert, mask):
    clone = keras_hub.models.BertTextClassifier.from_config(bert.get_config())
    clone.set_weights(bert.get_weights())
    for block, keep in zip(clone.backbone.transformer_layers, mask):
        dense = block._self_attention_layer._output_dense
        kernel = to_np(dense.kernel)
        kernel[~keep] = 0.0
        dense.kernel.assign(kernel)
    return clone


def test_fused_attention_kernel_equals_keras_hub_with_padding(tmp_path):
    """`attention_implementation="fused"` (one dot_product_attention over
    members * heads) gives the keras-hub BERT's outputs on padded inputs and
    survives a preset round trip."""
    bert = tiny_bert()
    hydra = HydraTextClassifier.from_keras_hub(bert, MASKS, attention_implementation="fused")
    x = text_inputs()
    got = hydra.predict(x, verbose=0)
    for m, mask in enumerate(MASKS):
        np.testing.assert_allclose(got[:, m], ablated(bert, mask).predict(x, verbose=0), atol=1e-5)
    hydra.save_to_preset(str(tmp_path / "preset"))
    restored = EnsembleClassifier.from_preset(str(tmp_path / "preset"))
    assert restored.backbone.attention_implementation == "fused"
    assert all(
        block.attention.attention_implementation == "fused"
        for block in restored.backbone.encoder_blocks
    )


def test_one_member_keeping_every_head_equals_keras_hub():
    bert = tiny_bert()
    hydra = HydraTextClassifier.from_keras_hub(bert)
    x = text_inputs()
    np.testing.assert_allclose(
        hydra.predict(x, verbose=0)[:, 0], bert.predict(x, verbose=0), atol=1e-5
    )


@pytest.mark.parametrize("mlp", ["merge", "grouped"])
def test_fused_equals_pruned_members_with_padding(mlp):
    bert = tiny_bert()
    hydra = HydraTextClassifier.from_keras_hub(bert, MASKS, mlp=mlp)
    x = text_inputs()
    fused = hydra.predict(x, verbose=0)
    assert fused.shape == (4, 3, 3)
    for m, member in enumerate(hydra.split_members()):
        reference = ablated(bert, MASKS[m]).predict(x, verbose=0)
        np.testing.assert_allclose(fused[:, m], reference, atol=1e-5)
        np.testing.assert_allclose(member.predict(x, verbose=0)[:, 0], reference, atol=1e-5)
    refused = HydraTextClassifier.fuse(hydra.split_members(), mlp=mlp)
    np.testing.assert_allclose(refused.predict(x, verbose=0), fused, atol=1e-6)


def test_preset_round_trip_and_errors(tmp_path):
    hydra = HydraTextClassifier.from_keras_hub(tiny_bert(), MASKS)
    x = text_inputs()
    hydra.save_to_preset(str(tmp_path / "p"))
    loaded = EnsembleClassifier.from_preset(str(tmp_path / "p"))
    assert isinstance(loaded, HydraTextClassifier)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), hydra.predict(x, verbose=0), atol=1e-6)
    with pytest.raises(ValueError, match="token_ids"):
        hydra(x["token_ids"])
    with pytest.raises(ValueError, match="max_sequence_length"):
        hydra({k: np.concatenate([v, v], 1) for k, v in x.items()})
    with pytest.raises(ValueError, match="BertTextClassifier"):
        HydraTextClassifier.from_keras_hub(tiny_bert().backbone)


@requires_jit
def test_trains_with_jit_compile():
    hydra = HydraTextClassifier.from_keras_hub(tiny_bert(), MASKS)
    x = text_inputs(16, seed=2)
    y = np.arange(16) % 3
    hydra.compile(jit_compile=jit_compile())
    history = hydra.fit(x, y, epochs=4, batch_size=8, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]

"""LoRA-Ensemble on a keras-hub classifier of any family
(`LoRAEnsembleClassifier`): the tiny text classifiers of every family
keras-hub ships (`fixtures/tiny_text_classifiers.py`) and the transformer
image classifiers (`fixtures/tiny_image_classifiers.py`). With `B = 0`
every member computes the keras-hub model's logits; with trained-like
adapters and heads each member equals the keras-hub model with its merged
kernels and its head; a family without attention is refused by name. The
whole list runs under PyTorch (no compilation); JAX and TensorFlow run a
slice that rotates with the day."""

import keras
import keras_hub
import numpy as np
import pytest
from conftest import BACKEND
from fixtures import tiny_image_classifiers
from fixtures import tiny_text_classifiers
from zoo_testing import families_this_run
from zoo_testing import to_np

from ensemble_zoo.models import LoRAEnsembleClassifier
from ensemble_zoo.models import LoRAEnsembleTextClassifier
from ensemble_zoo.models.member_sites import attention_sites

SLICE = 3
#: family -> the number of adapted projections: 4 per attention layer
#: (Swin fuses query, key and value: 2 per block, 2 blocks; MiT has 2).
ADAPTERS = {"swin": 4, "mit": 8}


def _build(family):
    """`(keras-hub classifier, inputs)` of a tiny model of `family`."""
    if family in tiny_image_classifiers.FAMILIES:
        return tiny_image_classifiers.build_image_classifier(family), (
            tiny_image_classifiers.images()
        )
    model = tiny_text_classifiers.build_text_classifier(family)
    return model, tiny_text_classifiers.text_inputs(model)


FAMILIES = sorted(set(tiny_text_classifiers.FAMILIES) - {"f_net"}) + sorted(
    tiny_image_classifiers.FAMILIES
)


def _merged_member(model, family, ensemble, member):
    """A fresh copy of the keras-hub `model` with member `member`'s merged
    attention kernels and head: the member as a plain keras-hub model."""
    reference, _ = _build(family)
    sites = attention_sites(reference.backbone, ensemble.targets)
    for (parent, attribute), adapter in zip(sites, ensemble.adapters, strict=True):
        getattr(parent, attribute).kernel.assign(adapter.merged_kernel(member))
    for head in ensemble.heads:
        dense = reference.get_layer(head.name.removesuffix("_members"))
        dense.kernel.assign(head.kernel[member])
        dense.bias.assign(head.bias[member])
    return reference


@pytest.mark.parametrize("family", families_this_run(FAMILIES, SLICE))
def test_every_family_equals_keras_hub_and_members_equal_merged_models(family):
    model, x = _build(family)
    ensemble = LoRAEnsembleClassifier.from_model(model, num_members=2, rank=2, seed=0)
    assert len(ensemble.adapters) == ADAPTERS.get(family, 4)
    expected = to_np(model(x))
    logits = ensemble.predict(x, verbose=0)
    assert logits.shape == expected.shape[:1] + (2,) + expected.shape[1:]
    for m in range(2):
        np.testing.assert_allclose(logits[:, m], expected, atol=1e-5)

    # Members that differ: random updates and heads.
    rng = np.random.default_rng(1)
    for weight in [a.lora_b for a in ensemble.adapters] + [h.kernel for h in ensemble.heads]:
        noise = rng.normal(scale=0.3, size=tuple(weight.shape)).astype("float32")
        weight.assign(to_np(weight) + noise)
    logits = ensemble.predict(x, verbose=0)
    assert np.abs(logits[:, 0] - logits[:, 1]).max() > 1e-3
    for m in range(2):
        reference = _merged_member(model, family, ensemble, m)
        np.testing.assert_allclose(logits[:, m], to_np(reference(x)), atol=1e-4)


@pytest.mark.skipif(BACKEND != "jax", reason="the checks before any computation: once")
def test_models_without_attention_or_a_backbone_are_refused():
    fnet = tiny_text_classifiers.build_text_classifier("f_net")
    with pytest.raises(ValueError, match=r"no attention projection.*\(FNet\) cannot"):
        LoRAEnsembleClassifier.from_model(fnet, num_members=2, rank=2)
    inputs = keras.Input((4,))
    mlp = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.Dense(8)(inputs)))
    with pytest.raises(TypeError, match="must be a keras-hub task"):
        LoRAEnsembleClassifier.from_model(mlp, num_members=2, rank=2)
    roberta = tiny_text_classifiers.build_text_classifier("roberta")
    with pytest.raises(ValueError, match="`targets` must be distinct names"):
        LoRAEnsembleClassifier.from_model(roberta, targets=["query", "mlp_up"])
    # The BERT task points a RoBERTa to the class that takes every family.
    with pytest.raises(TypeError, match=r"LoRAEnsembleClassifier\.from_model"):
        LoRAEnsembleTextClassifier.from_keras_hub(roberta, num_members=2, rank=2)


def test_fit_trains_adapters_and_heads_only_and_the_preset_round_trips(tmp_path):
    model = tiny_text_classifiers.build_text_classifier("roberta")
    x = tiny_text_classifiers.text_inputs(model, batch=8)
    y = np.arange(8) % 3
    ensemble = LoRAEnsembleClassifier.from_model(
        model, num_members=2, rank=2, reuse_head=False, seed=0
    )
    trainable = {id(v) for v in ensemble.trainable_weights}
    adapted = [w for a in ensemble.adapters for w in (a.lora_a, a.lora_b)]
    heads = [w for h in ensemble.heads for w in h.weights]
    assert trainable == {id(w) for w in adapted + heads}
    frozen = {v.path: to_np(v) for v in ensemble.non_trainable_weights}
    before = [to_np(w) for w in adapted + heads]
    ensemble.compile(optimizer=keras.optimizers.Adam(1e-2))
    ensemble.fit(x, y, epochs=2, batch_size=4, verbose=0)
    after = [to_np(w) for w in adapted + heads]
    assert all(np.abs(a - b).max() > 0 for a, b in zip(after, before) if a.any() or b.any())
    for v in ensemble.non_trainable_weights:
        np.testing.assert_array_equal(to_np(v), frozen[v.path])
    # The wrapped copy: the user's model is unchanged.
    np.testing.assert_array_equal(
        to_np(model.get_layer("logits").kernel), to_np(ensemble.model.get_layer("logits").kernel)
    )

    logits = ensemble.predict(x, verbose=0)
    ensemble.save_to_preset(str(tmp_path))
    restored = keras_hub.models.ImageClassifier.from_preset(str(tmp_path))
    assert type(restored) is LoRAEnsembleClassifier
    assert restored.get_config()["targets"] == ["query", "key", "value", "attention_output"]
    np.testing.assert_allclose(restored.predict(x, verbose=0), logits, atol=1e-6)
    uncertainty = restored.predict_uncertainty(x)
    assert uncertainty["probabilities"].shape == (8, 3)

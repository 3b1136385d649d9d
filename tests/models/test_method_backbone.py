"""Applying a method to a keras-hub backbone builds a new backbone.

Classifiers used to apply their method to the user's backbone in place and
then swap its class (`backbone.__class__ = ...`); a second task could not be
built on it. Now the classifier builds a new backbone of the method's class
from the source's config and weights and leaves the source alone; a method
backbone can carry several tasks, as keras-hub backbones do.
"""

import keras
import keras_hub
import numpy as np
import pytest
from zoo_testing import tiny_vit
from zoo_testing import to_np

import ensemble_zoo as ez
from ensemble_zoo.models.method_backbone import MethodBackbone
from ensemble_zoo.models.method_registry import registered_methods

# The methods registered as applicable to a keras-hub ViT
# (`Method.keras_hub_kwargs`), with their image task and tiny arguments.
METHODS = {
    name: (method.tasks[0], method.keras_hub_kwargs)
    for name, method in registered_methods().items()
    if method.keras_hub_kwargs is not None
}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_classifier_builds_a_new_backbone_and_leaves_the_source_alone(method):
    cls, kwargs = METHODS[method]
    source = tiny_vit().backbone
    before = [to_np(v) for v in source.weights]
    sublayers = [id(layer) for layer in source._flatten_layers()]
    model = cls(source, num_classes=3, **kwargs)

    # The source: same class, same sublayers, same values.
    assert type(source) is keras_hub.models.ViTBackbone
    assert [id(layer) for layer in source._flatten_layers()] == sublayers
    for value, variable in zip(before, source.weights, strict=True):
        np.testing.assert_array_equal(to_np(variable), value)

    # The model's backbone: a new object of the method's class (a
    # ViTBackbone subclass) whose base variables hold the source's values
    # (BatchEnsemble moves the projections' into its own layers).
    backbone = model.backbone
    assert backbone is not source
    assert isinstance(backbone, MethodBackbone)
    assert isinstance(backbone, cls.backbone_cls) and isinstance(
        backbone, keras_hub.models.ViTBackbone
    )
    values = {v.path: to_np(v) for v in backbone.weights}
    kept = [(v.path, value) for v, value in zip(source.weights, before) if v.path in values]
    assert len(kept) >= (len(before) // 3 if method == "batch_ensemble" else len(before))
    for path, value in kept:
        np.testing.assert_array_equal(values[path], value)

    # A second task on the method backbone shares it (keras-hub tasks do).
    second = cls(backbone, num_classes=4, **kwargs)
    assert second.backbone is backbone


def test_from_backbone_refuses_other_classes_and_keeps_dtype():
    source = tiny_vit().backbone
    with pytest.raises(TypeError, match="takes a ViTBackbone"):
        ez.models.LoRAEnsembleViTBackbone.from_backbone(
            keras.layers.Dense(2),
            num_members=2,
            rank=1,
            targets=["query"],
            lora_alpha=None,
            a_gain=1.0,
            seed=0,
        )
    config = {**source.get_config(), "dtype": "bfloat16"}
    half = keras_hub.models.ViTBackbone.from_config(config)
    lora = ez.models.LoRAEnsembleViTBackbone.from_backbone(
        half, num_members=2, rank=1, targets=["query"], lora_alpha=None, a_gain=1.0, seed=0
    )
    # Adapters follow the backbone's dtype (they were float32 before).
    layers = [
        layer for layer in lora._flatten_layers() if not isinstance(layer, keras.layers.InputLayer)
    ]
    assert {layer.dtype_policy.name for layer in layers} == {"bfloat16"}
    assert {v.dtype for v in lora.weights} == {"bfloat16"}

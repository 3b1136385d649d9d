"""The hand-written ViT backbones take keras-hub `ViTBackbone`'s arguments
by keyword, with its defaults, checked in one place."""

import inspect

import keras_hub
import pytest
from conftest import BACKEND

from ensemble_zoo.models import HydraBackbone
from ensemble_zoo.models import PackedEnsembleBackbone
from ensemble_zoo.models import ViTMoEBackbone
from ensemble_zoo.models.vit_geometry import VIT_ARGUMENTS
from ensemble_zoo.models.vit_geometry import VIT_DEFAULTS

pytestmark = pytest.mark.skipif(BACKEND != "jax", reason="argument checks: backend-independent")

VIT = dict(image_shape=(8, 8, 1), patch_size=2, num_layers=2, num_heads=2, hidden_dim=8, mlp_dim=8)
BACKBONES = [
    (HydraBackbone, {"num_members": 2}),
    (PackedEnsembleBackbone, {"num_members": 2}),
    (ViTMoEBackbone, {"num_experts": 2}),
]


def test_vit_arguments_and_defaults_are_keras_hubs():
    parameters = inspect.signature(keras_hub.models.ViTBackbone).parameters
    assert set(VIT_ARGUMENTS) <= set(parameters)
    defaults = {
        name: parameters[name].default
        for name in VIT_ARGUMENTS
        if parameters[name].default is not inspect.Parameter.empty
    }
    assert defaults == VIT_DEFAULTS


@pytest.mark.parametrize("cls, own", BACKBONES, ids=lambda x: getattr(x, "__name__", ""))
def test_bad_vit_arguments_are_named(cls, own):
    with pytest.raises(TypeError, match=r"missing the ViT argument\(s\) \['mlp_dim'\]"):
        cls(**own, **{k: v for k, v in VIT.items() if k != "mlp_dim"})
    # Keras' functional models would drop a misspelt keyword silently.
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['dropout_rat'\]"):
        cls(**own, **VIT, dropout_rat=0.1)
    with pytest.raises(TypeError, match="positional argument"):
        cls(*VIT.values(), *own.values())
    with pytest.raises(ValueError, match="must be divisible by `patch_size`"):
        cls(**own, **{**VIT, "patch_size": 3})
    backbone = cls(**own, **VIT, dropout_rate=0.25, name="vit")
    assert backbone.name == "vit"
    config = backbone.get_config()
    assert config["dropout_rate"] == 0.25 and config["layer_norm_epsilon"] == 1e-6

"""The method registry: every method, task and preset is registered once,
so that the tables built from it (harness, export, benchmarks, import
graph) leave nothing out. Pure Python: runs under one backend only."""

import pathlib

import keras_hub
import pytest
from conftest import BACKEND

import ensemble_zoo as ez
from ensemble_zoo.models.method_registry import BenchmarkCase
from ensemble_zoo.models.method_registry import HarnessCase
from ensemble_zoo.models.method_registry import Method
from ensemble_zoo.models.method_registry import register_method
from ensemble_zoo.models.method_registry import registered_methods
from ensemble_zoo.presets.registry import BASE_PRESETS

pytestmark = pytest.mark.skipif(BACKEND != "jax", reason="backend-independent")

MODELS = pathlib.Path(ez.models.__file__).parent
# Folders under `models/` that are not methods: the old causal-LM path (an
# alias package of `lora_ensemble.causal_lm`).
NOT_METHODS = {"causal_lm"}


def test_every_method_package_is_registered():
    packages = {
        path.parent.name
        for path in MODELS.glob("*/__init__.py")
        if path.parent.name not in NOT_METHODS
    }
    assert packages == set(registered_methods())


def test_every_preset_has_one_owner():
    owners = {}
    for method in registered_methods().values():
        for preset in method.presets:
            owners.setdefault(preset, []).append(method.name)
    for preset in BASE_PRESETS:
        owners.setdefault(preset, []).append("base")
    assert sorted(owners) == ez.presets.list_presets()
    assert all(len(names) == 1 for names in owners.values()), owners


def test_every_zoo_task_is_a_registered_task_or_a_family_of_one():
    """A task class exported by `ensemble_zoo.models` and not registered
    would miss the shared tests."""
    tasks = {task for method in registered_methods().values() for task in method.tasks}
    for name in dir(ez.models):
        value = getattr(ez.models, name)
        if isinstance(value, type) and issubclass(value, keras_hub.models.Task):
            if value is ez.models.EnsembleClassifier:
                continue
            assert value in tasks or any(issubclass(value, t) for t in tasks), name


def test_harness_cases_name_their_method_task_and_presets():
    for method in registered_methods().values():
        for case in method.harness:
            assert case.task_cls in method.tasks
            assert issubclass(case.task_cls, ez.models.EnsembleClassifier)
            assert issubclass(case.backbone_cls, keras_hub.models.Backbone)
            assert case.preset is None or case.preset in method.presets
        if method.export:
            assert method.export[1] in method.presets


def test_bad_registrations_are_named_errors():
    task = ez.models.MasksemblesImageClassifier
    with pytest.raises(ValueError, match="`name`"):
        Method(name="not a name", tasks=(task,))
    with pytest.raises(TypeError, match="`tasks`"):
        Method(name="x", tasks=())
    with pytest.raises(TypeError, match="`benchmark`"):
        Method(name="x", tasks=(task,), benchmark="Masksembles 3")
    with pytest.raises(ValueError, match="`layout`"):
        Method(
            name="x", tasks=(task,), harness=(HarnessCase(task, {}, num_members=2, layout="rows"),)
        )
    with pytest.raises(ValueError, match="`num_members`"):
        HarnessCase(task, {"num_heads": 2})
    with pytest.raises(ValueError, match="`export`"):
        Method(name="x", tasks=(task,), export="onnx")
    with pytest.raises(TypeError, match="Method"):
        register_method("masksembles")
    with pytest.raises(ValueError, match="already registered"):
        register_method(Method(name="masksembles", tasks=(ez.models.MIMOImageClassifier,)))
    # Registering the same tasks again (a reloaded package) is allowed.
    again = registered_methods()["masksembles"]
    assert register_method(again) is again
    assert isinstance(again.benchmark, BenchmarkCase)


def test_registration_defaults_are_read_from_the_method():
    """A method's presets default to its `<method>_presets.py`; a harness
    case's members and modality to its arguments and task; its layout is
    named."""
    assert Method(name="mimo", tasks=(ez.models.MIMOImageClassifier,)).presets == (
        "mimo_vit_tiny_digits",
        "mimo_vit_b16_3",
    )
    packed = HarnessCase(
        ez.models.PackedEnsembleImageClassifier, {"num_members": 3}, layout="member_axis"
    )
    assert (packed.num_members, packed.layout, packed.modality) == (3, "member_axis", "image")
    # The layout is data: a case that names none is refused.
    unnamed = HarnessCase(ez.models.PackedEnsembleImageClassifier, {"num_members": 3})
    with pytest.raises(ValueError, match="`layout` must be one of"):
        Method(name="packed_ensemble", tasks=(unnamed.task_cls,), harness=(unnamed,))
    e3 = HarnessCase(ez.models.ViTMoEImageClassifier, {"ensemble_size": 2})
    assert e3.num_members == 2
    assert HarnessCase(ez.models.HydraTextClassifier, {"num_members": 2}).modality == "text"

"""The member-tiled classifiers' constructors: the method's arguments in
their old positions, the task's arguments (`preprocessor`, `pooling`,
`dropout`, `member_batching`) by keyword, each task kind's dropout
default."""

import json

import keras
import keras_hub
import pytest
import zoo_testing
from conftest import BACKEND

from ensemble_zoo.models import BatchEnsembleImageClassifier
from ensemble_zoo.models import BatchEnsembleTextClassifier
from ensemble_zoo.models import LoRAEnsembleImageClassifier
from ensemble_zoo.models import LoRAEnsembleTextClassifier
from ensemble_zoo.models import MasksemblesImageClassifier

pytestmark = pytest.mark.skipif(
    BACKEND != "jax", reason="constructor arguments: backend-independent"
)

# (class, the method's positional arguments after `num_classes`, the next
# argument of the old signature, which must now be passed by keyword).
CASES = [
    (LoRAEnsembleImageClassifier, (2, 1, ["query"], None, 1.0), "gap"),
    (LoRAEnsembleTextClassifier, (2, 1, ["query"], None, 1.0), 0.2),
    (BatchEnsembleImageClassifier, (2,), "gap"),
    (BatchEnsembleTextClassifier, (2,), 0.2),
    (MasksemblesImageClassifier, (2, 2.0), "gap"),
]


@pytest.mark.parametrize("cls, method, old_next", CASES, ids=lambda x: getattr(x, "__name__", ""))
def test_method_arguments_keep_their_positions(cls, method, old_next):
    text = "Text" in cls.__name__
    keras_hub_model = zoo_testing.tiny_bert() if text else zoo_testing.tiny_vit()
    backbone = keras_hub_model.backbone
    model = cls(backbone, 3, *method, seed=0)
    assert model.num_members == 2 and model.num_classes == 3
    # keras-hub's defaults: BertTextClassifier's dropout, ViTImageClassifier's.
    assert model.dropout == (0.1 if text else 0.0)
    for name, value in zip(cls.backbone_cls.method_keys, method):
        assert model.backbone.method_config[name] == value
    # An old positional call past the method's arguments fails loudly.
    with pytest.raises(TypeError, match="positional argument"):
        cls(backbone, 3, *method, old_next)
    task = {"dropout": 0.25} if text else {"dropout": 0.25, "pooling": "gap"}
    model = cls(backbone, 3, *method, member_batching="sequential", **task)
    assert model.dropout == 0.25 and model.member_batching == "sequential"
    assert model.pooling == (None if text else "gap")


class _TaggedLoRAEnsemble(LoRAEnsembleImageClassifier):
    """A user's subclass that passes the task's arguments on. (No
    `backbone_cls`: keras-hub's loaders, which pick the task subclass of a
    backbone class, keep finding `LoRAEnsembleImageClassifier` for the
    other tests' presets.)"""

    backbone_cls = None

    def __init__(self, *args, tag="x", **kwargs):
        super().__init__(*args, **kwargs)
        self.tag = tag

    def get_config(self):
        return {**super().get_config(), "tag": self.tag}


def test_a_preset_without_preprocessor_entry_takes_one(tmp_path):
    # A subclass's constructor passes `preprocessor` on through `**kwargs`:
    # the loader finds it up the MRO, not in the subclass's own signature.
    keras.saving.register_keras_serializable(package="tests")(_TaggedLoRAEnsemble)
    model = _TaggedLoRAEnsemble(zoo_testing.tiny_vit().backbone, 3, 2, 1, seed=0, tag="y")
    model.save_to_preset(str(tmp_path))
    task_path = tmp_path / "task.json"
    task = json.loads(task_path.read_text())
    del task["config"]["preprocessor"]  # as a config written without one
    task_path.write_text(json.dumps(task))
    converter = keras_hub.layers.ViTImageConverter(image_size=(8, 8), scale=1 / 255.0)
    preprocessor = keras_hub.models.ViTImageClassifierPreprocessor(image_converter=converter)
    loaded = _TaggedLoRAEnsemble.from_preset(str(tmp_path), preprocessor=preprocessor)
    assert loaded.preprocessor is preprocessor and loaded.tag == "y"

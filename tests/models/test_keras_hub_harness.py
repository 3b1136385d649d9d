"""keras-hub's own conformance harness (`run_backbone_test`,
`run_task_test`, `run_model_saving_test`, `run_preset_test`, and through
`run_backbone_test` the precision and quantization checks) on the zoo's
functional backbones and tasks, with tiny configs, on every backend."""

import keras
import keras_hub
import numpy as np
from absl.testing import parameterized

from ensemble_zoo.models import BatchEnsembleBertBackbone
from ensemble_zoo.models import BatchEnsembleImageClassifier
from ensemble_zoo.models import BatchEnsembleTextClassifier
from ensemble_zoo.models import BatchEnsembleViTBackbone
from ensemble_zoo.models import HydraBackbone
from ensemble_zoo.models import HydraImageClassifier
from ensemble_zoo.models import HydraTextBackbone
from ensemble_zoo.models import HydraTextClassifier
from ensemble_zoo.models import LoRAEnsembleBertBackbone
from ensemble_zoo.models import LoRAEnsembleImageClassifier
from ensemble_zoo.models import LoRAEnsembleTextClassifier
from ensemble_zoo.models import LoRAEnsembleViTBackbone
from ensemble_zoo.models import MasksemblesImageClassifier
from ensemble_zoo.models import MasksemblesViTBackbone
from ensemble_zoo.models import MIMOImageClassifier
from ensemble_zoo.models import MIMOViTBackbone
from ensemble_zoo.models import PackedEnsembleBackbone
from ensemble_zoo.models import PackedEnsembleImageClassifier
from ensemble_zoo.models import ViTMoEBackbone
from ensemble_zoo.models import ViTMoEImageClassifier
from keras_hub_testcase import ZooTestCase

VIT = dict(image_shape=(8, 8, 1), patch_size=4, num_layers=2, hidden_dim=8, mlp_dim=16)
TOKENS = 5  # 2 x 2 patches + the class token

# (backbone class, its arguments, task class, members, member width,
#  a shipped preset of the task and its number of members). Backbones of
#  methods applied to a keras-hub ViT take member-major batches
#  (members * batch) and return the ViT's (members * batch, tokens, dim);
#  MIMO's takes the members' images stacked on channels.
MODELS = {
    "hydra": (
        HydraBackbone,
        dict(VIT, num_heads=2, num_members=3, member_num_heads=[[2, 1, 1], [1, 2, 2]]),
        HydraImageClassifier, 3, 8, ("hydra_circuit_vit_tiny_digits", 3),
    ),
    "packed": (
        PackedEnsembleBackbone,
        dict(VIT, num_heads=2, num_members=2, alpha=2),
        PackedEnsembleImageClassifier, 2, 8, ("packed_ensemble_vit_tiny_digits", 3),
    ),
    "e3": (
        ViTMoEBackbone,
        dict(VIT, num_heads=2, num_experts=4, num_selected_experts=1, moe_layers=[1],
             ensemble_size=2, seed=0),
        ViTMoEImageClassifier, 2, 8, ("e3_vit_tiny_digits", 2),
    ),
    "lora": (
        LoRAEnsembleViTBackbone,
        dict(VIT, num_heads=2, num_members=2, rank=2, targets=["query", "value"],
             lora_alpha=None, a_gain=1.0, seed=0),
        LoRAEnsembleImageClassifier, 2, 8, ("lora_ensemble_vit_tiny_digits", 8),
    ),
    "batch_ensemble": (
        BatchEnsembleViTBackbone,
        dict(VIT, num_heads=2, num_members=2, fast_weight_initializer="normal",
             fast_weight_stddev=0.5, seed=0),
        BatchEnsembleImageClassifier, 2, 8, ("batch_ensemble_vit_tiny_digits", 4),
    ),
    "masksembles": (
        MasksemblesViTBackbone,
        dict(VIT, num_heads=2, num_members=2, scale=2.0, seed=0),
        MasksemblesImageClassifier, 2, 8, ("masksembles_vit_tiny_digits", 4),
    ),
    "mimo": (
        MIMOViTBackbone,
        dict(VIT, image_shape=(8, 8, 2), num_heads=2, num_members=2),
        MIMOImageClassifier, 2, 8, ("mimo_vit_tiny_digits", 3),
    ),
}
MEMBER_MAJOR = ("lora", "batch_ensemble", "masksembles")


def _preprocessor():
    converter = keras_hub.layers.ViTImageConverter(image_size=(8, 8), scale=1 / 16.0)
    return keras_hub.models.ViTImageClassifierPreprocessor(image_converter=converter)


CASES = [(name, name) for name in sorted(MODELS)]


class TestKerasHubHarness(ZooTestCase):
    @parameterized.named_parameters(*CASES)
    def test_backbone(self, name):
        backbone_cls, kwargs, _, members, width, _ = MODELS[name]
        if name in MEMBER_MAJOR:
            images, shape = (members * 2, 8, 8, 1), (members * 2, TOKENS, width)
        elif name == "mimo":
            images, shape = (2, 8, 8, members), (2, TOKENS, width)
        else:
            images, shape = (2, 8, 8, 1), (2, members, TOKENS, width)
        self.run_backbone_test(
            cls=backbone_cls,
            init_kwargs=kwargs,
            input_data=keras.ops.ones(images),
            expected_output_shape=shape,
        )

    @parameterized.named_parameters(*CASES)
    def test_task(self, name):
        backbone_cls, kwargs, task_cls, members, _, _ = MODELS[name]
        images = np.arange(2 * 64, dtype="float32").reshape(2, 8, 8, 1) % 17
        self.run_task_test(
            cls=task_cls,
            init_kwargs=dict(backbone=backbone_cls(**kwargs), num_classes=4,
                             preprocessor=_preprocessor()),
            train_data=(images, np.array([0, 3])),
            expected_output_shape=(2, members, 4),
        )

    @parameterized.named_parameters(*CASES)
    def test_saving(self, name):
        backbone_cls, kwargs, task_cls, _, _, _ = MODELS[name]
        self.run_model_saving_test(
            cls=task_cls,
            init_kwargs=dict(backbone=backbone_cls(**kwargs), num_classes=4),
            input_data=keras.ops.ones((2, 8, 8, 1)),
        )

    @parameterized.named_parameters(*CASES)
    def test_preset(self, name):
        _, _, task_cls, _, _, (preset, members) = MODELS[name]
        self.run_preset_test(
            cls=task_cls,
            preset=preset,
            input_data=keras.ops.ones((2, 8, 8, 1)),
            expected_output_shape=(2, members, 8),
        )


def _policies(model):
    """{layer class: set of dtype policy names} below `model`."""
    seen = {}
    for layer in model._flatten_layers(include_self=False):
        if not isinstance(layer, keras.layers.InputLayer):
            seen.setdefault(type(layer).__name__, set()).add(layer.dtype_policy.name)
    return seen


def test_keras_hub_loaders_take_task_arguments_and_dtype():
    """`compile=False` was an unrecognized keyword, and keras-hub's loader
    `dtype=` stopped at the backbone's top level (inner layers float32)."""
    import ensemble_zoo as ez

    path = ez.presets.get_preset_path("e3_vit_tiny_digits")
    task = keras_hub.models.ImageClassifier.from_preset(path, compile=False)
    assert type(task) is ViTMoEImageClassifier and not task.compiled
    backbone = keras_hub.models.Backbone.from_preset(path, dtype="mixed_bfloat16")
    policies = _policies(backbone)
    assert policies.pop("TopKRouter") == {"float32"}  # routers stay float32
    assert set().union(*policies.values()) == {"mixed_bfloat16"}
    # A legal dtype request loads (it was "Damaged preset ... expects void16").
    hydra = ez.models.EnsembleClassifier.from_preset(
        "hydra_circuit_vit_tiny_digits", dtype="bfloat16", preprocessor=None
    )
    assert set().union(*_policies(hydra.backbone).values()) == {"bfloat16"}
    x, _ = ez.datasets.load_arrays("digits", "test")
    reference = ez.models.EnsembleClassifier.from_preset(
        "hydra_circuit_vit_tiny_digits", preprocessor=None
    ).predict(x, verbose=0)
    agree = np.mean(hydra.predict(x, verbose=0).argmax(-1) == reference.argmax(-1))
    assert agree >= 0.97


# === Text: keras-hub BERT inputs (dicts of int (batch, tokens) tensors) ===

BERT = dict(vocabulary_size=12, num_layers=1, num_heads=2, hidden_dim=8,
            intermediate_dim=16, max_sequence_length=6)
VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "quick", "brown", "fox"]

# (backbone class, its arguments, task class, members, member-major batch)
TEXT_MODELS = {
    "hydra_text": (
        HydraTextBackbone,
        dict(BERT, num_members=2, member_num_heads=[[2, 1]]),
        HydraTextClassifier, 2, False,
    ),
    "lora_text": (
        LoRAEnsembleBertBackbone,
        dict(BERT, num_members=2, rank=1, targets=["query", "value"], lora_alpha=None,
             a_gain=1.0, seed=0),
        LoRAEnsembleTextClassifier, 2, True,
    ),
    "batch_ensemble_text": (
        BatchEnsembleBertBackbone,
        dict(BERT, num_members=2, fast_weight_initializer="normal",
             fast_weight_stddev=0.5, seed=0),
        BatchEnsembleTextClassifier, 2, True,
    ),
}
TEXT_CASES = [(name, name) for name in sorted(TEXT_MODELS)]


def _text_inputs(batch):
    return {
        "token_ids": np.full((batch, 6), 5, "int32"),
        "segment_ids": np.zeros((batch, 6), "int32"),
        "padding_mask": np.ones((batch, 6), "int32"),
    }


class TestKerasHubHarnessText(ZooTestCase):
    @parameterized.named_parameters(*TEXT_CASES)
    def test_backbone(self, name):
        backbone_cls, kwargs, _, members, member_major = TEXT_MODELS[name]
        if member_major:
            batch = members * 2
            shape = {"sequence_output": (batch, 6, 8), "pooled_output": (batch, 8)}
        else:
            batch = 2
            shape = {"sequence_output": (2, members, 6, 8), "pooled_output": (2, members, 8)}
        self.run_backbone_test(
            cls=backbone_cls, init_kwargs=kwargs, input_data=_text_inputs(batch),
            expected_output_shape=shape,
        )

    @parameterized.named_parameters(*TEXT_CASES)
    def test_task(self, name):
        backbone_cls, kwargs, task_cls, members, _ = TEXT_MODELS[name]
        tokenizer = keras_hub.models.BertTokenizer(vocabulary=VOCABULARY)
        preprocessor = keras_hub.models.BertTextClassifierPreprocessor(
            tokenizer, sequence_length=6
        )
        self.run_task_test(
            cls=task_cls,
            init_kwargs=dict(backbone=backbone_cls(**kwargs), num_classes=3,
                             preprocessor=preprocessor),
            train_data=(["the quick brown fox.", "the slow brown fox."], np.array([0, 2])),
            expected_output_shape=(2, members, 3),
        )

    @parameterized.named_parameters(*TEXT_CASES)
    def test_saving(self, name):
        backbone_cls, kwargs, task_cls, _, _ = TEXT_MODELS[name]
        self.run_model_saving_test(
            cls=task_cls,
            init_kwargs=dict(backbone=backbone_cls(**kwargs), num_classes=3),
            input_data=_text_inputs(2),
        )


class TestKerasHubHarnessLossPrediction(ZooTestCase):
    """Loss prediction (paper 003) is one model, not an ensemble: its task
    returns `{"logits": (batch, classes), "uncertainty": (batch,)}`."""

    def test_backbone_task_saving_and_preset(self):
        from ensemble_zoo.models import LossPredictionImageClassifier
        from ensemble_zoo.models import LossPredictionViTBackbone

        kwargs = dict(VIT, num_heads=2)
        self.run_backbone_test(
            cls=LossPredictionViTBackbone, init_kwargs=kwargs,
            input_data=keras.ops.ones((2, 8, 8, 1)), expected_output_shape=(2, TOKENS, 8),
            run_mixed_precision_check=False,  # a keras-hub ViT: keras-hub tests it
        )
        images = np.arange(2 * 64, dtype="float32").reshape(2, 8, 8, 1) % 17
        task_kwargs = dict(
            backbone=LossPredictionViTBackbone(**kwargs), num_classes=4,
            head_hidden_units=(4,), freeze_backbone=True,
        )
        self.run_task_test(
            cls=LossPredictionImageClassifier,
            init_kwargs=dict(task_kwargs, preprocessor=_preprocessor()),
            train_data=(images, np.array([0, 3])),
            expected_output_shape={"logits": (2, 4), "uncertainty": (2,)},
        )
        self.run_model_saving_test(
            cls=LossPredictionImageClassifier, init_kwargs=task_kwargs,
            input_data=keras.ops.ones((2, 8, 8, 1)),
        )
        self.run_preset_test(
            cls=LossPredictionImageClassifier, preset="loss_prediction_vit_tiny_digits",
            input_data=keras.ops.ones((2, 8, 8, 1)),
            expected_output_shape={"logits": (2, 8), "uncertainty": (2,)},
        )

"""keras-hub's own conformance harness (`run_backbone_test`,
`run_task_test`, `run_model_saving_test`, `run_preset_test`, and through
`run_backbone_test` the precision and quantization checks) on the zoo's
functional backbones and tasks, with tiny configs.

Test budget: every check runs under one backend, JAX, TensorFlow or
PyTorch, picked per test by a stable hash of its name (or `HOME_BACKEND`; about a third of
the tests each, every model under all three). The harness checks configs,
saving, presets, dtype policies and Keras' loops, code that the backends
share; each model's own tests run its numbers, training and presets under
all three backends."""

import zlib

import keras
import keras_hub
import numpy as np
import pytest
from absl.testing import parameterized
from conftest import ALL_BACKENDS
from keras_hub_testcase import ZooTestCase

import ensemble_zoo as ez
from ensemble_zoo.models import ViTMoEImageClassifier
from ensemble_zoo.models.method_registry import registered_methods

#: Tests whose hashed backend was far the slowest (seconds there, and for
#: the wrapped tests that run elsewhere): the deep ensemble's run_task_test
#: compiled its members' train step under TensorFlow in 71 s, where the
#: MC dropout and sub-network ensembles take 14-15 s under JAX.
HOME_BACKEND = {"test_backbone_task_and_saving_deep_ensemble": "jax"}


@pytest.fixture(autouse=True)
def _under_one_backend(request):
    """Skips a test under the backends it is not assigned to (see the
    module docstring); tests already limited to one backend keep their
    own."""
    if request.node.get_closest_marker("skipif"):
        return
    home = HOME_BACKEND.get(request.node.name)
    if home is None:
        home = ALL_BACKENDS[zlib.crc32(request.node.name.encode()) % len(ALL_BACKENDS)]
    if keras.config.backend() != home:
        pytest.skip(f"runs under {home} (test budget)")


VIT = dict(image_shape=(8, 8, 1), patch_size=4, num_layers=2, hidden_dim=8, mlp_dim=16)
TOKENS = 5  # 2 x 2 patches + the class token

# The methods' registered harness cases (`HarnessCase`), by name: the
# method's for its image model, `<method>_text` for its text model.
_CASES = [case for method in registered_methods().values() for case in method.harness]
MODELS = {
    case.task_cls.__module__.split(".")[2]: case for case in _CASES if case.modality == "image"
}
TEXT_MODELS = {
    case.task_cls.__module__.split(".")[2] + "_text": case
    for case in _CASES
    if case.modality == "text"
}


def _backbone(case):
    base = VIT if case.modality == "image" else BERT
    return case.backbone_cls(**dict(base, **case.backbone_kwargs))


def _preprocessor():
    converter = keras_hub.layers.ViTImageConverter(image_size=(8, 8), scale=1 / 16.0)
    return keras_hub.models.ViTImageClassifierPreprocessor(image_converter=converter)


CASES = [(name, name) for name in sorted(MODELS)]


class TestKerasHubHarness(ZooTestCase):
    @parameterized.named_parameters(*CASES)
    def test_backbone(self, name):
        case = MODELS[name]
        members = case.num_members
        if case.layout == "member_major":
            images, shape = (members * 2, 8, 8, 1), (members * 2, TOKENS, 8)
        elif case.layout == "stacked_channels":
            images, shape = (2, 8, 8, members), (2, TOKENS, 8)
        else:
            images, shape = (2, 8, 8, 1), (2, members, TOKENS, 8)
        self.run_backbone_test(
            cls=case.backbone_cls,
            init_kwargs=dict(VIT, **case.backbone_kwargs),
            input_data=keras.ops.ones(images),
            expected_output_shape=shape,
        )

    @parameterized.named_parameters(*CASES)
    def test_task(self, name):
        case = MODELS[name]
        images = np.arange(2 * 64, dtype="float32").reshape(2, 8, 8, 1) % 17
        self.run_task_test(
            cls=case.task_cls,
            init_kwargs=dict(backbone=_backbone(case), num_classes=4, preprocessor=_preprocessor()),
            train_data=(images, np.array([0, 3])),
            expected_output_shape=(2, case.num_members, 4),
        )

    @parameterized.named_parameters(*CASES)
    def test_saving(self, name):
        case = MODELS[name]
        self.run_model_saving_test(
            cls=case.task_cls,
            init_kwargs=dict(backbone=_backbone(case), num_classes=4),
            input_data=keras.ops.ones((2, 8, 8, 1)),
        )

    @parameterized.named_parameters(*CASES)
    def test_preset(self, name):
        case = MODELS[name]
        self.run_preset_test(
            cls=case.task_cls,
            preset=case.preset,
            input_data=keras.ops.ones((2, 8, 8, 1)),
            expected_output_shape=(2, ez.presets.preset_metadata(case.preset)["num_members"], 8),
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

BERT = dict(
    vocabulary_size=12,
    num_layers=1,
    num_heads=2,
    hidden_dim=8,
    intermediate_dim=16,
    max_sequence_length=6,
)
VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "quick", "brown", "fox"]

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
        case = TEXT_MODELS[name]
        members = case.num_members
        if case.layout == "member_major":
            batch = members * 2
            shape = {"sequence_output": (batch, 6, 8), "pooled_output": (batch, 8)}
        else:
            batch = 2
            shape = {"sequence_output": (2, members, 6, 8), "pooled_output": (2, members, 8)}
        self.run_backbone_test(
            cls=case.backbone_cls,
            init_kwargs=dict(BERT, **case.backbone_kwargs),
            input_data=_text_inputs(batch),
            expected_output_shape=shape,
        )

    @parameterized.named_parameters(*TEXT_CASES)
    def test_task(self, name):
        case = TEXT_MODELS[name]
        tokenizer = keras_hub.models.BertTokenizer(vocabulary=VOCABULARY)
        preprocessor = keras_hub.models.BertTextClassifierPreprocessor(tokenizer, sequence_length=6)
        self.run_task_test(
            cls=case.task_cls,
            init_kwargs=dict(backbone=_backbone(case), num_classes=3, preprocessor=preprocessor),
            train_data=(["the quick brown fox.", "the slow brown fox."], np.array([0, 2])),
            expected_output_shape=(2, case.num_members, 3),
        )

    @parameterized.named_parameters(*TEXT_CASES)
    def test_saving(self, name):
        case = TEXT_MODELS[name]
        self.run_model_saving_test(
            cls=case.task_cls,
            init_kwargs=dict(backbone=_backbone(case), num_classes=3),
            input_data=_text_inputs(2),
        )


class TestKerasHubHarnessLossPrediction(ZooTestCase):
    """Loss prediction ("Pretrained Visual Uncertainties") is one model, not
    an ensemble: its task returns
    `{"logits": (batch, classes), "uncertainty": (batch,)}`."""

    def test_backbone_task_saving_and_preset(self):
        from ensemble_zoo.models import LossPredictionImageClassifier
        from ensemble_zoo.models import LossPredictionViTBackbone

        kwargs = dict(VIT, num_heads=2)
        self.run_backbone_test(
            cls=LossPredictionViTBackbone,
            init_kwargs=kwargs,
            input_data=keras.ops.ones((2, 8, 8, 1)),
            expected_output_shape=(2, TOKENS, 8),
            run_mixed_precision_check=False,  # a keras-hub ViT: keras-hub tests it
        )
        images = np.arange(2 * 64, dtype="float32").reshape(2, 8, 8, 1) % 17
        task_kwargs = dict(
            backbone=LossPredictionViTBackbone(**kwargs),
            num_classes=4,
            head_hidden_units=(4,),
            freeze_backbone=True,
        )
        self.run_task_test(
            cls=LossPredictionImageClassifier,
            init_kwargs=dict(task_kwargs, preprocessor=_preprocessor()),
            train_data=(images, np.array([0, 3])),
            expected_output_shape={"logits": (2, 4), "uncertainty": (2,)},
        )
        self.run_model_saving_test(
            cls=LossPredictionImageClassifier,
            init_kwargs=task_kwargs,
            input_data=keras.ops.ones((2, 8, 8, 1)),
        )
        self.run_preset_test(
            cls=LossPredictionImageClassifier,
            preset="loss_prediction_vit_tiny_digits",
            input_data=keras.ops.ones((2, 8, 8, 1)),
            expected_output_shape={"logits": (2, 8), "uncertainty": (2,)},
        )


# === Model-wrapping ensembles: backbones built from whole Keras models ===


def _vit_classifier(seed, pooling="token", dropout=0.0):
    keras.utils.set_random_seed(seed)
    backbone = keras_hub.models.ViTBackbone(**dict(VIT, num_heads=2, dropout_rate=dropout))
    return keras_hub.models.ViTImageClassifier(
        backbone=backbone, num_classes=4, pooling=pooling, dropout=dropout
    )


def _wrapped_models(name):
    """(backbone class, its arguments, task class, task arguments beside
    the backbone, backbone input, backbone output shape, task members,
    shipped preset and its members)."""
    from ensemble_zoo.models import BatchEnsembleClassifier
    from ensemble_zoo.models import BatchEnsembleModelBackbone
    from ensemble_zoo.models import DeepEnsembleBackbone
    from ensemble_zoo.models import DeepEnsembleClassifier
    from ensemble_zoo.models import HydraClassifier
    from ensemble_zoo.models import HydraModelBackbone
    from ensemble_zoo.models import LoRAEnsembleClassifier
    from ensemble_zoo.models import LoRAEnsembleModelBackbone
    from ensemble_zoo.models import MasksemblesClassifier
    from ensemble_zoo.models import MasksemblesModelBackbone
    from ensemble_zoo.models import MCDropoutBackbone
    from ensemble_zoo.models import MCDropoutClassifier
    from ensemble_zoo.models import SubnetworkEnsembleBackbone
    from ensemble_zoo.models import SubnetworkEnsembleClassifier
    from ensemble_zoo.models import TileEnsembleBackbone
    from ensemble_zoo.models import TileEnsembleClassifier

    images = keras.ops.ones((2, 8, 8, 1))
    if name == "deep_ensemble":
        return (
            DeepEnsembleBackbone,
            dict(members=[_vit_classifier(0), _vit_classifier(1)]),
            DeepEnsembleClassifier,
            {},
            images,
            (2, 2, 4),
            2,
            ("deep_ensemble_vit_tiny_digits", 3),
        )
    if name == "mc_dropout":
        # Rate 0: the harness compares two calls, and MC dropout's samples
        # differ from call to call (tests/models/test_mc_dropout_classifier.py
        # checks the sampling).
        return (
            MCDropoutBackbone,
            dict(model=_vit_classifier(0, dropout=0.1), rate=0.0, seed=0),
            MCDropoutClassifier,
            dict(num_members=3),
            images,
            (2, 4),
            3,
            ("mc_dropout_vit_tiny_digits", 8),
        )
    if name == "subnetwork":
        return (
            SubnetworkEnsembleBackbone,
            dict(model=_vit_classifier(0), num_members=2, seed=0),
            SubnetworkEnsembleClassifier,
            {},
            keras.ops.ones((4, 8, 8, 1)),
            (4, 4),
            2,
            ("subnetwork_vit_tiny_digits", 10),
        )
    # The member-row methods on a whole keras-hub classifier (no preset).
    member_rows = {
        "lora_ensemble": (LoRAEnsembleModelBackbone, LoRAEnsembleClassifier, dict(rank=2)),
        "batch_ensemble": (BatchEnsembleModelBackbone, BatchEnsembleClassifier, {}),
        "masksembles": (MasksemblesModelBackbone, MasksemblesClassifier, {}),
        # Two members, each without another head of the first layer.
        "hydra": (HydraModelBackbone, HydraClassifier, None),
    }
    if name in member_rows:
        backbone_cls, task_cls, method = member_rows[name]
        if method is None:
            method = dict(head_masks=[[[0, 1], [1, 1]], [[1, 0], [1, 1]]])
        else:
            method = dict(num_members=2, seed=0, **method)
        return (
            backbone_cls,
            dict(model=_vit_classifier(0), **method),
            task_cls,
            {},
            keras.ops.ones((4, 8, 8, 1)),
            (4, 4),
            2,
            None,
        )
    vit = _vit_classifier(0, pooling="gap")
    return (
        TileEnsembleBackbone,
        dict(feature_model=vit.backbone, head=vit.output_dense),
        TileEnsembleClassifier,
        dict(grid_size=2, token_grid=[2, 2], class_token=True),
        images,
        (2, TOKENS, 8),
        4,
        ("tile_vit_tiny_digits", 4),
    )


WRAPPED_CASES = [
    (n, n)
    for n in (
        "deep_ensemble",
        "mc_dropout",
        "subnetwork",
        "tile",
        "lora_ensemble",
        "batch_ensemble",
        "masksembles",
        "hydra",
    )
]
#: The wrapped-model methods that ship a preset.
PRESET_CASES = WRAPPED_CASES[:4]


class TestKerasHubHarnessWrapped(ZooTestCase):
    @parameterized.named_parameters(*WRAPPED_CASES)
    def test_backbone_task_and_saving(self, name):
        backbone_cls, kwargs, task_cls, task_kwargs, inputs, shape, members, _ = _wrapped_models(
            name
        )
        self.run_backbone_test(
            cls=backbone_cls,
            init_kwargs=kwargs,
            input_data=inputs,
            expected_output_shape=shape,
            # A subnetwork ensemble refuses quantization (its masks multiply
            # the float kernels; tests/presets/test_presets.py checks it).
            # keras-hub's check compares the config of a backbone built
            # with a quantization map with its copy's: a quantized
            # keras-hub ViTImageClassifier (what deep ensembles and MC
            # dropout wrap here) keeps its head's quantization out of its
            # config, so that config does not round-trip (keras-hub's task
            # config; test_wrapped_keras_hub_tasks_take_a_quantization_map
            # checks the rest).
            run_quantization_check=name == "tile",
        )
        # Fresh models: keras-hub's quantization check replaced the layers
        # in `kwargs` by quantized ones.
        kwargs = _wrapped_models(name)[1]
        images = np.arange(2 * 64, dtype="float32").reshape(2, 8, 8, 1) % 17
        self.run_task_test(
            cls=task_cls,
            init_kwargs=dict(
                task_kwargs, backbone=backbone_cls(**kwargs), preprocessor=_preprocessor()
            ),
            train_data=(images, np.array([0, 3])),
            expected_output_shape=(2, members, 4),
        )
        self.run_model_saving_test(
            cls=task_cls,
            init_kwargs=dict(task_kwargs, backbone=backbone_cls(**kwargs)),
            input_data=keras.ops.ones((2, 8, 8, 1)),
        )

    @parameterized.named_parameters(*PRESET_CASES)
    def test_preset(self, name):
        task_cls, (preset, members) = _wrapped_models(name)[2], _wrapped_models(name)[7]
        self.run_preset_test(
            cls=task_cls,
            preset=preset,
            input_data=keras.ops.ones((2, 8, 8, 1)),
            expected_output_shape=(2, members, 8),
        )


@pytest.mark.skipif(
    keras.config.backend() != "tensorflow",
    reason="once: the map is keyed by layer path, the same on every backend "
    "(and JAX takes 4x as long to quantize the copies)",
)
def test_wrapped_keras_hub_tasks_take_a_quantization_map():
    """keras-hub's quantization map (keyed by layer path) on a deep
    ensemble of keras-hub tasks: it failed with "predictions already exist
    in the DTypePolicyMap" (both members' heads had the path
    `predictions`); the members are now built in the scopes `members_i`,
    and every Dense / EinsumDense of both is quantized."""
    from ensemble_zoo.models import DeepEnsembleBackbone

    kinds = (keras.layers.Dense, keras.layers.EinsumDense)
    backbone = DeepEnsembleBackbone([_vit_classifier(0), _vit_classifier(1)])
    policy_map = keras.dtype_policies.DTypePolicyMap("float32")
    for layer in backbone._flatten_layers():
        if type(layer) in kinds:
            policy_map[layer.path] = keras.dtype_policies.get("int8_from_float32")
    assert len(policy_map) == 2 * 13  # 2 x (2 blocks x 6 + the head)
    quantized = DeepEnsembleBackbone([_vit_classifier(0), _vit_classifier(1)], dtype=policy_map)
    images = np.random.default_rng(0).random((3, 8, 8, 1)).astype("float32")
    modes = [l.quantization_mode for l in quantized._flatten_layers() if type(l) in kinds]
    assert modes == ["int8"] * 26
    reference = keras.ops.convert_to_numpy(backbone(images))
    logits = keras.ops.convert_to_numpy(quantized(images))
    assert np.abs(logits - reference).max() < 0.05 * np.abs(reference).max()


def _gemma_tokenizer():
    """A Gemma tokenizer from a SentencePiece model trained in memory."""
    import io

    import sentencepiece

    proto = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(["the quick brown fox", "the earth is round", "one plus two"]),
        model_writer=proto,
        model_type="WORD",
        vocab_size=14,
        hard_vocab_limit=False,
        pad_id=0,
        bos_id=1,
        eos_id=2,
        unk_id=3,
        pad_piece="<pad>",
        bos_piece="<bos>",
        eos_piece="<eos>",
        unk_piece="<unk>",
        minloglevel=2,
    )
    return keras_hub.models.GemmaTokenizer(proto=proto.getvalue())


class TestKerasHubHarnessCausalLM(ZooTestCase):
    """LoRA-Ensemble on a keras-hub causal LM. Its backbone takes
    batch-major rows (batch * members); the task returns member logits
    `(batch, members, tokens, vocabulary)` and trains on text through
    keras-hub's `GemmaCausalLMPreprocessor`."""

    def test_task_and_saving(self):
        from ensemble_zoo.models import LoRAEnsembleCausalLM
        from ensemble_zoo.models import LoRAEnsembleDecoderBackbone

        tokenizer = _gemma_tokenizer()
        vocabulary = tokenizer.vocabulary_size()
        backbone_kwargs = dict(
            vocabulary_size=vocabulary,
            num_layers=2,
            num_query_heads=4,
            num_key_value_heads=2,
            hidden_dim=16,
            intermediate_dim=32,
            head_dim=4,
        )
        method = dict(
            num_members=2, rank=2, targets=["query", "value"], lora_alpha=None, a_gain=1.0, seed=0
        )
        inputs = {
            "token_ids": np.full((4, 5), 5, "int32"),
            "padding_mask": np.ones((4, 5), "int32"),
        }
        # The harness builds several models on one keras-hub backbone: the
        # first puts the adapters on it, the others share them.
        self.run_backbone_test(
            cls=LoRAEnsembleDecoderBackbone,
            init_kwargs=dict(backbone=keras_hub.models.GemmaBackbone(**backbone_kwargs), **method),
            input_data=inputs,
            expected_output_shape=(4, 5, 16),
        )
        preprocessor = keras_hub.models.GemmaCausalLMPreprocessor(tokenizer, sequence_length=6)

        def backbone():
            return LoRAEnsembleDecoderBackbone(
                keras_hub.models.GemmaBackbone(**backbone_kwargs), **method
            )

        self.run_task_test(
            cls=LoRAEnsembleCausalLM,
            init_kwargs=dict(backbone=backbone(), preprocessor=preprocessor),
            train_data=(["the quick brown fox", "the earth is round"],),
            expected_output_shape=(2, 2, 6, vocabulary),
        )
        self.run_model_saving_test(
            cls=LoRAEnsembleCausalLM,
            init_kwargs=dict(backbone=backbone(), preprocessor=None),
            input_data={k: v[:2] for k, v in inputs.items()},
        )

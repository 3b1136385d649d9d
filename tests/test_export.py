"""Export of zoo classifiers in every format, each artifact run by its
own runtime and compared with `predict_uncertainty`.

One preset per format and backend (the full preset x format table is
`benchmarks/export_table.py`'s), one export per test: the checks of an
artifact (two batch sizes, the output names, every output's values) share
it.
"""

import importlib.util
import os

import keras
import numpy as np
import pytest
from conftest import BACKEND
from zoo_testing import this_run

import ensemble_zoo as ez
from ensemble_zoo.models.method_registry import registered_methods

KEYS = ("probabilities", "member_logits", "total", "aleatoric", "epistemic")
SUFFIX = {
    "tf_saved_model": "",
    "onnx": ".onnx",
    "litert": ".tflite",
    "torch": ".pt2",
    "openvino": ".xml",
}
# One preset per format, so that the formats cover several methods: each
# registers the format its preset is exported to (`Method.export`).
PRESET = dict(method.export for method in registered_methods().values() if method.export)
SUPPORTED = {
    "jax": ("tf_saved_model", "onnx", "openvino"),
    "tensorflow": ("tf_saved_model", "onnx", "litert", "openvino"),
    "torch": ("onnx", "litert", "torch", "openvino"),
}
# Test budget: each backend exports two of its formats a run (20 to 50 s
# each on 2 cores), rotating with the day.
FORMATS_PER_RUN = 2
# litert-torch is optional (not in the `export` extra): where it is missing,
# LiteRT under PyTorch is the ImportError that names it.
HAS_LITERT_TORCH = BACKEND == "torch" and importlib.util.find_spec("litert_torch") is not None


def digits(n=None, split="test"):
    x, _ = ez.datasets.load_arrays("digits", split)
    raw, _ = ez.datasets.load_arrays("digits", split, raw=True)
    return (x, raw) if n is None else (x[:n], raw[:n])


def assert_matches(got, expected, keys=KEYS):
    """Every output within 1e-5 (member logits, up to ~20 in size, within
    1e-5 + 1e-6 |logit|: float32 round-off of a different kernel order)."""
    assert sorted(got) == sorted(keys)
    for key in keys:
        assert got[key].shape == expected[key].shape, key
        rtol = 1e-6 if key in ("member_logits", "logits") else 0.0
        np.testing.assert_allclose(got[key], expected[key], atol=1e-5, rtol=rtol, err_msg=key)


def test_supported_formats_per_backend():
    for backend, formats in SUPPORTED.items():
        assert ez.export.supported_formats(backend) == formats
    assert ez.export.supported_formats() == SUPPORTED[BACKEND]


@pytest.mark.slow
@pytest.mark.parametrize("format", ez.export.FORMATS)
def test_artifact_matches_predict_uncertainty_in_its_runtime(tmp_path, format, caplog):
    if format not in SUPPORTED[BACKEND]:
        pytest.skip(f"{format} is not written under {BACKEND} (see the refusal test)")
    if format not in this_run(SUPPORTED[BACKEND], FORMATS_PER_RUN):
        pytest.skip(f"{format} is exported under {BACKEND} on another day (test budget)")
    model = ez.models.EnsembleClassifier.from_preset(PRESET[format])
    path = str(tmp_path / f"model{SUFFIX[format]}")
    if BACKEND == "torch" and format == "litert" and not HAS_LITERT_TORCH:
        with pytest.raises(ImportError, match=r"pip install ensemble-zoo\[litert-torch\]"):
            model.export(path, format=format)
        return
    x, raw = digits()
    expected = model.predict_uncertainty(raw, batch_size=512)
    assert model.export(path, format=format) == path  # verify=True: run once already
    artifact = ez.export.ExportedModel(path)
    assert artifact.format == format
    # No "unsaved custom gradients" warning per loaded function (JAX).
    assert "unsaved custom gradients" not in caplog.text
    if format not in ("tf_saved_model", "torch"):  # the formats that name inputs
        assert list(artifact._inputs) == ["images"]
    if BACKEND == "torch" and format == "litert":
        # litert-torch fixes the batch size to 1: image by image.
        for i in range(0, len(x), 24):
            assert_matches(artifact(x[i : i + 1]), {k: v[i : i + 1] for k, v in expected.items()})
        return
    assert_matches(artifact(x), expected)
    # A dynamic batch size: a second, odd size from the same artifact.
    assert_matches(artifact(x[:3]), {k: v[:3] for k, v in expected.items()})


@pytest.mark.slow
def test_include_preprocessing_serves_raw_images(tmp_path):
    """The image converter (rescale by 1/16 for the digits) in the graph:
    the artifact takes raw images as `predict` does; without it, raw
    images give another answer (the default takes scaled images)."""
    model = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits")
    x, raw = digits(64)
    expected = model.predict_uncertainty(raw)
    format = "onnx"
    with_converter = str(tmp_path / "raw.onnx")
    model.export(with_converter, format=format, include_preprocessing=True)
    got = ez.export.ExportedModel(with_converter)(raw)
    assert_matches(got, expected)
    unscaled = ez.export.ServingModel(model)(raw)["probabilities"]
    assert np.abs(got["probabilities"] - keras.ops.convert_to_numpy(unscaled)).max() > 1e-2


@pytest.mark.slow
@pytest.mark.skipif(
    BACKEND != "tensorflow", reason="one backend: int8 kernels are tested on all three"
)
def test_int8_artifact_agrees_with_float32(tmp_path):
    model = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits")
    x, raw = digits()
    float32 = model.predict_uncertainty(raw, batch_size=512)["probabilities"]
    model.quantize("int8")
    path = str(tmp_path / "int8.onnx")
    model.export(path, format="onnx")
    got = ez.export.ExportedModel(path)(x)["probabilities"]
    assert np.mean(got.argmax(-1) == float32.argmax(-1)) >= 0.99


@pytest.mark.slow
@pytest.mark.skipif(BACKEND != "torch", reason="one backend: the other outputs share the path")
def test_loss_prediction_exports_logits_probabilities_and_uncertainty(tmp_path):
    """OpenVINO, whose compiled model once named `uncertainty` by a
    graph-internal name (`ExportedModel` names ports as written)."""
    model = ez.presets.load_preset("loss_prediction_vit_tiny_digits")
    x, _ = digits(32)
    outputs = model(x, training=False)
    expected = {
        "logits": keras.ops.convert_to_numpy(outputs["logits"]),
        "probabilities": keras.ops.convert_to_numpy(keras.ops.softmax(outputs["logits"])),
        "uncertainty": keras.ops.convert_to_numpy(outputs["uncertainty"]),
    }
    path = str(tmp_path / "loss_prediction.xml")
    model.export(path, format="openvino")
    assert_matches(ez.export.ExportedModel(path)(x), expected, keys=tuple(expected))


UNSUPPORTED = [(b, f) for b in SUPPORTED for f in ez.export.FORMATS if f not in SUPPORTED[b]]


@pytest.mark.parametrize("format", ez.export.FORMATS)
def test_a_format_the_backend_cannot_write_is_a_clear_error(tmp_path, format):
    if format in SUPPORTED[BACKEND]:
        pytest.skip(f"{format} is written under {BACKEND}")
    model = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits")
    with pytest.raises(ValueError) as info:
        model.export(str(tmp_path / f"m{SUFFIX[format]}"), format=format)
    message = str(info.value)
    for part in ("EnsembleClassifier", f"format={format!r}", BACKEND, "save_to_preset"):
        assert part in message
    assert not os.listdir(tmp_path)


def test_bad_format_and_suffix_are_clear_errors(tmp_path):
    model = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits")
    with pytest.raises(ValueError, match="`format` must be one of"):
        model.export(str(tmp_path / "m"), format="tflite")
    with pytest.raises(ValueError, match=r"must end in '\.onnx'"):
        model.export(str(tmp_path / "m.tflite"), format="onnx")
    with pytest.raises(TypeError, match="include_preprocessing"):
        ez.export.ServingModel(model, include_preprocessing="yes")
    bare = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits", preprocessor=None)
    with pytest.raises(ValueError, match="no preprocessor"):
        ez.export.ServingModel(bare, include_preprocessing=True)
    with pytest.raises(ValueError, match="Cannot tell the export format"):
        ez.export.ExportedModel(str(tmp_path / "model.bin"))
    # A stochastic method: every format would serve another model.
    mc = ez.models.EnsembleClassifier.from_preset("mc_dropout_vit_tiny_digits")
    with pytest.raises(
        ValueError, match="MCDropoutClassifier to format='onnx': MC dropout draws new"
    ):
        mc.export(str(tmp_path / "mc.onnx"), format="onnx")
    assert not os.listdir(tmp_path)


def test_a_converter_failure_or_a_different_artifact_is_an_export_error(tmp_path, monkeypatch):
    """The converter's error is named with the method, format and backend;
    an artifact whose outputs differ from the model's is refused."""
    from ensemble_zoo.export import converters
    from ensemble_zoo.export import runtimes

    model = ez.models.EnsembleClassifier.from_preset("vit_tiny_digits")
    format = "onnx"
    path = str(tmp_path / "m.onnx")

    def failing(*args, **kwargs):
        raise NotImplementedError("no converter for `top_k`")

    monkeypatch.setitem(converters.WRITERS, format, failing)
    with pytest.raises(ez.export.ExportError) as info:
        model.export(path, format=format)
    for part in ("EnsembleClassifier", "format='onnx'", BACKEND, "no converter for `top_k`"):
        assert part in str(info.value)

    monkeypatch.setitem(converters.WRITERS, format, lambda *a, **k: None)

    class Wrong:
        def __init__(self, *args, **kwargs):
            pass

        def __call__(self, inputs):
            n = len(inputs)
            return {
                "probabilities": np.full((n, 8), 0.125, "float32"),
                "member_logits": np.zeros((n, 1, 8), "float32"),
                "total": np.zeros(n, "float32"),
                "aleatoric": np.zeros(n, "float32"),
                "epistemic": np.zeros(n, "float32"),
            }

    monkeypatch.setattr(runtimes, "ExportedModel", Wrong)
    with pytest.raises(ez.export.ExportError, match="computes 'probabilities' differently"):
        model.export(path, format=format)


def test_text_classifier_exports_its_three_named_inputs(tmp_path):
    """A text model's inputs (token ids, padding mask, segment ids) keep
    their names: feeding them by name gives the model's outputs (a swap
    would not; torch flattens dicts in insertion order), at the padded
    length that `torch.export` and LiteRT need, at two batch sizes (under
    JAX, jax2onnx 0.17 took the position embeddings' length for the batch
    size until the export replayed that broadcast in two steps)."""
    import zoo_testing

    from ensemble_zoo.models import HydraTextClassifier

    masks = np.array([[[1, 1, 1, 1], [0, 1, 1, 0]], [[1, 0, 0, 0], [1, 1, 1, 1]]], bool)
    hydra = HydraTextClassifier.from_keras_hub(zoo_testing.tiny_bert(0), masks)
    length = hydra.backbone.max_sequence_length
    rng = np.random.default_rng(0)
    x = {
        "token_ids": rng.integers(1, 20, (3, length)).astype("int32"),
        "padding_mask": (np.arange(length) < np.array([[length], [4], [2]])).astype("int32"),
        "segment_ids": (np.arange(length) >= length // 2).astype("int32")[None].repeat(3, 0),
    }
    # TensorFlow's ONNX path is the image models'; its LiteRT needs the
    # padded length and the inputs named in the SavedModel signature.
    format = "litert" if BACKEND == "tensorflow" else "onnx"
    path = str(tmp_path / f"text{SUFFIX[format]}")
    hydra.export(path, format=format)
    artifact = ez.export.ExportedModel(path)
    assert sorted(artifact._inputs) == sorted(x)
    expected = ez.ops.uncertainty_decomposition(hydra(x))
    got = artifact(x)
    np.testing.assert_allclose(
        got["member_logits"], keras.ops.convert_to_numpy(hydra(x)), atol=1e-5
    )
    np.testing.assert_allclose(
        got["epistemic"], keras.ops.convert_to_numpy(expected["epistemic"]), atol=1e-5
    )
    one = artifact({k: v[:1] for k, v in x.items()})
    np.testing.assert_allclose(one["member_logits"], got["member_logits"][:1], atol=1e-5)


@pytest.mark.skipif(BACKEND != "tensorflow", reason="one backend: the walk is backend-independent")
def test_a_classifier_over_a_shared_trunk_exports_with_dynamic_sizes(tmp_path):
    """`LoRAEnsembleClassifier(..., adapted_layers=...)` and a Hydra
    classifier run their lower blocks once per input row by a walk of their
    graph at call time; the
    SavedModel's signature (dynamic batch and length) traces that walk,
    and the artifact gives the model's outputs at two batch sizes
    (`export_model`'s check)."""
    from fixtures import tiny_text_classifiers

    roberta = tiny_text_classifiers.build_text_classifier("roberta", num_layers=2)
    model = ez.models.LoRAEnsembleClassifier.from_model(
        roberta, num_members=2, rank=2, seed=0, layers=[-1]
    )
    assert model.backbone.trunk_blocks == 1
    path = str(tmp_path / "trunk")
    assert model.export(path, format="tf_saved_model") == path
    # Hydra members that keep different heads in the last block alone walk
    # the same way.
    heads = [
        layer.num_heads for layer in ez.models.HydraClassifier.from_model(roberta).head_mask_layers
    ]
    masks = [
        [[1] * h for h in heads[:-1]] + [[int(i != m) for i in range(heads[-1])]] for m in (0, 1)
    ]
    hydra = ez.models.HydraClassifier.from_model(roberta, masks)
    path = str(tmp_path / "hydra")
    assert hydra.export(path, format="tf_saved_model") == path

"""`export_model`: what every zoo task's `export` calls."""

import keras
import numpy as np

from ensemble_zoo.export.converters import WRITERS
from ensemble_zoo.export.formats import STATIC_SIZES
from ensemble_zoo.export.formats import check_format
from ensemble_zoo.export.serving import ServingModel


class ExportError(ValueError):
    """An export that a converter refused, or whose artifact computes
    something else than the model; the message names the method, the
    format, the backend and the reason."""


def export_model(
    model,
    filepath,
    format="tf_saved_model",
    input_signature=None,
    include_preprocessing=False,
    verify=True,
    verbose=None,
    **kwargs,
):
    """Exports a zoo task with its serving outputs in any format.

    Args:
        model: a zoo task (`EnsembleClassifier` or
            `LossPredictionImageClassifier`).
        filepath: str, the directory (`"tf_saved_model"`) or the file
            (`.onnx`, `.tflite`, `.pt2`, `.xml` + `.bin`) to write.
        format: one of `ensemble_zoo.export.FORMATS`; the current backend
            writes `supported_formats()`.
        input_signature: optional list of `keras.InputSpec`; defaults to
            the model's inputs with a dynamic batch size (batch size 1 for
            LiteRT under PyTorch, whose converter fixes every size).
        include_preprocessing: bool. `True` puts the preprocessor's image
            converter (resize, rescale) into the graph, so the artifact
            takes raw images as `predict` does. Defaults to `False`, as in
            keras-hub: the artifact takes what calling the model takes.
        verify: bool. If `True` (default), the written artifact is run by
            its own runtime on two inputs of batch sizes 1 and 3 and must
            match the model within 1e-4 (within 5e-2 + 2% of the value for
            a model that computes in int8, bfloat16 or float16, which each
            converter rounds at slightly different points), else an `ExportError` is raised
            (the runtime must be
            installed).
        verbose: unused by most formats; accepted as `keras.Model.export`
            takes it.
        **kwargs: passed to the format's converter (`opset_version` for
            ONNX, LiteRT converter attributes, `torch.export` arguments).

    Returns:
        `filepath`.
    """
    method = type(model).__name__
    check_format(format, filepath, method)
    refusal = getattr(model, "_export_refusal", None)
    refusal = refusal(format) if refusal is not None else None
    if refusal:
        raise ValueError(f"Cannot export {method} to format={format!r}: {refusal}")
    serving = ServingModel(model, include_preprocessing=include_preprocessing)
    if input_signature is None:
        input_signature = model._export_input_signature(format)
        if (format, keras.config.backend()) in STATIC_SIZES:
            input_signature = [keras.tree.map_structure(_sizes_of_one, s) for s in input_signature]
    if not isinstance(input_signature, (list, tuple)) or not input_signature:
        raise TypeError(
            "`input_signature` must be a list with one `keras.InputSpec` per "
            f"model input; got {input_signature!r}."
        )
    input_signature = [
        _named(keras.tree.map_structure(_with_dtype, spec)) for spec in input_signature
    ]
    samples = _sample_inputs(input_signature)
    expected = [_to_numpy(serving(s)) for s in samples]
    backend = keras.config.backend()
    try:
        WRITERS[format](serving, str(filepath), input_signature, verbose=verbose, **kwargs)
    except (ImportError, ExportError):
        raise
    except Exception as error:
        hint = ""
        if "Constraints violated" in str(error):
            hint = (
                " The model's graph fixes a size that the signature leaves "
                "dynamic; pass a static `input_signature` (e.g. "
                "`[keras.InputSpec(shape=(64, 8, 8, 1))]`) to export one "
                "batch size."
            )
        raise ExportError(
            f"Cannot export {method} to format={format!r} under the "
            f"{backend} backend: the converter failed with "
            f"{type(error).__name__}: {_first_line(error)}{hint}"
        ) from error
    if verify:
        from ensemble_zoo.export.runtimes import ExportedModel

        # (absolute, relative): low precision rounds a logit of 10 to 1/16.
        atol, rtol = (5e-2, 2e-2) if _low_precision(model) else (1e-4, 0.0)
        artifact = None
        for sample, want in zip(samples, expected):
            try:
                artifact = artifact or ExportedModel(filepath, format=format)
                got = artifact(sample)
            except ImportError:
                raise
            except Exception as error:
                hint = ""
                if format == "litert" and len(samples) > 1:
                    hint = (
                        " LiteRT runs some graphs at one batch size only: "
                        "a static `input_signature` (e.g. "
                        "`[keras.InputSpec(shape=(64, 8, 8, 1))]`) exports "
                        "one."
                    )
                raise ExportError(
                    f"The {format!r} artifact of {method} written under "
                    f"{backend} does not run in its runtime: "
                    f"{type(error).__name__}: {_first_line(error)} (the "
                    f"file was written to {filepath!r} for inspection).{hint}"
                ) from error
            for name, value in want.items():
                if name not in got:
                    raise ExportError(
                        f"The {format!r} artifact of {method} has no output "
                        f"{name!r} (it has {sorted(got)})."
                    )
                if np.shape(got[name]) != value.shape:
                    raise ExportError(
                        f"The {format!r} artifact of {method} returns "
                        f"{name!r} of shape {np.shape(got[name])}; the model "
                        f"{value.shape}."
                    )
                if getattr(model, "_stochastic_outputs", False):
                    continue  # random samples: names and shapes only
                excess = np.abs(got[name] - value) - rtol * np.abs(value)
                diff = float(np.max(excess)) if value.size else 0.0
                if not diff <= atol:
                    raise ExportError(
                        f"The {format!r} artifact of {method} written under "
                        f"{backend} computes {name!r} differently from the "
                        f"model (max |diff|{f' beyond {rtol:g} |value|' if rtol else ''} "
                        f"{diff:.3g} > {atol:g} at batch size "
                        f"{len(value)}); the file was written to {filepath!r} "
                        "for inspection."
                    )
    return filepath


def _with_dtype(spec):
    """`spec` with dtype float32 where it has none (images)."""
    if not hasattr(spec, "shape"):
        raise TypeError(
            f"`input_signature` must hold `keras.InputSpec`s (or tensor specs); got {spec!r}."
        )
    if getattr(spec, "dtype", None) is None:
        return _respec(spec, dtype="float32")
    return spec


def _respec(spec, **changes):
    """A `keras.InputSpec` like `spec`, with `changes` (shape, dtype, name)."""
    fields = {"shape": spec.shape, "dtype": spec.dtype, "name": getattr(spec, "name", None)}
    return keras.InputSpec(**{**fields, **changes})


def _sizes_of_one(spec):
    return _respec(spec, shape=tuple(1 if d is None else d for d in spec.shape))


def _named(structure):
    """A dict of specs with each spec named by its key: a SavedModel (and
    the LiteRT file converted from it) names its signature's inputs after
    the specs, `args_0`, `args_0_1`, ... otherwise."""
    if not isinstance(structure, dict):
        return structure
    return {key: _respec(spec, name=key) for key, spec in structure.items()}


def _low_precision(model):
    """Whether a layer computes in int8, bfloat16 or float16: the artifact
    then rounds at other points than Keras does."""
    return any(
        getattr(layer.dtype_policy, "quantization_mode", None)
        or layer.compute_dtype in ("bfloat16", "float16")
        for layer in model._flatten_layers(include_self=False)
    )


def _first_line(error):
    text = str(error).strip().splitlines()
    return text[0] if text else ""


def _to_numpy(outputs):
    return {k: np.asarray(keras.ops.convert_to_numpy(v)) for k, v in outputs.items()}


def _sample_inputs(input_signature):
    """Deterministic inputs for the signature: batch sizes 1 and 3, or its
    static batch size."""
    rng = np.random.default_rng(0)

    def sample(spec, batch):
        shape = [batch if j == 0 else (8 if d is None else d) for j, d in enumerate(spec.shape)]
        if "int" in str(spec.dtype):
            # 0/1 ids, masks and segments, different for each input (an
            # artifact that swaps two inputs fails), position 0 set.
            ids = rng.integers(0, 2, shape)
            ids[..., 0] = 1
            return ids.astype(str(spec.dtype))
        return rng.uniform(0, 1, shape).astype(str(spec.dtype))

    out = []
    static = {s.shape[0] for s in keras.tree.flatten(input_signature)} - {None}
    for batch in sorted(static) or (1, 3):
        args = keras.tree.map_structure(lambda s: sample(s, batch), input_signature)
        out.append(args[0] if len(args) == 1 else args)
    return out

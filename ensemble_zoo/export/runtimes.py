"""Runs an exported artifact with the runtime its format is deployed on."""

import logging
import os

import numpy as np

from ensemble_zoo.export.formats import FORMATS
from ensemble_zoo.export.formats import RUNTIMES
from ensemble_zoo.export.formats import SUFFIXES
from ensemble_zoo.export.formats import require


def format_of(path):
    """The export format of the artifact at `path`, from its name."""
    path = str(path)
    for format, suffix in SUFFIXES.items():
        if suffix is not None and path.endswith(suffix):
            return format
    if os.path.isdir(path) and os.path.exists(os.path.join(path, "saved_model.pb")):
        return "tf_saved_model"
    raise ValueError(
        f"Cannot tell the export format of {path!r}: expected a SavedModel "
        "directory or a file ending in one of "
        f"{[s for s in SUFFIXES.values() if s]}; pass `format=`."
    )


def _drop_unsaved_gradient_warning(record):
    """A `logging` filter: False for TensorFlow's "Importing a function
    ... with ops with unsaved custom gradients" warning."""
    return "with ops with unsaved custom gradients" not in record.getMessage()


class ExportedModel:
    """An exported artifact, loaded by its own runtime.

    Calling it with NumPy inputs (one array, or a dict for text models)
    returns a dict of NumPy arrays keyed by the exported output names.
    The runtimes: TensorFlow (`tf_saved_model`), ONNX Runtime (`onnx`),
    the LiteRT interpreter from `ai-edge-litert` (`litert`),
    `torch.export.load` (`torch`) and OpenVINO on CPU in float32
    (`openvino`; its CPU plugin otherwise computes in bfloat16 where the
    processor has it).

    Args:
        path: str, what `model.export(path, format=...)` wrote.
        format: optional str; by default read from `path`'s suffix.

    Example:

    ```python
    import ensemble_zoo

    model = ensemble_zoo.models.EnsembleClassifier.from_preset(
        "vit_tiny_digits")
    model.export("vit.onnx", format="onnx")
    served = ensemble_zoo.export.ExportedModel("vit.onnx")
    x, _ = ensemble_zoo.datasets.load_arrays("digits", "test")
    served(x[:4])["probabilities"].shape
    # (4, 8)
    ```
    """

    def __init__(self, path, format=None):
        self.path = str(path)
        self.format = format or format_of(path)
        if self.format not in FORMATS:
            raise ValueError(f"`format` must be one of {FORMATS}; got {self.format!r}.")
        module, pip_name = RUNTIMES[self.format]
        self._runtime = require(module, pip_name, f"running a {self.format!r} artifact")
        getattr(self, f"_load_{self.format}")()

    def __call__(self, inputs):
        return getattr(self, f"_run_{self.format}")(inputs)

    @staticmethod
    def _as_dict(inputs, names):
        if isinstance(inputs, dict):
            return {k: np.asarray(v) for k, v in inputs.items()}
        if len(names) != 1:
            raise ValueError(f"This artifact takes a dict with keys {names}.")
        return {names[0]: np.asarray(inputs)}

    # === TensorFlow SavedModel ===

    def _load_tf_saved_model(self):
        # TensorFlow warns through absl, for every function that uses a
        # custom gradient (`ops.gelu`, attention), that the loaded function
        # has no gradient; an artifact served for inference needs none.
        absl_logger = logging.getLogger("absl")
        absl_logger.addFilter(_drop_unsaved_gradient_warning)
        try:
            self._loaded = self._runtime.saved_model.load(self.path)
        finally:
            absl_logger.removeFilter(_drop_unsaved_gradient_warning)

    def _run_tf_saved_model(self, inputs):
        tf = self._runtime
        if isinstance(inputs, dict):
            inputs = {k: tf.constant(v) for k, v in inputs.items()}
        else:
            inputs = tf.constant(inputs)
        return {k: v.numpy() for k, v in self._loaded.serve(inputs).items()}

    # === ONNX Runtime ===

    def _load_onnx(self):
        self._session = self._runtime.InferenceSession(
            self.path, providers=["CPUExecutionProvider"]
        )
        self._inputs = [i.name for i in self._session.get_inputs()]
        self._outputs = [o.name for o in self._session.get_outputs()]

    def _run_onnx(self, inputs):
        feed = self._as_dict(inputs, self._inputs)
        return dict(zip(self._outputs, self._session.run(None, feed)))

    # === LiteRT ===

    def _load_litert(self):
        from ai_edge_litert.interpreter import Interpreter

        self._interpreter = Interpreter(model_path=self.path)
        self._runner = self._interpreter.get_signature_runner("serve")
        self._inputs = list(self._runner.get_input_details())

    def _run_litert(self, inputs):
        return {
            k: np.asarray(v) for k, v in self._runner(**self._as_dict(inputs, self._inputs)).items()
        }

    # === PyTorch ExportedProgram ===

    def _load_torch(self):
        self._module = self._runtime.export.load(self.path).module()

    def _run_torch(self, inputs):
        torch = self._runtime
        with torch.no_grad():
            if isinstance(inputs, dict):
                outputs = self._module(
                    {k: torch.from_numpy(np.asarray(v)) for k, v in inputs.items()}
                )
            else:
                outputs = self._module(torch.from_numpy(np.asarray(inputs)))
        return {k: v.detach().cpu().numpy() for k, v in outputs.items()}

    # === OpenVINO ===

    def _load_openvino(self):
        core = self._runtime.Core()
        model = core.read_model(self.path)
        # The names as written: compiling may add a graph-internal name to
        # a port (loss prediction's `uncertainty` became `simple_gather_2`
        # beside it), so ports are named from the model read, by position.
        self._inputs = [self._openvino_name(i) for i in model.inputs]
        self._outputs = [self._openvino_name(o) for o in model.outputs]
        self._compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})

    @staticmethod
    def _openvino_name(port):
        """The port's exported name: OpenVINO may keep a graph-internal
        name beside it (with `/` or `:`), and `get_any_name` picks any."""
        names = sorted(n for n in port.get_names() if "/" not in n and ":" not in n)
        return names[0] if names else port.get_any_name()

    def _run_openvino(self, inputs):
        result = self._compiled(self._as_dict(inputs, self._inputs))
        return {
            name: np.asarray(result[port])
            for name, port in zip(self._outputs, self._compiled.outputs)
        }

"""keras-hub's own conformance harness, for the zoo's backbones and tasks.

`keras_hub.src.tests.test_case.TestCase` (shipped in the keras-hub wheel)
imports `grain` at the top, for its grain-pipeline helpers, which the zoo
does not use and does not install. A stand-in module satisfies that import
for the harness alone: it is put in `sys.modules` after keras-hub itself
is imported (keras-hub's pipeline code checks for the real grain then and
must keep seeing none) and removed again at once.

`ZooTestCase` is that `TestCase`, unchanged but for what is wrong for an
ensemble (listed here, and in docs/architecture.md):

- `run_precision_test` requires every sublayer to compute in the policy's
  dtype. A mixture-of-experts router (`TopKRouter`) deliberately keeps
  float32 whatever the policy, as vmoe does: the top-k choice of experts
  from bfloat16 logits flips on near ties and changes the model. The
  check here is keras-hub's, with routers held to float32 instead, and
  one of keras-hub's three policies a run (test budget: the check was a
  third of a backbone test's time), the three backends on different ones,
  rotating with the day.

What the harness file (`tests/models/test_keras_hub_harness.py`) leaves
out, and why:

- Each of its tests runs under one of JAX, TensorFlow and PyTorch, picked
  by a stable hash of its name, so every model meets all three (test
  budget; each model's own tests run on all three).

- MC dropout runs at rate 0 there: the harness compares two calls, and
  MC dropout's samples differ from call to call by design.
- The quantization check of a backbone built with a quantization map
  compares its config with its copy's; a quantized keras-hub
  `ViTImageClassifier` (what deep ensembles and MC dropout wrap there)
  keeps its head's quantization out of its own config, so the two skip
  that check (`test_wrapped_keras_hub_tasks_take_a_quantization_map`
  tests the rest); subnetwork ensembles refuse quantization.
"""

import sys
import types

import keras
import keras_hub  # noqa: F401  (before the stand-in, see above)
from keras import tree
from zoo_testing import run_day

from ensemble_zoo.layers.moe import TopKRouter

_stand_in = "grain" not in sys.modules
if _stand_in:
    sys.modules["grain"] = types.ModuleType("grain")
try:
    from keras_hub.src.tests.test_case import TestCase
finally:
    if _stand_in:
        del sys.modules["grain"]


#: keras-hub's precision policies.
PRECISION_POLICIES = ("mixed_float16", "mixed_bfloat16", "bfloat16")


def _policies_this_run():
    """The policy this run's precision checks use: one of
    `PRECISION_POLICIES`, another per backend, rotating with the day."""
    backends = ("jax", "tensorflow", "torch")
    index = run_day() + backends.index(keras.config.backend())
    return [PRECISION_POLICIES[index % len(PRECISION_POLICIES)]]


class ZooTestCase(TestCase):
    """keras-hub's `TestCase` for the zoo's models (see the module)."""

    def run_precision_test(self, cls, init_kwargs, input_data):
        if keras.config.backend() == "torch":
            import torch

            if not torch.cuda.is_available():
                return  # as keras-hub: no mixed precision on a torch CPU
        for name in _policies_this_run():
            policy = keras.mixed_precision.Policy(name)
            model = cls(**{**init_kwargs, "dtype": policy})
            outputs = tree.flatten(model(input_data))
            outputs += tree.flatten(model.compute_output_spec(input_data))
            for tensor in outputs:
                if "float" in keras.backend.standardize_dtype(tensor.dtype):
                    self.assertDTypeEqual(tensor, policy.compute_dtype)
            for layer in model._flatten_layers():
                if isinstance(layer, (keras.layers.InputLayer, keras.layers.Softmax)):
                    continue
                expected = "float32" if isinstance(layer, TopKRouter) else None
                self.assertEqual(expected or policy.compute_dtype, layer.compute_dtype)
                self.assertEqual(expected or policy.variable_dtype, layer.variable_dtype)

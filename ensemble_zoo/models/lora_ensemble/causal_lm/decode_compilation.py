"""The decode engine's generation (`decode_engine.generate_batch`), compiled
for the backend: `decode_function`; and teacher-forced scoring,
`scoring_function`.

- JAX: the whole generation (prefill and loop) is one `jax.jit` program
  per input shape and prefill length, with the model's and the sampler's
  variables as arguments (as keras-hub compiles `generate`).
- TensorFlow: one `tf.function(jit_compile=True)` program per shape and
  prefill length.
- PyTorch: the loop runs in Python (as `keras.ops.while_loop` does under
  PyTorch). With `compile(jit_compile=True)` on a CPU, the greedy step
  and the prompts' pass are each recorded on fake tensors, the sequence
  length a symbol, and compiled by inductor with the weights as inputs
  (`utils/inductor_steps.py`): no dynamo tracing of Keras, one program
  for every length (the prompts' pass one per `prefill_length` bucket; a
  length that equals another dimension of the arguments, or fails a
  guard, records its own), what cannot be compiled running as without
  `jit_compile` (with a warning), none compiled again
  when a weight changes, and inductor's cache on disk serves a second
  process. A sampler that draws reads its seed on the host, which a
  recording cannot: its step is one `torch.compile` graph
  (`fullgraph=True`, `dynamic=None`: a second length compiles once more
  with the length a symbol) with the weights frozen into it and its
  matrix products autotuned (`TORCH_CPU_INDUCTOR`), compiled again
  whenever a weight has changed. On a CUDA device `mode="reduce-overhead"`
  captures the step once per shape as a CUDA graph, static, and replays
  it. Without `jit_compile` (Keras' default there) each step runs
  eagerly until its signature has run `captured_steps.CAPTURE_AFTER`
  times, and is then recorded as a graph of PyTorch operations and
  replayed (`utils/captured_steps.py`: the eager step's results without
  its Python; keras-hub's `GreedySampler` only: a sampler that draws, or
  runs Python of its own, stays eager); `run_eagerly=True` runs the
  Python at every step, the reference the tests compare with. Checked
  with Keras 3.15.1, keras-hub 0.32.0 and torch 2.13 (CPU).
"""

import contextlib
import itertools

import keras
import keras_hub
from keras import ops

from ensemble_zoo.models.lora_ensemble.causal_lm import attention_route
from ensemble_zoo.models.lora_ensemble.causal_lm import teacher_forcing
from ensemble_zoo.models.lora_ensemble.causal_lm.decode_engine import generate_batch
from ensemble_zoo.models.lora_ensemble.causal_lm.decode_engine import loop_step
from ensemble_zoo.models.lora_ensemble.causal_lm.decode_engine import prefill
from ensemble_zoo.models.lora_ensemble.causal_lm.decode_engine import prefill_length
from ensemble_zoo.models.lora_ensemble.causal_lm.member_forward import member_block_input
from ensemble_zoo.utils.backend import no_gradients
from ensemble_zoo.utils.captured_steps import CapturedStep
from ensemble_zoo.utils.inductor_steps import InductorStep


def model_variables(model):
    """The model's variables that its figures read: its own and the
    attached loss predictor's head's."""
    predictor = model.loss_predictor
    head = [] if predictor is None else list(predictor.head.variables)
    return list(model.trainable_variables) + list(model.non_trainable_variables) + head


def _variables(model, sampler):
    """The variables a generation reads: the sampler's seed, then
    `model_variables`."""
    return list(sampler.variables), model_variables(model)


def _jax_function(model, sampler, stop_token_ids):
    import jax

    sampler_variables, variables = _variables(model, sampler)

    def compiled(inputs, sampler_values, values, prefill_to):
        mapping = itertools.chain(zip(sampler_variables, sampler_values), zip(variables, values))
        with keras.StatelessScope(state_mapping=mapping) as scope:
            outputs = generate_batch(model, sampler, inputs, stop_token_ids, prefill_to=prefill_to)
        updated = [scope.get_current_value(v) for v in sampler_variables]
        return outputs, [
            new if new is not None else old for new, old in zip(updated, sampler_values)
        ]

    compiled = jax.jit(compiled, static_argnums=3)

    def run(inputs):
        outputs, sampler_values = compiled(
            inputs,
            [v.value for v in sampler_variables],
            [v.value for v in variables],
            prefill_length(sampler, inputs["padding_mask"]),
        )
        for variable, value in zip(sampler_variables, sampler_values):
            variable.assign(value)
        return outputs

    return run


#: Compiled variants of one decode step (its code object) that dynamo
#: keeps: one per input shape. Dynamo's default (8 per code object, torch
#: 2.13) failed with `fullgraph=True` once a process had decoded 3 models
#: at 3 lengths; raised only around the zoo's own compiled steps
#: (`torch._dynamo.config.patch`).
TORCH_RECOMPILE_LIMIT = 64

#: Inductor's configuration for a drawing sampler's decode step on a CPU
#: (`_FrozenStep`; the greedy step is `InductorStep`'s). MKL's
#: single-precision GEMM multiplies the members' 8 rows by a 2048 x 16,384
#: kernel in about 4x the time of one row on the AMD EPYC this was
#: measured on (18.8 against 5.2 ms; `benchmarks/cpu_matmul.py`), where
#: reading the kernel bounds both; inductor's C++ GEMM template takes 5.2
#: ms for 8 rows. Autotuning (`max_autotune`) picks it, and it needs the
#: weights as constants of the graph (`freezing`, which also packs them),
#: so the step is rebuilt whenever a weight changes (`_FrozenStep`).
#: Freezing is read from inductor's configuration when the graph is
#: compiled, not from `torch.compile(options=...)` (torch 2.13), so it is
#: patched around the zoo's own step calls only. Checked with torch 2.13
#: (CPU).
TORCH_CPU_INDUCTOR = {
    "freezing": True,
    "max_autotune": True,
    "max_autotune_gemm_backends": "CPP,ATEN",
    "max_autotune_report_choices_stats": False,
}


@contextlib.contextmanager
def _cpu_inductor():
    """`TORCH_CPU_INDUCTOR` while the zoo's step runs (and compiles), and
    autotuning's per-GEMM table off (inductor writes it to stderr unless
    `select_algorithm.PRINT_AUTOTUNE` is false; torch 2.13)."""
    import torch._inductor.config
    from torch._inductor import select_algorithm

    printing = select_algorithm.PRINT_AUTOTUNE
    select_algorithm.PRINT_AUTOTUNE = False
    try:
        with torch._inductor.config.patch(TORCH_CPU_INDUCTOR):
            yield
    finally:
        select_algorithm.PRINT_AUTOTUNE = printing


def _with_own_code(function):
    """`function` with a code object of its own: dynamo keeps compiled
    variants per code object, so each decode function, and each rebuild of
    a frozen one, compiles afresh instead of finding another model's (or
    older weights') variant whose guards still pass."""
    import types

    return types.FunctionType(
        function.__code__.replace(),
        function.__globals__,
        function.__name__,
        function.__defaults__,
        function.__closure__,
    )


class _FrozenStep:
    """The decode step compiled with the weights frozen into it
    (`TORCH_CPU_INDUCTOR`), compiled again when a weight has changed since:
    a new tensor (`id`) or an in-place write (torch's `_version` counter,
    which `Variable.assign` and optimizers bump). Only the model's and the
    loss predictor's weights are frozen; the sampler's seed stays an input.
    """

    def __init__(self, model, sampler):
        # The variables are those of the decode function this step belongs
        # to: `compile` and `attach_loss_predictor` build new ones.
        self.model, self.sampler = model, sampler
        self.variables = _variables(model, sampler)[1]
        self.key, self.compiled = None, None

    def __call__(self, *args):
        import torch

        key = tuple((id(v.value), v.value._version) for v in self.variables)
        if key != self.key:
            self.compiled = None  # frees the old frozen constants first
            self.compiled = torch.compile(
                _with_own_code(loop_step(self.model, self.sampler)), fullgraph=True, dynamic=None
            )
            self.key = key
        with _cpu_inductor():
            return self.compiled(*args)


def _torch_function(model, sampler, stop_token_ids, compiled):
    import torch

    step = loop_step(model, sampler)
    greedy = type(sampler) is keras_hub.samplers.GreedySampler
    variables = model_variables(model)
    replayed = CapturedStep(step, lambda: [v.value for v in variables]) if greedy else step
    prompts_pass = None
    device = model.weights[0].value.device.type if model.weights else "cpu"
    if compiled and device == "cuda":
        step = _dynamo_step(
            torch.compile(
                _with_own_code(step), fullgraph=True, dynamic=False, mode="reduce-overhead"
            )
        )
    elif compiled:
        # Recorded and compiled by inductor, the weights as inputs and the
        # length a symbol; what cannot be runs as the default path does. A
        # sampler that draws reads its seed on the host, which a recording
        # on fake tensors cannot: it is compiled by dynamo, weights frozen.
        prompts_pass = InductorStep(
            lambda token_ids, mask, length: prefill(model, token_ids, mask, length),
            variables,
            fallback=lambda token_ids, mask, length: prefill(
                model, token_ids, mask, length, _eager_prefill_block(model)
            ),
            dynamic=lambda token_ids, mask, length: [token_ids.shape[1]],
        )
        if greedy:
            step = InductorStep(
                step, variables, fallback=replayed, dynamic=lambda prompt, *_: [prompt.shape[1]]
            )
        else:
            step = _dynamo_step(_FrozenStep(model, sampler))
    elif not model.run_eagerly:
        # Greedy decoding runs no Python of its own per step; a sampler
        # that draws from a seed, or a subclass's callbacks, stays eager.
        step = replayed

    def run(inputs):
        with torch.no_grad():
            return generate_batch(
                model,
                sampler,
                inputs,
                stop_token_ids,
                step=step,
                prefill_to=prefill_length(sampler, inputs["padding_mask"]),
                prefill_block=_eager_prefill_block(model),
                prompts_pass=prompts_pass,
            )

    return run


def _dynamo_step(compiled_step):
    """A step compiled by `torch.compile`, run with the zoo's recompile
    limit."""
    import torch

    def step(*args):
        with torch._dynamo.config.patch(recompile_limit=TORCH_RECOMPILE_LIMIT):
            return compiled_step(*args)

    return step


#: Values of the members' logits that one block of an eager prompts' pass
#: holds per prompt of the batch (256 MiB in float32): 64 positions of 4
#: Gemma 3 members (262,144-token vocabulary), every position of a small
#: vocabulary. A compiled pass (JAX, TensorFlow) needs no blocks: XLA
#: drops the logits that nothing reads.
PREFILL_BUDGET = 2**26


def _eager_prefill_block(model):
    """The positions of one block of a prompts' pass that runs eagerly
    (PyTorch's, and any under `run_eagerly`; `decode_engine.prefill`): as
    many as keep the members' logits within `PREFILL_BUDGET` values."""
    return teacher_forcing.positions_per_chunk(
        model.num_members, model.backbone.vocabulary_size, PREFILL_BUDGET
    )


def decode_function(model, sampler, stop_token_ids):
    """`inputs -> outputs` of `generate_batch`, compiled for the backend
    (see the module docstring) unless the model runs eagerly; the prompts'
    pass runs over `prefill_length` positions, read on the host first."""
    backend = keras.config.backend()
    if backend == "torch":
        return _torch_function(model, sampler, stop_token_ids, bool(model.jit_compile))
    if backend == "jax" and not model.run_eagerly:
        return _jax_function(model, sampler, stop_token_ids)

    block = _eager_prefill_block(model) if model.run_eagerly else None

    def generation(inputs, prefill_to):
        return generate_batch(
            model, sampler, inputs, stop_token_ids, prefill_to=prefill_to, prefill_block=block
        )

    if not model.run_eagerly:
        import tensorflow as tf

        # A Python int argument: one traced program per prefill length.
        generation = tf.function(generation, jit_compile=bool(getattr(model, "jit_compile", True)))
    return lambda inputs: generation(inputs, prefill_length(sampler, inputs["padding_mask"]))


def scoring_function(model):
    """`(token_ids, padding_mask, prompt_mask, chunk_size, attention) ->
    figures` of `teacher_forcing.chunked_figures` (`score_uncertainty`),
    compiled as `pass_function` compiles it (`chunk_size` and `attention`
    Python values)."""

    def score(token_ids, padding_mask, prompt_mask, chunk_size, attention):
        return teacher_forcing.chunked_figures(
            model, token_ids, padding_mask, chunk_size, prompt_mask, attention
        )

    return pass_function(model, score, static_argnums=(3, 4))


def query_attention_function(model):
    """`(token_ids, padding_mask, query_positions) -> weights` of
    `attention_route.query_attention` (CSL's eliciting prompt), compiled as
    `pass_function` compiles it."""

    def attend(token_ids, padding_mask, query_positions):
        inputs = {"token_ids": token_ids, "padding_mask": padding_mask}
        return attention_route.query_attention(model, inputs, query_positions)

    return pass_function(model, attend)


def block_input_function(model, block_index):
    """`(token_ids, padding_mask, positions) -> (batch, hidden_dim)`: the
    members' mean of `member_forward.member_block_input` at one position
    per sequence (EigenScore's embeddings), in float32, compiled as
    `pass_function` compiles it."""

    def block_input(token_ids, padding_mask, positions):
        inputs = {"token_ids": token_ids, "padding_mask": padding_mask}
        rows = member_block_input(model, inputs, block_index)
        batch, length = ops.shape(token_ids)
        rows = ops.reshape(ops.cast(rows, "float32"), (batch, model.num_members, length, -1))
        mean = ops.mean(rows, axis=1)
        return ops.take_along_axis(mean, positions[:, None, None], axis=1)[:, 0]

    return pass_function(model, block_input)


def pass_function(model, function, static_argnums=()):
    """A teacher-forced pass `function(*args)` of `model`, compiled for the
    backend unless the model runs eagerly, never recording gradients: JAX
    `jax.jit` with the weights as arguments (`static_argnums`: the
    arguments that are Python values), TensorFlow `tf.function` (XLA with
    `jit_compile`), PyTorch eager without gradients (compiling takes
    minutes there, and a pass is one round of large matrix products)."""
    backend = keras.config.backend()
    if backend == "torch" or model.run_eagerly:

        def run(*args):
            with no_gradients():
                return function(*args)

        return run
    if backend == "jax":
        import jax

        variables = model_variables(model)

        def stateless(values, *args):
            with keras.StatelessScope(state_mapping=zip(variables, values)):
                return function(*args)

        compiled = jax.jit(stateless, static_argnums=tuple(i + 1 for i in static_argnums))
        return lambda *args: compiled([v.value for v in variables], *args)
    import tensorflow as tf

    compiled = tf.function(function, jit_compile=bool(getattr(model, "jit_compile", True)))
    return lambda *args: compiled(*args)

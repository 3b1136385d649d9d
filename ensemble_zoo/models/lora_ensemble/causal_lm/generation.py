"""`generate` of a LoRA-Ensemble causal LM: keras-hub's input and output
handling around the decode engine (`decode_engine`)."""

import numpy as np
from keras import ops

from ensemble_zoo.models.causal_lm_inputs import check_generate_call
from ensemble_zoo.models.lora_ensemble.causal_lm.generation_outputs import (
    strip_prompt as strip_prompt_rows,
)
from ensemble_zoo.models.lora_ensemble.causal_lm.generation_outputs import uncertainty_outputs
from ensemble_zoo.utils.validation import check_bool


def generate(
    model, inputs, max_length, stop_token_ids, strip_prompt, return_uncertainty, sampler=None
):
    """`LoRAEnsembleCausalLM.generate` with `sampler` in place of the
    compiled one (`None`: the compiled one): keras-hub's input handling
    (preprocessing, batches, `strip_prompt`, postprocessing) around the
    decode engine's compiled generation of each batch, and with
    `return_uncertainty` the NumPy dict of `generation_outputs`."""
    return_uncertainty = check_bool(return_uncertainty, "return_uncertainty")
    check_generate_call(model, inputs, max_length, stop_token_ids, strip_prompt)
    if stop_token_ids == "auto":
        if model.preprocessor is None:
            raise ValueError(
                "A `preprocessor` must be attached to the model if "
                '`stop_token_ids="auto"`. Pass `stop_token_ids=None` to '
                "generate up to the inputs' length, or a tuple of token ids."
            )
        tokenizer = model.preprocessor.tokenizer
        stop_token_ids = [tokenizer.end_token_id]
        if hasattr(tokenizer, "end_token2_id"):  # Llama 3's two end tokens
            stop_token_ids.append(tokenizer.end_token2_id)
    if stop_token_ids is not None:
        stop_token_ids = tuple(int(t) for t in stop_token_ids)
    decode = model._decode_function(stop_token_ids, sampler)
    batches, input_is_scalar = model._normalize_generate_inputs(inputs)
    outputs, records = [], []
    for batch in batches:
        if model.preprocessor is not None:
            batch = model.preprocessor.generate_preprocess(batch, sequence_length=max_length)
        batch = {
            "token_ids": ops.convert_to_tensor(batch["token_ids"], "int32"),
            "padding_mask": ops.convert_to_tensor(batch["padding_mask"], "bool"),
        }
        try:
            # JAX dispatches asynchronously: an allocation failure
            # surfaces when the outputs are read.
            record = {k: ops.convert_to_numpy(v) for k, v in decode(batch).items()}
        except Exception as e:
            if not is_out_of_memory(e):
                raise
            raise ValueError(
                f"Generation ran out of memory (`max_length`={max_length}): the "
                "KV cache holds (batch, members, layers, 2, max_length, "
                "key-value heads, head size) values. Pass a smaller "
                f"`max_length` or fewer prompts. ({type(e).__name__})"
            ) from e
        record["prompt_mask"] = ops.convert_to_numpy(batch["padding_mask"])
        records.append(record)
        result = {k: record[k] for k in ("token_ids", "padding_mask")}
        if strip_prompt:
            result = strip_prompt_rows(result, record["prompt_mask"])
        if model.preprocessor is not None:
            result = model.preprocessor.generate_postprocess(result)
        outputs.append(result)
    output = model._normalize_generate_outputs(outputs, input_is_scalar)
    if not return_uncertainty:
        return output
    merged = {key: np.concatenate([r[key] for r in records], axis=0) for key in records[0]}
    return {
        "output": output,
        **uncertainty_outputs(
            merged, model.num_members, model._recorded_attention, model.backbone.vocabulary_size
        ),
    }


def is_out_of_memory(error):
    """Whether a backend error is an allocation failure (JAX's
    RESOURCE_EXHAUSTED, TensorFlow's ResourceExhaustedError, PyTorch's
    OutOfMemoryError or a failed CPU allocation)."""
    text = f"{type(error).__name__}: {error}"
    return isinstance(error, MemoryError) or any(
        marker in text
        for marker in (
            "RESOURCE_EXHAUSTED",
            "ResourceExhausted",
            "OutOfMemory",
            "out of memory",
            "Out of memory",
            "can't allocate memory",
        )
    )

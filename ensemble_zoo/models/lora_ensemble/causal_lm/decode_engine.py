"""The LoRA-Ensemble causal LM's decode engine.

One pure step function over the backbone,

    member_step(model, token_ids, cache, index, padding_mask)
        -> (member logits, member hidden states, new cache),

runs the family's own keras-hub `call_with_cache` once on every member's
batch-major rows (`ensemble_zoo.ops.tile_members`; with the lower blocks
shared, `trunk_step` instead) and splits the result into `(batch,
members, ...)`. The KV cache is preallocated at the sequence length by
`prefill` (the family's `_build_cache` over the prompts' positions, the
longest prompt rounded up to a power of two, zeros after them), so every
step has the same shapes. keras-hub's `generate` runs the prompts' pass
over the whole padded length; at batch 1 that repeats every generated
position once, M times over with M members, so the engine stops at the
prompts. One sampling loop calls the step, applies the keras-hub sampler
to the ensemble's predictive distribution and writes each generated
token's figures (`token_uncertainty.token_figures`) into a `(batch,
length, figures)` loop variable; where the family's attention layers
take keras-hub's attention route, each step runs through it
(`attention_route.attention_step`) and the figures also hold the
weights RAUQ's layers give to the step's own position. Nothing on the
model is swapped or flagged while it runs: two generations, or one
inside another's callback, share no mutable state but the sampler's
seed (the route's scope is keras-hub's, thread-local, one step long).

Each backend compiles the generation its own way (`decode_compilation`).

Samplers: greedy, random, top-k and top-p only choose the next token
from a distribution, so the loop here runs them and records the figures
as it goes (`LOOP_SAMPLERS`). Beam and contrastive search run keras-hub's
own loops, which reorder the batch and call the model for several
candidates; they get the ensemble's log-probabilities through
`ensemble_next`, and their figures come from one teacher-forced pass over
the result.
"""

import keras
import keras_hub
import numpy as np
from keras import ops

from ensemble_zoo.models.lora_ensemble.causal_lm.attention_route import attention_step
from ensemble_zoo.models.lora_ensemble.causal_lm.generation_outputs import any_equal
from ensemble_zoo.models.lora_ensemble.causal_lm.generation_outputs import output_padding_mask
from ensemble_zoo.models.lora_ensemble.causal_lm.token_uncertainty import FIGURES
from ensemble_zoo.models.lora_ensemble.causal_lm.trunk_step import empty_cache
from ensemble_zoo.models.lora_ensemble.causal_lm.trunk_step import trunk_step
from ensemble_zoo.ops.member_tiling import fold_members
from ensemble_zoo.ops.member_tiling import tile_members
from ensemble_zoo.ops.member_tiling import untile_members
from ensemble_zoo.ops.token_uncertainty import ensemble_log_probs
from ensemble_zoo.ops.token_uncertainty import vocabulary_log_softmax
from ensemble_zoo.utils.workarounds import zoo_workarounds

#: Samplers that only choose the next token (keras-hub's base loop): their
#: figures are recorded inside the decode loop.
LOOP_SAMPLERS = (
    keras_hub.samplers.GreedySampler,
    keras_hub.samplers.RandomSampler,
    keras_hub.samplers.TopKSampler,
    keras_hub.samplers.TopPSampler,
)


# The members are batch-major rows (`ensemble_zoo.ops.tile_members`): axis
# 0 stays ordered by prompt, as keras-hub's samplers and cache expect.
ROWS = "batch_major"


def repeat_rows(x, num_members):
    """`(batch, ...)` -> the members' rows; `None` stays `None`."""
    return None if x is None else tile_members(x, num_members, ROWS)


def split_members(x, num_members):
    """The members' rows -> `(batch, members, ...)`."""
    return untile_members(x, num_members, ROWS)


def _split(structure, num_members):
    return keras.tree.map_structure(lambda x: split_members(x, num_members), structure)


def prefill(model, token_ids, padding_mask, length=None, block=None):
    """The members' KV cache of a padded prompt batch.

    Args:
        model: a `LoRAEnsembleCausalLM`.
        token_ids: int `(batch, max_length)`, the prompts padded to the
            generation's length (which the cache then holds).
        padding_mask: bool `(batch, max_length)`, true on prompt tokens.
        length: `None` (every position) or a Python int, the positions
            the prompts' pass runs over (`prefill_length`); the cache is
            zero after them, and the decode loop writes each position
            before any token attends to it.
        block: `None` (one pass) or a Python int, the positions of one
            block of the prompts' pass (`decode_compilation.PREFILL_BUDGET`): the family's
            `_build_cache` seeds the cache over the first block and its
            `call_with_cache` runs each further block at its offset, so
            the members' logits that every pass computes (and that an
            eager backend cannot drop, `(rows, positions, vocabulary)`)
            are held for one block at a time. A family whose cache holds
            states without a position axis (`Family.full_prefill`), or
            whose blocks at an offset differ (`Family.offset_blocks`), runs
            one pass.

    Returns:
        `(hidden_states, cache)`: the members' mean final hidden states
        `(batch, length, hidden_dim)` and the family's cache with a member
        axis after the batch (`(batch, members, layers, 2, max_length,
        kv_heads, head_dim)`; Gemma 3: per layer a `(key, value)` pair of
        `(batch, members, max_length, kv_heads, head_dim)`), or over a
        shared trunk `trunk_step`'s (its blocks' caches at `batch` rows).
    """
    m = model.num_members
    family = model.family
    # The padded length stays a symbol while `inductor_steps` records the
    # pass with the length dynamic (an int would specialize the program).
    full = ops.shape(token_ids)[1]
    length = full if length is None or family.full_prefill else min(length, full)
    if block is None or family.full_prefill or not family.offset_blocks:
        block = length
    # One block: no `range` over a length that may be a symbol (it would
    # specialize the recorded program to that length).
    starts = range(0, length, block) if block is not length else (0,)
    if model.trunk_blocks:
        cache = empty_cache(model, int(ops.shape(token_ids)[0]), full)
        hidden = []
        for start in starts:
            _, part, cache = trunk_step(
                model,
                token_ids[:, start : min(start + block, length)],
                cache,
                ops.convert_to_tensor(start, "int32"),
                family.block_arguments(padding_mask),
            )
            hidden.append(ops.mean(part, axis=1))
        return hidden[0] if len(hidden) == 1 else ops.concatenate(hidden, axis=1), cache
    token_rows, mask_rows = repeat_rows(token_ids, m), repeat_rows(padding_mask, m)
    first = min(block, length)
    hidden, cache = family.seed_cache(model, token_rows[:, :first], mask_rows[:, :first])
    if first < full:

        def pad(x):
            widths = [(0, 0)] * len(ops.shape(x))
            widths[family.cache_length_axis] = (0, full - first)
            return ops.pad(x, widths)

        cache = keras.tree.map_structure(pad, cache)
    hidden = [hidden]
    for start in starts[1:]:
        _, part, cache = model.call_with_cache(
            token_rows[:, start : min(start + block, length)],
            cache,
            ops.convert_to_tensor(start, "int32"),
            **family.block_arguments(mask_rows),
        )
        hidden.append(part)
    hidden = hidden[0] if len(hidden) == 1 else ops.concatenate(hidden, axis=1)
    return ops.mean(split_members(hidden, m), axis=1), _split(cache, m)


def prefill_length(sampler, padding_mask):
    """How many positions the prompts' pass runs over: the longest prompt
    rounded up to a power of two (one compiled program per bucket under
    XLA), a Python int read on the host; `None` (every position, as
    keras-hub's `_build_cache` runs) where that is all of them, and for
    beam and contrastive search, whose keras-hub loops read the prompt's
    hidden states at every position. keras-hub runs the prompts' pass over
    the padded length: at batch 1 that is every generated position once
    more per call, which costs M times as much with M members and grows
    with `max_length`."""
    if not isinstance(sampler, LOOP_SAMPLERS):
        return None
    mask = np.asarray(ops.convert_to_numpy(padding_mask))
    longest = int(mask.sum(axis=-1).max()) if mask.size else 0
    bucket = 1 << max(longest - 1, 0).bit_length()
    return None if bucket >= mask.shape[-1] else bucket


def member_step(model, token_ids, cache, index, padding_mask):
    """One step of every member through the family's `call_with_cache`.

    Args:
        model: a `LoRAEnsembleCausalLM`.
        token_ids: int `(batch, tokens)`, the tokens at `index`.
        cache: the member cache (see `prefill`).
        index: int or int tensor, the position of `token_ids[:, 0]`.
        padding_mask: bool `(batch, length)`, the prompts' mask (Gemma 3
            keeps prompt positions' cache).

    Returns:
        `(member_logits, member_hidden, cache)`: `(batch, members, tokens,
        vocabulary)`, `(batch, members, tokens, hidden_dim)` and the
        updated member cache.
    """
    m = model.num_members
    extra = model.family.step_arguments(padding_mask, index)
    if model.trunk_blocks:
        return trunk_step(model, token_ids, cache, index, extra)
    logits, hidden, cache = model.call_with_cache(
        repeat_rows(token_ids, m),
        keras.tree.map_structure(lambda x: fold_members(x, ROWS), cache),
        index,
        **{k: repeat_rows(v, m) for k, v in extra.items()},
    )
    return split_members(logits, m), split_members(hidden, m), _split(cache, m)


def ensemble_next(model, padding_mask):
    """keras-hub's `next(prompt, cache, index)` for its own sampler loops:
    `(log p̄ (rows, vocabulary), the members' mean hidden state (rows,
    hidden_dim), cache)` after the token at `index - 1`. Beam and
    contrastive search repeat each prompt row (`ops.repeat` on axis 0);
    the prompts' mask is repeated alike."""
    batch = ops.shape(padding_mask)[0]

    def next(prompt, cache, index):
        rows = ops.shape(prompt)[0]
        mask = padding_mask if rows == batch else ops.repeat(padding_mask, rows // batch, axis=0)
        token = ops.expand_dims(ops.take(prompt, index - 1, axis=1), 1)
        member_logits, member_hidden, cache = member_step(model, token, cache, index - 1, mask)
        log_probs = ensemble_log_probs(vocabulary_log_softmax(member_logits[:, :, 0]))
        return log_probs, ops.mean(member_hidden[:, :, 0], axis=1), cache

    return next


def loop_step(model, sampler):
    """The decode loop's body `(prompt, cache, index, figures,
    prompt_mask) -> (prompt, cache, index + 1, figures)`: one member step
    on the token at `index - 1`, the sampler's next token from the
    ensemble's predictive distribution (prompt tokens are kept), and that
    token's figures written at `index`. Indexing by `ops.take` keeps the
    step free of data-dependent slice sizes (one `torch.compile` graph)."""

    def step(prompt, cache, index, figures, prompt_mask):
        with zoo_workarounds():
            token = ops.expand_dims(ops.take(prompt, index - 1, axis=1), 1)
            if model._recorded_attention is None:
                member_logits, member_hidden, cache = member_step(
                    model, token, cache, index - 1, prompt_mask
                )
            else:
                member_logits, member_hidden, cache, attention = attention_step(
                    model, member_step, token, cache, index - 1, prompt_mask
                )
            member_log_probs = vocabulary_log_softmax(member_logits[:, :, 0])
            probabilities = sampler.compute_probabilities(ensemble_log_probs(member_log_probs))
            next_token = ops.cast(sampler.get_next_token(probabilities), prompt.dtype)
            next_token = ops.where(
                ops.take(prompt_mask, index, axis=1), ops.take(prompt, index, axis=1), next_token
            )
            prompt = ops.slice_update(prompt, [0, index], next_token[:, None])
            row = model._figures(
                member_log_probs,
                next_token,
                member_hidden[:, :, 0],
                _prefix_log_likelihoods(figures, index, prompt_mask, model.num_members),
            )
            if model._recorded_attention is not None:
                batch = ops.shape(row)[0]
                row = ops.concatenate([row, ops.reshape(attention, (batch, -1))], axis=-1)
            figures = ops.slice_update(figures, [0, index, 0], row[:, None, :])
        return prompt, cache, index + 1, figures

    return step


def _attention_width(model):
    """The figures' columns of the recorded attention weights
    (`attention_route`): members x layers x heads, or 0."""
    record = model._recorded_attention
    return 0 if record is None else record.width(model.num_members)


def _prefix_log_likelihoods(figures, index, prompt_mask, num_members):
    """Each member's log-likelihood `(batch, members)` of the tokens
    generated before `index`, read from the figures already written (the
    members' log-probability columns; prompt positions do not count):
    the expectation-of-products weights of the token at `index`."""
    start = len(FIGURES)
    member = figures[:, :, start : start + num_members]  # (batch, length, members)
    # Positions from the prompt mask's own shape (no `arange` of a
    # length: one that torch.compile traces as a symbol when dynamic).
    positions = ops.cumsum(ops.ones_like(prompt_mask, dtype="int32"), axis=1) - 1
    before = ops.logical_and(positions < index, ops.logical_not(prompt_mask))
    return ops.sum(ops.where(ops.expand_dims(before, -1), member, 0.0), axis=1)


def _start(padding_mask):
    """The first position to generate: the shortest prompt's length."""
    lengths = ops.sum(ops.cast(padding_mask, "int32"), axis=-1)
    return ops.cast(ops.min(lengths), "int32")


def _finished(prompt, prompt_mask, stop_token_ids):
    """Whether every row holds a stop token after its prompt."""
    if stop_token_ids is None:
        return ops.convert_to_tensor(False)
    ends = any_equal(prompt, stop_token_ids, ops.logical_not(prompt_mask))
    return ops.all(ops.any(ends, axis=-1))


def generate_batch(
    model,
    sampler,
    inputs,
    stop_token_ids,
    step=None,
    prefill_to=None,
    prefill_block=None,
    prompts_pass=None,
):
    """One generation of a batch of padded prompts.

    Args:
        model: a `LoRAEnsembleCausalLM`.
        sampler: a keras-hub `Sampler`.
        inputs: dict of `token_ids` and `padding_mask` `(batch, length)`.
        stop_token_ids: `None` or a tuple of token ids.
        step: the loop body to run in a Python loop (PyTorch: `loop_step`,
            compiled or not); `None` runs `ops.while_loop` through the
            sampler's `run_loop` (JAX and TensorFlow, inside one compiled
            program).
        prefill_to: `None` or a Python int, the positions the prompts'
            pass runs over (`prefill_length`).
        prefill_block: `None` or a Python int, the positions of one block
            of the prompts' pass (`prefill`).
        prompts_pass: `None` (`prefill`) or the prompts' pass compiled,
            `(token_ids, prompt_mask, prefill_to) -> (hidden, cache)`.

    Returns:
        dict: `token_ids`, `padding_mask` (as keras-hub returns them) and
        `figures` `(batch, length, figures)` (zero at prompt positions).
    """
    token_ids = ops.convert_to_tensor(inputs["token_ids"], "int32")
    prompt_mask = ops.cast(ops.convert_to_tensor(inputs["padding_mask"]), "bool")
    if prompts_pass is None:
        hidden, cache = prefill(model, token_ids, prompt_mask, prefill_to, prefill_block)
    else:
        hidden, cache = prompts_pass(token_ids, prompt_mask, prefill_to)
    index = _start(prompt_mask)
    batch, length = ops.shape(token_ids)
    if not isinstance(sampler, LOOP_SAMPLERS):
        token_ids = sampler(
            next=ensemble_next(model, prompt_mask),
            prompt=token_ids,
            cache=cache,
            index=index,
            mask=prompt_mask,
            stop_token_ids=stop_token_ids,
            hidden_states=hidden,
            model=model,
        )
        figures = model._teacher_forced_figures(token_ids, prompt_mask)
    else:
        width = model._num_figures + _attention_width(model)
        figures = ops.zeros((batch, length, width), "float32")
        loop_vars = (token_ids, cache, index, figures)
        if step is None:
            body = loop_step(model, sampler)
            token_ids, _, _, figures = sampler.run_loop(
                lambda p, c, i, f: ops.logical_not(_finished(p, prompt_mask, stop_token_ids)),
                lambda p, c, i, f: body(p, c, i, f, prompt_mask),
                loop_vars=loop_vars,
                maximum_iterations=length - index,
                model=model,
            )
        else:
            for _ in range(int(length - index)):
                if stop_token_ids is not None and bool(
                    _finished(loop_vars[0], prompt_mask, stop_token_ids)
                ):
                    break
                loop_vars = step(*loop_vars, prompt_mask)
            token_ids, _, _, figures = loop_vars
    return {
        "token_ids": token_ids,
        "padding_mask": output_padding_mask(token_ids, prompt_mask, stop_token_ids),
        "figures": figures,
    }

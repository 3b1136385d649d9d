"""Teacher-forced figures of a LoRA-Ensemble causal LM: the per-token
figures of given sequences from one pass of the backbone, the vocabulary
projection and the figures computed a chunk of positions at a time
(`LoRAEnsembleCausalLM.score_uncertainty`, and the figures of beam and
contrastive search, whose loops keras-hub runs)."""

from keras import ops

from ensemble_zoo.models.lora_ensemble.causal_lm.decode_engine import repeat_rows
from ensemble_zoo.models.lora_ensemble.causal_lm.decode_engine import split_members
from ensemble_zoo.ops.token_uncertainty import token_log_probs
from ensemble_zoo.ops.token_uncertainty import vocabulary_log_softmax


def chunked_figures(model, token_ids, padding_mask, chunk_size=128, prompt_mask=None):
    """Teacher-forced figures `(batch, length, figures)` (position 0:
    zeros): the backbone runs once over the sequence, the vocabulary
    projection and the figures `chunk_size` positions at a time, so
    that the member logits `(batch, members, tokens, vocabulary)` are
    never held whole. The members' prefix log-likelihoods (the
    expectation-of-products weights) sum the tokens at positions
    `>= 1` inside `padding_mask` and outside `prompt_mask`, carried
    from chunk to chunk."""
    tiled = {
        "token_ids": repeat_rows(token_ids, model.num_members),
        "padding_mask": repeat_rows(padding_mask, model.num_members),
    }
    hidden = model.backbone(tiled, training=False)
    length = int(token_ids.shape[1])
    counted = ops.cast(padding_mask, "float32")
    if prompt_mask is not None:
        counted = counted * (1.0 - ops.cast(prompt_mask, "float32"))
    batch = ops.shape(token_ids)[0]
    chunks = [ops.zeros((batch, 1, model._num_figures), "float32")]
    prefix = ops.zeros((batch, model.num_members), "float32")
    for start in range(0, length - 1, chunk_size):
        stop = min(start + chunk_size, length - 1)
        part = hidden[:, start:stop]
        member_logits = split_members(
            model.backbone.token_embedding(part, reverse=True), model.num_members
        )
        tokens = token_ids[:, start + 1 : stop + 1]
        log_p = vocabulary_log_softmax(member_logits)
        taken = token_log_probs(log_p, tokens)["member_log_probs"]
        taken = taken * ops.expand_dims(counted[:, start + 1 : stop + 1], 1)
        before = ops.expand_dims(prefix, -1) + ops.cumsum(taken, axis=-1) - taken
        prefix = prefix + ops.sum(taken, axis=-1)
        chunks.append(
            model._figures(member_logits, tokens, split_members(part, model.num_members), before)
        )
    return ops.concatenate(chunks, axis=1)

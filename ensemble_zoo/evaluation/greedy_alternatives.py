"""Claim-conditioned probability of greedy answers: each generated token's
top alternatives and their NLI classes, as lm-polygraph computes them.

lm-polygraph's `ClaimConditionedProbability` (CCP, arXiv 2403.04696)
reads, at each generated token, the model's top 10 tokens by
probability with the generated one first (`greedy_tokens_alternatives`)
and the NLI class of each alternative's word against the generated word,
both ways (`GreedyAlternativesNLICalculator`: each token decoded alone,
stripped of punctuation, spaces and newlines; the class is the NLI
model's most probable of entailment, neutral and contradiction). Here the
alternatives are those of the ensemble's predictive distribution `p̄`
at the greedy answer's tokens, read by one teacher-forced pass over the
answers (for greedy answers the decode's own distribution, so no second
decode); `ez.metrics.claim_conditioned_probability` combines them.
"""

import string

import numpy as np
from keras import ops

from ensemble_zoo.metrics.claim_estimators import claim_conditioned_probability
from ensemble_zoo.utils.backend import no_gradients

#: lm-polygraph's number of alternatives per token, the generated one
#: included.
TOP_K = 10
#: Values of member logits one teacher-forced pass holds (256 MiB in
#: float32): prompts are scored that many rows at a time.
LOGIT_BUDGET = 2**26


def greedy_alternatives(model, token_ids, padding_mask, k=TOP_K):
    """Each token's top `k` alternatives under the ensemble's predictive
    distribution, the token itself first.

    Args:
        model: a `LoRAEnsembleCausalLM`.
        token_ids: int array `(batch, length)`, prompts and answers.
        padding_mask: bool array `(batch, length)`.
        k: int, alternatives per token (at most the vocabulary).

    Returns:
        `(log_probs, ids)`: float64 and int arrays `(batch, length, k)`:
        at position `t >= 1`, `log p̄` of token `t` given the tokens
        before it (column 0) and of the `k - 1` most probable other
        tokens, in decreasing probability, and their ids; position 0 is
        `-inf` and 0.
    """
    token_ids = np.asarray(token_ids)
    padding_mask = np.asarray(padding_mask)
    batch, length = token_ids.shape
    vocabulary = model.backbone.vocabulary_size
    k = min(int(k), vocabulary)
    rows = max(1, LOGIT_BUDGET // (model.num_members * length * vocabulary))
    log_probs = np.full((batch, length, k), -np.inf)
    ids = np.zeros((batch, length, k), np.int64)
    for start in range(0, batch, rows):
        part = slice(start, start + rows)
        with no_gradients():
            logits = model({"token_ids": token_ids[part], "padding_mask": padding_mask[part]})
            member = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
            mean = ops.logsumexp(member, axis=1) - np.log(model.num_members)
            mean = ops.convert_to_numpy(mean)
        # Float32 round-off can put a certain token's log-probability a
        # hair above 0 (7 members: log(7 e^0) - log 7 = 1.2e-7).
        mean = np.minimum(np.asarray(mean, np.float64)[:, :-1], 0.0)  # predicts t + 1
        taken = token_ids[part, 1:]
        top = np.argpartition(-mean, k - 1, axis=-1)[..., :k]
        order = np.take_along_axis(
            top, np.argsort(-np.take_along_axis(mean, top, axis=-1), axis=-1, kind="stable"), -1
        )
        # The taken token first, then the most probable others.
        others = np.where(order == taken[..., None], -1, order)
        others = np.stack([row[row >= 0][: k - 1] for row in others.reshape(-1, k)])
        chosen = np.concatenate([taken.reshape(-1, 1), others], axis=-1)
        chosen = chosen.reshape(taken.shape + (k,))
        ids[part, 1:] = chosen
        log_probs[part, 1:] = np.take_along_axis(mean, chosen, axis=-1)
    return log_probs, ids


def _strip(word):
    return word.strip(string.punctuation + " \n")


def alternative_classes(ids, mask, decode, nli):
    """The NLI classes of each counted token's alternatives against it.

    Args:
        ids: int array `(batch, length, k)`, `greedy_alternatives`' ids.
        mask: bool array `(batch, length)`, the counted tokens.
        decode: callable `(token id) -> str`.
        nli: callable `(first, second) -> (entailment, neutral,
            contradiction)` probabilities.

    Returns:
        `(forward, backward)`: int arrays `(batch, length, k)` of classes
        0 (entailment), 1 (neutral), 2 (contradiction) of (generated
        word, alternative word) and (alternative word, generated word);
        0 where not counted. Each word and pair is decoded and asked once.
    """
    words, classes = {}, {}

    def word(token):
        if token not in words:
            words[token] = _strip(decode(int(token)))
        return words[token]

    def classify(first, second):
        if (first, second) not in classes:
            classes[(first, second)] = int(np.argmax(nli(first, second)))
        return classes[(first, second)]

    forward = np.zeros(ids.shape, np.int64)
    backward = np.zeros(ids.shape, np.int64)
    for b, t in zip(*np.nonzero(np.asarray(mask))):
        taken = word(ids[b, t, 0])
        for a in range(1, ids.shape[-1]):
            other = word(ids[b, t, a])
            forward[b, t, a] = classify(taken, other)
            backward[b, t, a] = classify(other, taken)
    return forward, backward


def ccp_of_answers(model, outputs, nli, k=TOP_K):
    """lm-polygraph's CCP of each greedy answer of `outputs` (`generate(...,
    return_uncertainty=True)` of `model`, which has a preprocessor):
    float64 `(batch,)`, higher = more uncertain."""
    mask = np.asarray(outputs["generated_mask"], bool)
    log_probs, ids = greedy_alternatives(model, outputs["token_ids"], outputs["padding_mask"], k)
    tokenizer = model.preprocessor.tokenizer

    def decode(token):
        text = tokenizer.detokenize([token])
        text = ops.convert_to_numpy(text) if not isinstance(text, (str, bytes)) else text
        text = text.item() if hasattr(text, "item") else text
        return text.decode() if isinstance(text, bytes) else str(text)

    forward, backward = alternative_classes(ids, mask, decode, nli)
    return claim_conditioned_probability(log_probs, forward, backward, mask)

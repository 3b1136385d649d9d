"""Sampling-based uncertainty of a LoRA-Ensemble causal LM.

`sample_uncertainty(model, prompts, num_samples)` draws `num_samples`
answers per prompt in one batched decode (every prompt repeated
`num_samples` times, every row run by all members), groups them by
meaning and scores each prompt with the estimators of
`ensemble_zoo.metrics.semantic_sets` and `lexical_similarity`.

How the ensemble samples. Each answer is drawn token by token from the
ensemble's predictive distribution `p̄ = mean_m p_m` (a random sampler
over what `generate` decodes), so the probability of an answer under the
distribution it was drawn from is the product of its tokens' `p̄`: the
log-likelihood that semantic entropy weighs each answer by (Kuhn et al.,
arXiv:2302.09664, use the likelihood of the model that sampled) is the
decode loop's `log_likelihood`, exact, with no second pass. Every sample
sees every member at every token: the members shape each answer together
rather than each member drawing whole answers of its own, which would
need one KV stream per member and answer and a teacher-forced pass for
the mixture's likelihood. The members' own sequence log-likelihoods of
each answer come with it (`member_log_likelihoods`).

Equivalence. `"exact"` compares answers after SQuAD's normalisation
(lower case, punctuation and the articles a / an / the removed,
whitespace collapsed; on token ids, the generated ids without the stop
token); any `callable(first, second) -> bool` (for instance an NLI model's
"first entails second") is called on every ordered pair of a prompt's
answers, and two answers are equivalent when it holds both ways.
"""

import re
import string

import keras_hub
import numpy as np
from keras import ops

from ensemble_zoo.metrics.lexical_similarity import lexical_similarity
from ensemble_zoo.metrics.lexical_similarity import rouge_l
from ensemble_zoo.metrics.sampled_answer_estimators import monte_carlo_sequence_entropy
from ensemble_zoo.metrics.sampled_answer_estimators import sar
from ensemble_zoo.metrics.sampled_answer_estimators import sentence_sar
from ensemble_zoo.metrics.semantic_sets import number_of_semantic_sets
from ensemble_zoo.metrics.semantic_sets import semantic_classes
from ensemble_zoo.metrics.semantic_sets import semantic_entropy
from ensemble_zoo.metrics.similarity_estimators import degree_matrix
from ensemble_zoo.metrics.similarity_estimators import eccentricity
from ensemble_zoo.metrics.similarity_estimators import eigenscore
from ensemble_zoo.metrics.similarity_estimators import kernel_language_entropy
from ensemble_zoo.metrics.similarity_estimators import laplacian_eigenvalue_sum
from ensemble_zoo.metrics.similarity_estimators import luq
from ensemble_zoo.utils.validation import check_positive_int

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(answer):
    """SQuAD's answer normalisation: lower case, no punctuation, no
    articles, single spaces. Token-id answers (tuples) are returned as
    they are."""
    if not isinstance(answer, str):
        return answer
    answer = _ARTICLES.sub(" ", answer.lower().translate(_PUNCTUATION))
    return " ".join(answer.split())


def equivalence_matrix(answers, equivalence="exact"):
    """`(prompts, samples, samples)` bool: `[p, i, j]` whether answer `i`
    of prompt `p` is equivalent to answer `j` (see the module docstring);
    the diagonal is true."""
    if equivalence == "exact":

        def equivalence(first, second):
            return normalize_answer(first) == normalize_answer(second)
    elif not callable(equivalence):
        raise TypeError(
            '`equivalence` must be "exact" or a callable(first, second) -> bool; '
            f"got {equivalence!r}."
        )
    prompts, samples = len(answers), len(answers[0])
    out = np.eye(samples, dtype=bool)[None].repeat(prompts, axis=0)
    for p, row in enumerate(answers):
        for i in range(samples):
            for j in range(samples):
                if i != j:
                    out[p, i, j] = bool(equivalence(row[i], row[j]))
    return out


def pairwise_scores(answers, score, name):
    """`(prompts, samples, samples, ...)` float64: `score(a_i, a_j)` for
    every ordered pair of a prompt's answers, the diagonal included (as
    lm-polygraph's similarity matrices hold it); `name` names `score` in
    errors."""
    out = []
    for row in answers:
        values = [[np.asarray(score(a, b), np.float64) for b in row] for a in row]
        out.append(values)
    out = np.asarray(out, np.float64)
    if not np.isfinite(out).all():
        raise ValueError(f"`{name}` returned NaN or infinite values.")
    return out


def nli_probabilities(answers, nli):
    """`(prompts, samples, samples, 3)`: `nli(a_i, a_j)`, the entailment,
    neutral and contradiction probabilities of every ordered pair."""
    out = pairwise_scores(answers, nli, "nli")
    if out.shape[3:] != (3,) or out.min() < 0 or np.abs(out.sum(-1) - 1).max() > 1e-3:
        raise ValueError(
            "`nli(first, second)` must return the probabilities (entailment, neutral, "
            f"contradiction), three values summing to 1; got values of shape {out.shape[3:]}."
        )
    return out


def nli_estimators(probabilities):
    """lm-polygraph's NLI-graph estimators of each prompt's answers
    (`ensemble_zoo.metrics.similarity_estimators`), from
    `nli_probabilities`: the graph ones on the entailment probabilities
    (lm-polygraph's default affinity), LUQ on the log-probabilities (the
    softmax's shared denominator cancels in its `e / (e + c)`)."""
    entailment, contradiction = probabilities[..., 0], probabilities[..., 2]
    # A probability of 0 as a log-probability far below any other.
    log_e, log_c = (np.log(np.maximum(p, 1e-300)) for p in (entailment, contradiction))
    return {
        "degree_matrix": degree_matrix(entailment),
        "eccentricity": eccentricity(entailment),
        "laplacian_eigenvalue_sum": laplacian_eigenvalue_sum(entailment),
        "kernel_language_entropy": kernel_language_entropy(entailment, contradiction),
        "luq": luq(log_e, log_c),
    }


def _repeat_prompts(prompts, num_samples):
    """The prompts, each repeated `num_samples` times in a row, and their
    count."""
    if isinstance(prompts, str):
        prompts = [prompts]
    if isinstance(prompts, dict):
        if set(prompts) != {"token_ids", "padding_mask"}:
            raise ValueError(
                "`prompts` given as a dict must hold `token_ids` and `padding_mask` "
                f"(batch, length); got keys {sorted(prompts)}."
            )
        arrays = {k: np.asarray(v) for k, v in prompts.items()}
        if arrays["token_ids"].ndim != 2:
            raise ValueError(
                "`prompts['token_ids']` must be (batch, length); got shape "
                f"{arrays['token_ids'].shape}."
            )
        count = arrays["token_ids"].shape[0]
        return {k: np.repeat(v, num_samples, axis=0) for k, v in arrays.items()}, count
    if isinstance(prompts, (list, tuple)) and prompts and all(isinstance(p, str) for p in prompts):
        return [p for p in prompts for _ in range(num_samples)], len(prompts)
    raise TypeError(
        "`prompts` must be a string, a non-empty list of strings (with a "
        "preprocessor attached) or a dict of `token_ids` and `padding_mask`; "
        f"got {type(prompts).__name__}."
    )


def answers_of(outputs, stop_token_ids):
    """Answers as the model returned them: strings with a preprocessor,
    otherwise tuples of the generated token ids without stop tokens."""
    output = outputs["output"]
    if not isinstance(output, dict):
        return [a.decode() if isinstance(a, bytes) else str(a) for a in output]
    stops = set(stop_token_ids or ())
    return [
        tuple(int(t) for t in ids[mask] if int(t) not in stops)
        for ids, mask in zip(outputs["token_ids"], outputs["generated_mask"])
    ]


def token_similarities(model, outputs, stop_token_ids, similarity):
    """`(rows, length)` float64: for each generated token of each answer,
    the similarity of the answer without that token to the whole answer
    (lm-polygraph's `token_similarity` of SAR: its answers decoded without
    each token, compared by a sentence-similarity model), zero elsewhere.
    Both texts are decoded the same way: the tokenizer's `detokenize`
    with a preprocessor, the token ids (stop tokens dropped) without one.
    A stop token's own row is 1 (dropping it changes nothing) where
    `stop_token_ids` names it."""
    ids, mask = outputs["token_ids"], outputs["generated_mask"]
    stops = set(stop_token_ids or ())
    decode = None
    if model.preprocessor is not None:
        tokenizer = model.preprocessor.tokenizer

        def decode(rows):
            texts = tokenizer.detokenize(rows) if rows else []
            return [t.decode() if isinstance(t, bytes) else str(t) for t in texts]

    places, wholes, variants = [], [], []
    for r in range(ids.shape[0]):
        positions = np.flatnonzero(mask[r])
        tokens = [int(t) for t in ids[r, positions]]
        whole = [t for t in tokens if t not in stops]
        wholes.append(whole)
        for k, position in enumerate(positions):
            places.append((r, position))
            variants.append([t for j, t in enumerate(tokens) if j != k and t not in stops])
    if decode is None:
        wholes, variants = [tuple(w) for w in wholes], [tuple(v) for v in variants]
    else:
        wholes, variants = decode(wholes), decode(variants)
    out = np.zeros(mask.shape, np.float64)
    for (r, position), variant in zip(places, variants):
        whole = wholes[r]
        out[r, position] = 1.0 if variant == whole else float(similarity(variant, whole))
    if not np.isfinite(out).all():
        raise ValueError("`similarity` returned NaN or infinite values.")
    return out


def answer_embeddings(model, outputs):
    """lm-polygraph's `sample_embeddings` of EigenScore: each answer's
    hidden state entering the middle decoder block (`L // 2`, a Hugging
    Face model's `hidden_states[L // 2]`) at the last position a decode
    step read, the one before the answer's last token (the state that
    predicted it), the members' mean; one teacher-forced pass
    (`member_forward.member_block_input`, compiled for the backend).

    Args:
        model: a `LoRAEnsembleCausalLM`.
        outputs: dict, `generate(..., return_uncertainty=True)`'s
            (`token_ids`, `padding_mask`).

    Returns:
        float64 array `(rows, hidden_dim)`.
    """
    token_ids = np.asarray(outputs["token_ids"], "int32")
    padding = np.asarray(outputs["padding_mask"], bool)
    last = np.maximum(padding.shape[1] - 1 - np.argmax(padding[:, ::-1], axis=1) - 1, 0)
    hidden = model._block_input_function()(token_ids, padding, last.astype("int32"))
    return np.asarray(ops.convert_to_numpy(hidden), np.float64)


def default_sampler(model, seed=None):
    """The random sampler (temperature 1, `seed`) that `sample_uncertainty`
    and `evaluate_generation` use by default: one per model and seed, kept
    with the model's compiled decoders (a new sampler object would compile
    a new decode loop)."""
    samplers = model.__dict__.setdefault("_sampling_samplers", {})
    if seed not in samplers:
        samplers[seed] = keras_hub.samplers.RandomSampler(temperature=1.0, seed=seed)
    return samplers[seed]


def sample_uncertainty(
    model,
    prompts,
    num_samples=10,
    equivalence="exact",
    max_length=None,
    stop_token_ids="auto",
    sampler=None,
    similarity=None,
    nli=None,
):
    """Sampling-based estimators per prompt: semantic entropy, semantic
    sets, lexical similarity, SentenceSAR, SAR, the Monte-Carlo sequence
    entropies and, with an NLI model, lm-polygraph's NLI-graph estimators.

    See the module docstring for how the answers are drawn and compared.

    Args:
        model: a `LoRAEnsembleCausalLM`.
        prompts: a string or a list of strings (the model needs a
            preprocessor), or a dict of `token_ids` and `padding_mask`
            `(prompts, length)` as `generate` takes them.
        num_samples: int >= 2, answers drawn per prompt.
        equivalence: `"exact"` (default) or `callable(first, second) ->
            bool`.
        max_length, stop_token_ids: as for `generate`.
        sampler: a keras-hub sampler; defaults to `RandomSampler` at
            temperature 1 (the ensemble's predictive distribution). Pass
            one with a `seed` to draw the same answers again.
        similarity: `callable(first, second) -> float` in `[0, 1]`, the
            similarity of two answers for `lexical_similarity`,
            `sentence_sar` and `sar` (lm-polygraph's SentenceSAR uses a
            cross-encoder's); defaults to ROUGE-L. `sar` calls it once per
            generated token.
        nli: optional `callable(first, second) -> (entailment, neutral,
            contradiction)` probabilities, called on every ordered pair of
            a prompt's answers (diagonal included).

    Returns:
        dict: `answers`, a list over prompts of `num_samples` answers
        (strings, or tuples of token ids without a preprocessor);
        `token_ids` and `generated_mask` `(prompts, samples, length)`, the
        whole sequences and their generated tokens;
        `log_likelihoods` `(prompts, samples)`, each answer's log-likelihood
        under the ensemble; `member_log_likelihoods` `(prompts, samples,
        members)`; `equivalent` `(prompts, samples, samples)`; `classes`
        `(prompts, samples)`; and per prompt (higher = more uncertain)
        `semantic_entropy`, `number_of_semantic_sets`,
        `lexical_similarity`, `sentence_sar` (the answers' ensemble
        likelihoods and `similarity`), `sar` (lm-polygraph's SAR: SentenceSAR
        with each answer's probability from its tokens' likelihoods weighed
        by their relevance, the similarity of the answer without each token,
        `token_similarities`), `monte_carlo_sequence_entropy` and
        `monte_carlo_normalized_sequence_entropy` (per generated token,
        the stop token included), `eigenscore` (lm-polygraph's
        `EigenScore` of `answer_embeddings`: one more pass of the answers
        to the middle block). With `nli`: `nli_probabilities`
        `(prompts, samples, samples, 3)` and `degree_matrix`,
        `eccentricity`, `laplacian_eigenvalue_sum`,
        `kernel_language_entropy` and `luq` (`nli_estimators`).
    """
    if isinstance(num_samples, bool) or check_positive_int(num_samples, "num_samples") < 2:
        raise ValueError(
            f"`num_samples` must be an int >= 2 (answers to compare); got {num_samples!r}."
        )
    if equivalence != "exact" and not callable(equivalence):
        raise TypeError(
            '`equivalence` must be "exact" or a callable(first, second) -> bool; '
            f"got {equivalence!r}."
        )
    for value, name in ((similarity, "similarity"), (nli, "nli")):
        if value is not None and not callable(value):
            raise TypeError(f"`{name}` must be callable(first, second); got {value!r}.")
    if sampler is None:
        sampler = default_sampler(model)
    elif not isinstance(sampler, keras_hub.samplers.Sampler):
        raise TypeError(f"`sampler` must be a keras-hub `Sampler`; got {sampler!r}.")
    repeated, count = _repeat_prompts(prompts, num_samples)
    if stop_token_ids == "auto" and model.preprocessor is not None:
        tokenizer = model.preprocessor.tokenizer
        stops = (tokenizer.end_token_id,)
    else:
        stops = None if stop_token_ids == "auto" else stop_token_ids
    outputs = model._generate(repeated, max_length, stop_token_ids, True, True, sampler=sampler)
    flat = answers_of(outputs, stops)
    answers = [flat[p * num_samples : (p + 1) * num_samples] for p in range(count)]
    shape = (count, num_samples)
    log_likelihoods = outputs["log_likelihood"].astype(np.float64).reshape(shape)
    equivalent = equivalence_matrix(answers, equivalence)
    classes = semantic_classes(equivalent)
    generated_mask = outputs["generated_mask"].reshape(shape + (-1,))
    similarities = pairwise_scores(answers, similarity or rouge_l, "similarity")
    out = {
        "answers": answers,
        "token_ids": outputs["token_ids"].reshape(shape + (-1,)),
        "generated_mask": generated_mask,
        "log_likelihoods": log_likelihoods,
        "member_log_likelihoods": outputs["member_log_likelihoods"]
        .astype(np.float64)
        .reshape(shape + (-1,)),
        "equivalent": equivalent,
        "classes": classes,
        "semantic_entropy": semantic_entropy(log_likelihoods, classes),
        "number_of_semantic_sets": number_of_semantic_sets(equivalent),
        "lexical_similarity": lexical_similarity(answers, similarity),
        "sentence_sar": sentence_sar(log_likelihoods, similarities),
        "sar": sar(
            outputs["log_prob"].astype(np.float64).reshape(shape + (-1,)),
            token_similarities(model, outputs, stops, similarity or rouge_l).reshape(shape + (-1,)),
            generated_mask,
            similarities,
        ),
        "monte_carlo_sequence_entropy": monte_carlo_sequence_entropy(log_likelihoods),
        "monte_carlo_normalized_sequence_entropy": monte_carlo_sequence_entropy(
            log_likelihoods, generated_mask.sum(-1)
        ),
        "eigenscore": eigenscore(answer_embeddings(model, outputs).reshape(shape + (-1,))),
    }
    if nli is not None:
        out["nli_probabilities"] = nli_probabilities(answers, nli)
        out.update(nli_estimators(out["nli_probabilities"]))
    return out

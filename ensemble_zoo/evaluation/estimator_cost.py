"""What each estimator of `evaluate_generation` costs: the extra time per
generated token over a plain greedy decode of the same prompts.

The reference, `plain`, is keras-hub's own greedy `generate` of the plain
model (the ensemble's frozen base model, `base_causal_lm()`; a single
model itself), what a user runs without any uncertainty. Each estimator
costs the greedy decode whose answers it scores (`figures`: the model's
decode with its per-token figures, `generate(...,
return_uncertainty=True)`) less the plain one, plus the work it reads
beyond it:

- the sequence estimators and the loss prediction: nothing more;
- `sampling`: `sample_uncertainty`'s draws (and its NLI calls, given an
  NLI model), for the sampling-based estimators and CoCoA;
- `greedy_nli`: semantic density's NLI calls on the greedy answer
  against the samples (on top of the draws);
- `alternatives`: claim-conditioned probability's teacher-forced pass for
  each token's top alternatives and their NLI calls
  (`greedy_alternatives`);
- `prompt_free`: the pointwise mutual information's teacher-forced pass
  of the answers without their prompts (`prompt_free_scoring`);
- `eliciting`: CSL's pass of the eliciting prompts (`eliciting_prompt`);
- `relevance`: TokenSAR's similarity of each answer without each of its
  tokens.

Each stage is timed once on the first batch of prompts after the
evaluation has run (compiled programs warm; the plain decode called twice
and timed the second time), and the time is divided by the greedy
answers' generated tokens. An ensemble's cost thus includes its members;
where the zoo's decode engine is quicker than keras-hub's own, an
estimator's extra time can be below 0.
"""

import time

import numpy as np


def timed(function):
    """`(function(), seconds it took)`."""
    start = time.perf_counter()
    out = function()
    return out, time.perf_counter() - start


def generated_tokens(out):
    """The generated tokens of a `generate(..., return_uncertainty=True)`
    output: its `generated_mask`'s count."""
    return int(np.sum(np.asarray(out["generated_mask"])))


def estimator_costs(
    times,
    tokens,
    estimators,
    sampling=(),
    greedy_nli=(),
    alternatives=(),
    prompt_free=(),
    eliciting=(),
    relevance=(),
):
    """Extra milliseconds per generated token of each estimator.

    Args:
        times: dict of stage seconds: `plain`, `figures`, and where
            measured `sampling`, `greedy_nli`, `alternatives`,
            `prompt_free`, `eliciting` and `relevance` (see the module
            docstring).
        tokens: int, the greedy answers' generated tokens.
        estimators: the names of every estimator to cost.
        sampling: the names that read the samples (sampling-based
            estimators, CoCoA).
        greedy_nli: the names that read the samples and the greedy NLI
            calls.
        alternatives: the names that read the greedy answer's top
            alternatives and their NLI calls.
        prompt_free: the names that read the answers scored without their
            prompts.
        eliciting: the names that read the eliciting prompts' pass.
        relevance: the names that read the tokens' relevance.

    Returns:
        dict `{name: ms}`: `figures - plain`, plus the stages the name
        reads, per generated token.
    """
    tokens = max(int(tokens), 1)
    base = times["figures"] - times["plain"]
    extra = {
        **{name: times.get("sampling", 0.0) for name in sampling},
        **{name: times.get("sampling", 0.0) + times.get("greedy_nli", 0.0) for name in greedy_nli},
        **{name: times.get("alternatives", 0.0) for name in alternatives},
        **{name: times.get("prompt_free", 0.0) for name in prompt_free},
        **{name: times.get("eliciting", 0.0) for name in eliciting},
        **{name: times.get("relevance", 0.0) for name in relevance},
    }
    return {name: 1000.0 * (base + extra.get(name, 0.0)) / tokens for name in estimators}

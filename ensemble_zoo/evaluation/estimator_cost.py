"""What each estimator of `evaluate_generation` costs: the extra time per
generated token over a plain greedy decode of the same prompts.

The estimators come from four kinds of work, each timed once on the
first batch of prompts after the evaluation ran it (so that compiled
programs are warm; the plain decode, which the evaluation does not run,
is called twice and timed the second time):

- `plain`: the greedy decode without figures, the reference;
- `figures`: the greedy decode with the per-token figures
  (`generate(..., return_uncertainty=True)`): every sequence estimator
  and the loss prediction cost its time less the plain decode's;
- `sampling`: `sample_uncertainty`'s draws (and its NLI calls, given an
  NLI model): the sampling-based estimators cost all of it, the greedy
  answer being the plain decode's;
- `greedy_nli`: semantic density's NLI calls on the greedy answer
  against the samples;
- `alternatives`: claim-conditioned probability's teacher-forced pass
  for each token's top alternatives and their NLI calls
  (`greedy_alternatives`).

CoCoA reads the greedy answer's figures and the samples (`figures` less
`plain`, plus `sampling`); semantic density the samples and its NLI
calls. The time is divided by the greedy answers' generated tokens.
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
    or plain output: the `generated_mask`'s count, or the answers'
    non-padding tokens after the prompts."""
    return int(np.sum(np.asarray(out["generated_mask"])))


def estimator_costs(
    times, tokens, estimators, sampling=(), cocoa=(), greedy_nli=(), alternatives=()
):
    """Extra milliseconds per generated token of each estimator.

    Args:
        times: dict of stage seconds: `plain`, `figures`, and where
            measured `sampling` and `greedy_nli` (see the module
            docstring).
        tokens: int, the greedy answers' generated tokens.
        estimators: the names of every estimator to cost.
        sampling: the names that read only the samples.
        cocoa: the names that read the greedy figures and the samples.
        greedy_nli: the names that read the samples and the greedy NLI
            calls.
        alternatives: the names that read the greedy answer's top
            alternatives and their NLI calls (`alternatives` seconds).

    Returns:
        dict `{name: ms}`; an estimator of none of the groups reads the
        greedy figures.
    """
    tokens = max(int(tokens), 1)
    figures = max(times["figures"] - times["plain"], 0.0)
    samples = times.get("sampling", 0.0)
    costs = {}
    for name in estimators:
        if name in sampling:
            seconds = samples
        elif name in cocoa:
            seconds = figures + samples
        elif name in greedy_nli:
            seconds = samples + times.get("greedy_nli", 0.0)
        elif name in alternatives:
            seconds = times.get("alternatives", 0.0)
        else:
            seconds = figures
        costs[name] = 1000.0 * seconds / tokens
    return costs

"""Sampling-based uncertainty: answers grouped by meaning.

Several answers are sampled per prompt; an equivalence relation (exact
match after normalisation, or an NLI model's bidirectional entailment)
groups them into semantic classes. The functions here take that relation
as a boolean matrix per prompt, `equivalent[p, i, j]` = "answer `i` of
prompt `p` means answer `j`", and the answers' sequence log-likelihoods.
They are array functions (NumPy, float64) with no model inside, oriented
like every uncertainty score here: higher = more uncertain.

- `semantic_classes`: the classes of Kuhn et al., "Semantic uncertainty:
  linguistic invariances for uncertainty estimation in natural language
  generation" (ICLR 2023, arXiv:2302.09664), Algorithm 1: each answer, in
  sampling order, joins the first class whose first answer it is
  equivalent to in both directions (`equivalent[i, j]` and
  `equivalent[j, i]`), or opens a new class.
- `semantic_entropy`: their Monte-Carlo estimate over the sampled answers
  `s_1..s_N`, `-(1/N) sum_j log p(C(s_j) | x)`, where a class's
  probability is the sum of its answers' likelihoods, `log p(C | x) =
  logsumexp_{s in C} log p(s | x)` (unnormalised, as lm-polygraph's
  `SemanticEntropy` computes it; pass length-normalised log-likelihoods
  for their length-normalised variant). Every sampled answer counts, so an
  answer drawn several times adds its likelihood once per draw, as in
  lm-polygraph and Kuhn et al.'s code: a class drawn repeatedly can sum to
  more than 1 and the estimate of a confident prompt can fall below 0. It
  ranks prompts (higher = more uncertain); it is not a normalised entropy.
- `number_of_semantic_sets`: Lin et al., "Generating with confidence"
  (arXiv:2305.19187): the number of connected components of the graph
  whose edges join answers equivalent in both directions (as
  lm-polygraph's `NumSemSets` counts them; unlike `semantic_classes`, a
  chain of equivalences joins one set).
"""

import numpy as np


def semantic_classes(equivalent):
    """Semantic class of each answer (Kuhn et al.'s greedy grouping).

    Args:
        equivalent: bool array `(prompts, answers, answers)`; entry
            `[p, i, j]` says whether answer `i` of prompt `p` entails (or
            equals, after normalisation) answer `j`. The diagonal is
            ignored.

    Returns:
        int array `(prompts, answers)`: class ids `0, 1, ...` in order of
        first appearance.

    Example:

    ```python
    import numpy as np
    import ensemble_zoo as ez

    answers = [["42", "42", "41"]]
    equivalent = np.array([[[a == b for b in row] for a in row] for row in answers])
    ez.metrics.semantic_classes(equivalent)  # [[0, 0, 1]]
    ```
    """
    equivalent = _checked_relation(equivalent)
    both = equivalent & np.swapaxes(equivalent, 1, 2)
    prompts, answers, _ = both.shape
    classes = np.zeros((prompts, answers), np.int64)
    for p in range(prompts):
        first = []  # the first answer of each class
        for i in range(answers):
            for c, j in enumerate(first):
                if both[p, i, j]:
                    classes[p, i] = c
                    break
            else:
                classes[p, i] = len(first)
                first.append(i)
    return classes


def semantic_entropy(log_likelihoods, classes):
    """Semantic entropy of each prompt's sampled answers.

    Args:
        log_likelihoods: float array `(prompts, answers)`, each sampled
            answer's sequence log-likelihood `log p(s | x)` (for an
            ensemble's samples, under the ensemble).
        classes: int array `(prompts, answers)`, each answer's semantic
            class (`semantic_classes`, or any labelling).

    Returns:
        float64 array `(prompts,)`, `-(1/N) sum_j log p(C(s_j) | x)` (see
        the module docstring).

    Example:

    ```python
    import numpy as np
    import ensemble_zoo as ez

    log_likelihoods = np.log([[0.5, 0.2, 0.1]])
    ez.metrics.semantic_entropy(log_likelihoods, [[0, 0, 1]])
    # -(2 * log(0.7) + log(0.1)) / 3
    ```
    """
    ll = np.asarray(log_likelihoods, np.float64)
    classes = np.asarray(classes)
    if ll.ndim != 2 or ll.size == 0:
        raise ValueError(
            f"`log_likelihoods` must be a non-empty array (prompts, answers); got shape {ll.shape}."
        )
    if classes.shape != ll.shape:
        raise ValueError(
            f"`classes` must have the shape of `log_likelihoods` {ll.shape}; got {classes.shape}."
        )
    if classes.dtype.kind not in "iu":
        raise TypeError(f"`classes` must hold integer class ids; got dtype {classes.dtype}.")
    if np.isnan(ll).any() or np.isposinf(ll).any():
        raise ValueError("`log_likelihoods` must be finite or -inf (no NaN or +inf).")
    out = np.empty(ll.shape[0])
    for p in range(ll.shape[0]):
        log_class = {}
        for c in np.unique(classes[p]):
            members = ll[p, classes[p] == c]
            peak = members.max()
            log_class[c] = (
                peak + np.log(np.exp(members - peak).sum()) if np.isfinite(peak) else -np.inf
            )
        out[p] = -np.mean([log_class[c] for c in classes[p]])
    return out


def number_of_semantic_sets(equivalent):
    """Number of semantic sets among each prompt's sampled answers.

    Args:
        equivalent: bool array `(prompts, answers, answers)` as for
            `semantic_classes`.

    Returns:
        int array `(prompts,)`: connected components of the graph joining
        answers equivalent in both directions.

    Example:

    ```python
    import numpy as np
    import ensemble_zoo as ez

    answers = [["42", "42", "41"], ["7", "7", "7"]]
    equivalent = np.array([[[a == b for b in row] for a in row] for row in answers])
    ez.metrics.number_of_semantic_sets(equivalent)  # [2, 1]
    ```
    """
    equivalent = _checked_relation(equivalent)
    both = equivalent & np.swapaxes(equivalent, 1, 2)
    prompts, answers, _ = both.shape
    counts = np.zeros(prompts, np.int64)
    for p in range(prompts):
        seen = np.zeros(answers, bool)
        for start in range(answers):
            if seen[start]:
                continue
            counts[p] += 1
            stack = [start]
            seen[start] = True
            while stack:
                i = stack.pop()
                for j in np.flatnonzero(both[p, i] & ~seen):
                    seen[j] = True
                    stack.append(j)
    return counts


def _checked_relation(equivalent):
    relation = np.asarray(equivalent)
    if relation.dtype != bool:
        raise TypeError(
            "`equivalent` must be a bool array (prompts, answers, answers); got dtype "
            f"{relation.dtype}."
        )
    if relation.ndim != 3 or relation.shape[1] != relation.shape[2] or relation.shape[1] == 0:
        raise ValueError(
            "`equivalent` must have shape (prompts, answers, answers) with at least "
            f"one answer; got {relation.shape}."
        )
    return relation

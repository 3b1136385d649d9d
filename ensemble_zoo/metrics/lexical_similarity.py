"""Lexical similarity of sampled answers (Fomicheva et al., "Unsupervised
quality estimation for neural machine translation", TACL 2020; used for
LLMs by Kuhn et al., arXiv:2302.09664, and lm-polygraph's
`LexicalSimilarity`): the uncertainty of a prompt is minus the mean
ROUGE-L F-measure over every pair of its sampled answers. Answers that
agree word for word score -1, answers with no word in common 0; higher =
more uncertain, like every uncertainty score here.

ROUGE-L here is the F-measure of the longest common subsequence of two
token sequences (Lin, "ROUGE: a package for automatic evaluation of
summaries", 2004), with precision and recall weighted equally. Text is
tokenised as the `rouge_score` package tokenises it by default:
lower-cased, every run of characters other than `a-z` and `0-9` a
separator. Unlike lm-polygraph, which turns on Porter stemming, no
stemming is applied (answers such as numbers, names and short phrases are
unaffected; pass `similarity=` for another measure).
"""

import itertools
import re

import numpy as np

_WORD = re.compile(r"[a-z0-9]+")


def answer_tokens(answer):
    """The tokens ROUGE-L compares: the words of a string (lower-cased,
    split on anything but `a-z0-9`), or a sequence of token ids as given."""
    if isinstance(answer, str):
        return _WORD.findall(answer.lower())
    if isinstance(answer, (list, tuple, np.ndarray)):
        return list(np.asarray(answer).ravel().tolist())
    raise TypeError(
        f"An answer must be a string or a sequence of token ids; got {type(answer).__name__}."
    )


def rouge_l(first, second):
    """ROUGE-L F-measure of two answers (strings or token-id sequences).

    Args:
        first, second: `str` or a sequence of token ids.

    Returns:
        float in `[0, 1]`: `2 P R / (P + R)` with `P = LCS / len(first)`
        and `R = LCS / len(second)`; 0 when either answer has no token.

    Example:

    ```python
    import ensemble_zoo as ez

    ez.metrics.rouge_l("The answer is 42.", "42, the answer")  # 0.571...
    ```
    """
    a, b = answer_tokens(first), answer_tokens(second)
    if not a or not b:
        return 0.0
    # Longest common subsequence, one row of the dynamic programme at a time.
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b):
            current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
        previous = current
    lcs = previous[-1]
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(a), lcs / len(b)
    return 2 * precision * recall / (precision + recall)


def lexical_similarity(answers, similarity=None):
    """Minus the mean pairwise similarity of each prompt's sampled answers.

    Args:
        answers: a list over prompts of lists of answers (strings or
            token-id sequences), at least two per prompt.
        similarity: `callable(first, second) -> float`, the similarity of
            two answers. Defaults to `rouge_l`.

    Returns:
        float64 array `(prompts,)`: `-mean_{i<j} similarity(a_i, a_j)`
        (higher = more uncertain).

    Example:

    ```python
    import ensemble_zoo as ez

    ez.metrics.lexical_similarity([["42", "42", "42"], ["7", "12", "7"]])
    # [-1.0, -0.333...]
    ```
    """
    if similarity is None:
        similarity = rouge_l
    if not callable(similarity):
        raise TypeError(
            f"`similarity` must be callable(first, second) -> float; got {similarity!r}."
        )
    if isinstance(answers, (str, bytes)) or not hasattr(answers, "__len__"):
        raise TypeError(
            "`answers` must be a list over prompts of lists of answers; got "
            f"{type(answers).__name__}."
        )
    scores = []
    for p, row in enumerate(answers):
        if isinstance(row, (str, bytes)) or not hasattr(row, "__len__") or len(row) < 2:
            raise ValueError(
                f"`answers[{p}]` must hold at least two answers to compare; got {row!r}."
            )
        pairs = [similarity(a, b) for a, b in itertools.combinations(row, 2)]
        scores.append(-float(np.mean(pairs)))
    return np.asarray(scores, np.float64)

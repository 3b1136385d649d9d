import itertools

import numpy as np
import pytest

import ensemble_zoo as ez
from ensemble_zoo.models.lora_ensemble.causal_lm.sample_uncertainty import equivalence_matrix
from ensemble_zoo.models.lora_ensemble.causal_lm.sample_uncertainty import normalize_answer


def brute_force_rouge_l(a, b):
    """F-measure of the longest common subsequence, found by trying every
    subsequence of `a` (short sequences only)."""

    def is_subsequence(s, t):
        it = iter(t)
        return all(x in it for x in s)

    lcs = max(
        (
            k
            for k in range(len(a) + 1)
            for s in itertools.combinations(a, k)
            if is_subsequence(s, b)
        ),
        default=0,
    )
    if lcs == 0:
        return 0.0
    p, r = lcs / len(a), lcs / len(b)
    return 2 * p * r / (p + r)


def test_rouge_l_and_lexical_similarity_against_brute_force(rng):
    rows = [[tuple(rng.integers(0, 4, rng.integers(1, 7))) for _ in range(4)] for _ in range(5)]
    for row in rows:
        for a, b in itertools.combinations(row, 2):
            assert ez.metrics.rouge_l(a, b) == pytest.approx(brute_force_rouge_l(a, b))
    expected = [
        -np.mean([brute_force_rouge_l(a, b) for a, b in itertools.combinations(row, 2)])
        for row in rows
    ]
    np.testing.assert_allclose(ez.metrics.lexical_similarity(rows), expected)
    # Text: lower-cased words, punctuation separates.
    assert ez.metrics.rouge_l("The answer is 42.", "42, the ANSWER") == pytest.approx(4 / 7)
    assert ez.metrics.rouge_l("", "42") == 0.0
    np.testing.assert_allclose(
        ez.metrics.lexical_similarity([["a b", "a b"], ["x", "y"]]), [-1.0, 0.0]
    )


def test_lexical_similarity_names_bad_input():
    with pytest.raises(ValueError, match=r"answers\[0\].*two"):
        ez.metrics.lexical_similarity([["only one"]])
    with pytest.raises(TypeError, match="similarity"):
        ez.metrics.lexical_similarity([["a", "b"]], similarity="rouge")
    with pytest.raises(TypeError, match="answer must be a string"):
        ez.metrics.rouge_l(3.5, "a")


def test_exact_equivalence_normalises_as_squad_and_callables_are_asked_both_ways():
    assert normalize_answer("  The Answer: 42! ") == "answer 42"
    answers = [["42", "the 42.", "41"]]
    np.testing.assert_array_equal(equivalence_matrix(answers)[0], [[1, 1, 0], [1, 1, 0], [0, 0, 1]])
    calls = []
    one_way = equivalence_matrix(answers, lambda a, b: calls.append((a, b)) or a < b)
    assert len(calls) == 6  # every ordered pair, the diagonal not asked
    row = answers[0]
    expected = [[i == j or a < b for j, b in enumerate(row)] for i, a in enumerate(row)]
    np.testing.assert_array_equal(one_way[0], expected)
    # A relation that holds one way only joins no set.
    np.testing.assert_array_equal(ez.metrics.number_of_semantic_sets(one_way), [3])

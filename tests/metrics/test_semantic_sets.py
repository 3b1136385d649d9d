import numpy as np
import pytest

import ensemble_zoo as ez


def relation(answers):
    """Exact match: a symmetric equivalence, one (answers, answers) block per prompt."""
    return np.array([[[a == b for b in row] for a in row] for row in answers])


def test_classes_and_sets_of_exact_matches():
    answers = [["42", "42", "41", "42", "40"], ["7", "7", "7", "7", "7"]]
    np.testing.assert_array_equal(
        ez.metrics.semantic_classes(relation(answers)), [[0, 0, 1, 0, 2], [0, 0, 0, 0, 0]]
    )
    np.testing.assert_array_equal(ez.metrics.number_of_semantic_sets(relation(answers)), [3, 1])


def brute_force_sets(both):
    """Transitive closure by repeated boolean products, then distinct rows."""
    n = both.shape[0]
    reach = both | np.eye(n, dtype=bool)
    for _ in range(n):
        reach = reach | ((reach.astype(int) @ reach.astype(int)) > 0)
    return len({tuple(row) for row in reach})


def test_random_relations_against_brute_force(rng):
    """Random, non-symmetric relations (an NLI model's entailment is
    directional): sets are components of the two-way graph; classes join
    an answer to the first class whose first answer it matches both ways."""
    equivalent = rng.random((40, 6, 6)) < 0.45
    both = equivalent & np.swapaxes(equivalent, 1, 2)
    sets = ez.metrics.number_of_semantic_sets(equivalent)
    classes = ez.metrics.semantic_classes(equivalent)
    for p in range(40):
        assert sets[p] == brute_force_sets(both[p])
        firsts = []
        for i in range(6):
            matches = [c for c, j in enumerate(firsts) if both[p, i, j]]
            expected = matches[0] if matches else len(firsts)
            if not matches:
                firsts.append(i)
            assert classes[p, i] == expected
        # Greedy classes never merge more than the components do.
        assert classes[p].max() + 1 >= sets[p]


def test_semantic_entropy_equals_its_formula(rng):
    ll = np.log(rng.dirichlet(np.ones(5), size=3) * 0.9)
    classes = rng.integers(0, 3, size=(3, 5))
    got = ez.metrics.semantic_entropy(ll, classes)
    for p in range(3):
        p_class = {
            c: sum(np.exp(ll[p, i]) for i in range(5) if classes[p, i] == c) for c in classes[p]
        }
        expected = -np.mean([np.log(p_class[c]) for c in classes[p]])
        assert got[p] == pytest.approx(expected, rel=1e-12)
    # One class holding every answer: minus the log of their total likelihood.
    assert ez.metrics.semantic_entropy(ll[:1], np.zeros((1, 5), int))[0] == pytest.approx(
        -np.log(np.exp(ll[0]).sum())
    )
    # More spread over meanings, higher entropy (same likelihoods).
    same = np.log(np.full((1, 4), 0.2))
    assert ez.metrics.semantic_entropy(same, [[0, 0, 0, 0]]) < ez.metrics.semantic_entropy(
        same, [[0, 1, 2, 3]]
    )


def test_bad_input_is_a_clear_error():
    with pytest.raises(TypeError, match="bool"):
        ez.metrics.number_of_semantic_sets(np.ones((1, 2, 2)))
    with pytest.raises(ValueError, match=r"\(prompts, answers, answers\)"):
        ez.metrics.semantic_classes(np.ones((2, 3), bool))
    with pytest.raises(ValueError, match="shape of `log_likelihoods`"):
        ez.metrics.semantic_entropy(np.zeros((2, 3)), np.zeros((2, 2), int))
    with pytest.raises(TypeError, match="integer"):
        ez.metrics.semantic_entropy(np.zeros((2, 3)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="NaN"):
        ez.metrics.semantic_entropy(np.full((1, 2), np.nan), np.zeros((1, 2), int))

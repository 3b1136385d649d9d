import numpy as np
import pytest
from sklearn.metrics import roc_auc_score
from sklearn.neighbors import NearestNeighbors

from ensemble_zoo import metrics


def sklearn_loo_correct(embeddings, labels):
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    nn = NearestNeighbors(n_neighbors=2, metric="cosine").fit(unit)
    _, idx = nn.kneighbors(unit)
    # The first neighbour of each point is itself (no duplicates here).
    assert np.all(idx[:, 0] == np.arange(len(labels)))
    return labels[idx[:, 1]] == labels


def test_recall_at_one_and_r_auroc_against_sklearn(rng):
    labels = rng.integers(0, 5, size=300)
    centers = rng.normal(size=(5, 16))
    embeddings = centers[labels] + rng.normal(scale=1.2, size=(300, 16))
    correct = sklearn_loo_correct(embeddings, labels)
    assert 0.2 < correct.mean() < 0.95  # both outcomes present
    assert metrics.recall_at_one(embeddings, labels) == pytest.approx(correct.mean())
    u = rng.normal(size=300) - correct  # informative uncertainty
    assert metrics.r_auroc(embeddings, labels, u) == pytest.approx(
        roc_auc_score(correct, -u), abs=1e-12
    )


def test_r_auroc_hand_built():
    # Two tight pairs of class 0 and 1, and one class-0 point beside class 1
    # (angles 0, 5.8, 90, 84.3 and 101.3 degrees).
    embeddings = np.array([[1.0, 0.0], [0.99, 0.1], [0.0, 1.0], [0.1, 0.99], [-0.2, 1.0]])
    labels = np.array([0, 0, 1, 1, 0])
    correct = metrics.nearest_neighbour_correct(embeddings, labels)
    np.testing.assert_array_equal(correct, [True, True, True, True, False])
    assert metrics.recall_at_one(embeddings, labels) == pytest.approx(0.8)
    # The failed retrieval most uncertain -> 1.0; least uncertain -> 0.0.
    u = np.array([0.1, 0.2, 0.3, 0.4, 0.9])
    assert metrics.r_auroc(embeddings, labels, u) == 1.0
    assert metrics.r_auroc(embeddings, labels, -u) == 0.0
    # One correct retrieval (u=0.95) ranks above the failure: 3 of 4 pairs.
    u = np.array([0.1, 0.2, 0.95, 0.3, 0.9])
    assert metrics.r_auroc(embeddings, labels, u) == pytest.approx(0.75)


def test_retrieval_errors():
    e = np.array([[1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(ValueError, match="undefined"):
        metrics.r_auroc(e, np.array([0, 0]), [0.1, 0.2])  # all correct
    with pytest.raises(ValueError, match="all zeros"):
        metrics.recall_at_one(np.array([[1.0, 0.0], [0.0, 0.0]]), np.array([0, 1]))
    with pytest.raises(ValueError, match="at least 2"):
        metrics.recall_at_one(np.ones((1, 2)), np.array([0]))
    with pytest.raises(ValueError, match=r"`uncertainties` must have shape \(2,\)"):
        metrics.r_auroc(e, np.array([0, 1]), [0.1])


def test_recall_with_rejection_drops_the_most_uncertain_queries():
    import ensemble_zoo as ez

    rng = np.random.default_rng(3)
    embeddings = rng.normal(size=(40, 5))
    labels = rng.integers(0, 3, 40)
    correct = ez.metrics.nearest_neighbour_correct(embeddings, labels)
    uncertainties = np.where(correct, rng.random(40), 1.0 + rng.random(40))
    curve = ez.metrics.recall_at_one_with_rejection(
        embeddings, labels, uncertainties, rejection_rates=(0.0, 0.25, 0.5)
    )
    assert curve[0.0] == pytest.approx(correct.mean())
    for rate, recall in curve.items():
        kept = np.argsort(uncertainties, kind="stable")[: int(round(40 * (1 - rate)))]
        assert recall == pytest.approx(correct[kept].mean())
    assert curve[0.5] >= curve[0.25] >= curve[0.0]
    with pytest.raises(ValueError, match="`rejection_rates` must lie in"):
        ez.metrics.recall_at_one_with_rejection(embeddings, labels, uncertainties, (1.0,))


def test_exact_duplicates_are_each_others_neighbours_and_column_labels_work():
    """A design decision: the query is left out by index, so an exact
    duplicate is its neighbour. The reference's "second FAISS hit" can be
    the query itself here (its tie order decides) and would count both as
    correct; a brute-force reference that drops index i agrees with us."""
    e = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.1, 1.0]])
    labels = np.array([0, 1, 2, 2])
    unit = e / np.linalg.norm(e, axis=1, keepdims=True)
    sim = unit @ unit.T
    np.fill_diagonal(sim, -np.inf)
    expected = labels[sim.argmax(1)] == labels  # [False, False, True, True]
    np.testing.assert_array_equal(metrics.nearest_neighbour_correct(e, labels), expected)
    assert metrics.recall_at_one(e, labels) == 0.5
    assert metrics.recall_at_one(e, labels[:, None]) == 0.5  # (N, 1) labels
    assert metrics.r_auroc(e, labels[:, None], [0.9, 0.8, 0.1, 0.2]) == 1.0

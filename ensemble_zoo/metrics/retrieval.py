"""Retrieval metrics: Recall@1 and R-AUROC (Kirchhof et al., "Pretrained
Visual Uncertainties").

Both use leave-one-out 1-nearest-neighbour retrieval with cosine
similarity: every sample queries all *other* samples of the same set, and
the retrieval is correct when its nearest neighbour has the same label.
Recall@1 is the fraction correct; R-AUROC is the AUROC of the negated
uncertainty `-u` for predicting correct retrievals (0.5 = uninformative).
Similarity ties go to the neighbour with the lowest index.

**Exact duplicates (a design decision).** The query is excluded by its
index, not by taking the second hit of a search over all samples as the
authors' FAISS code does (`IndexFlatIP`, k=2, drop the first hit). The two
agree whenever no two embeddings are identical. With an exact duplicate,
the reference's first hit may be the duplicate instead of the query, so
the "second hit" is then the query itself and the retrieval counts as
correct whatever the labels; its result depends on FAISS's tie order. Here
the duplicate is the query's nearest neighbour (similarity 1), and the
retrieval is correct exactly when the duplicate has the same label, which
is what leave-one-out retrieval means.
"""

import numpy as np

from ensemble_zoo.metrics.ranking import as_scores
from ensemble_zoo.metrics.ranking import binary_auroc
from ensemble_zoo.utils.validation import as_numeric_array
from ensemble_zoo.utils.validation import check_finite
from ensemble_zoo.utils.validation import check_real

_CHUNK = 1024


def _retrieval_labels(labels, num_samples):
    """Labels of any comparable kind (ints, strings), shape `(samples,)`
    or `(samples, 1)`; NaN labels are refused (NaN != NaN would make every
    retrieval of that sample wrong)."""
    if labels is None:
        raise TypeError("`labels` must be an array of labels; got None.")
    labels = np.asarray(labels)
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.shape != (num_samples,):
        raise ValueError(
            f"`labels` must have shape ({num_samples},) to match "
            f"`embeddings`; got shape {labels.shape}."
        )
    if labels.dtype.kind in "fc":
        check_finite(labels.real, "labels")
    return labels


def nearest_neighbour_correct(embeddings, labels):
    """Per-sample correctness of leave-one-out cosine 1-NN retrieval.

    Args:
        embeddings: `(samples, dim)` float embeddings, none all-zero.
        labels: `(samples,)` labels (any comparable values).

    Returns:
        bool array `(samples,)`.
    """
    embeddings = as_numeric_array(embeddings, "embeddings").astype(np.float64)
    if embeddings.ndim != 2:
        raise ValueError(
            f"`embeddings` must have shape (samples, dim); got shape {embeddings.shape}."
        )
    if embeddings.shape[0] < 2:
        raise ValueError(
            "`embeddings` needs at least 2 samples for leave-one-out "
            f"retrieval; got {embeddings.shape[0]}."
        )
    check_finite(embeddings, "embeddings")
    labels = _retrieval_labels(labels, embeddings.shape[0])
    norms = np.linalg.norm(embeddings, axis=1, keepdims=True)
    if (norms == 0).any():
        raise ValueError(
            f"`embeddings` row {int(np.argmin(norms[:, 0]))} is all zeros; "
            "cosine similarity is undefined for it."
        )
    unit = embeddings / norms
    neighbours = np.empty(unit.shape[0], dtype=np.int64)
    for start in range(0, unit.shape[0], _CHUNK):
        stop = min(start + _CHUNK, unit.shape[0])
        similarity = unit[start:stop] @ unit.T
        similarity[np.arange(stop - start), np.arange(start, stop)] = -np.inf
        neighbours[start:stop] = similarity.argmax(axis=1)
    return labels[neighbours] == labels


def recall_at_one(embeddings, labels):
    """Recall@1 of leave-one-out cosine 1-NN retrieval (a float in [0, 1]).

    Args:
        embeddings: `(samples, dim)` float embeddings, none all-zero.
        labels: `(samples,)` or `(samples, 1)` labels.

    Example:
    >>> recall_at_one([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]], [0, 0, 1, 2])
    0.5
    """
    return float(np.mean(nearest_neighbour_correct(embeddings, labels)))


def _retrievals(embeddings, labels, uncertainties):
    """Whether each leave-one-out 1-NN retrieval is correct, and the
    checked per-sample `uncertainties` (one per sample)."""
    correct = nearest_neighbour_correct(embeddings, labels)
    return correct, as_scores(uncertainties, "uncertainties", samples=correct.shape[0])


def r_auroc(embeddings, labels, uncertainties):
    """R-AUROC: how well an uncertainty predicts failed retrievals.

    The AUROC of `-uncertainties` for separating correct from incorrect
    leave-one-out cosine 1-NN retrievals (Pretrained Visual Uncertainties,
    §4.1): 1.0 means every failed retrieval is more uncertain than every
    correct one.

    Args:
        embeddings: `(samples, dim)` embeddings used for retrieval.
        labels: `(samples,)` labels.
        uncertainties: `(samples,)` per-sample uncertainty `u`.

    Raises:
        ValueError: if all retrievals are correct or all are wrong. The AUROC
            is undefined then, and we raise as scikit-learn's
            `roc_auc_score` does. The authors' code uses torchmetrics, which
            returns 0.0 with a warning in that case; 0.0 would read as the
            worst possible uncertainty, so we do not return it (a design
            decision).
    """
    correct, uncertainties = _retrievals(embeddings, labels, uncertainties)
    return binary_auroc(-uncertainties, correct, positive_name="a correct retrieval")


def recall_at_one_with_rejection(
    embeddings, labels, uncertainties, rejection_rates=(0.0, 0.1, 0.2, 0.5)
):
    """Recall@1 of the queries left after rejecting the most uncertain ones.

    Uncertainty-aware retrieval (Pretrained Visual Uncertainties, §5): every
    sample is a query against all other samples (leave-one-out cosine 1-NN,
    the gallery is never reduced); the `rate` most uncertain queries are
    withheld and Recall@1 is computed on the rest. A useful uncertainty makes
    the curve rise with the rejection rate. Ties in uncertainty are broken by
    sample index (the later sample is rejected first), so results are
    deterministic.

    Args:
        embeddings: `(samples, dim)` embeddings.
        labels: `(samples,)` labels.
        uncertainties: `(samples,)` per-query uncertainty.
        rejection_rates: fractions in `[0, 1)` of queries to withhold.

    Returns:
        dict `{rate: recall@1 of the kept queries}`.
    """
    correct, uncertainties = _retrievals(embeddings, labels, uncertainties)
    n = correct.shape[0]
    # Most certain first; among equal uncertainties the earlier sample first.
    order = np.lexsort((np.arange(n), uncertainties))
    curve = {}
    if isinstance(rejection_rates, (str, bytes)) or not hasattr(rejection_rates, "__iter__"):
        raise TypeError(
            f"`rejection_rates` must be a sequence of fractions in [0, 1); got {rejection_rates!r}."
        )
    rates = [
        check_real(rate, "rejection_rates", low=0.0, high=1.0, high_open=True)
        for rate in rejection_rates
    ]
    for rate in rates:
        kept = max(1, int(round(n * (1.0 - rate))))
        curve[float(rate)] = float(np.mean(correct[order[:kept]]))
    return curve

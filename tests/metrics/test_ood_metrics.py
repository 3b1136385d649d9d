import numpy as np
import pytest
from sklearn.metrics import average_precision_score
from sklearn.metrics import roc_auc_score
from sklearn.metrics import roc_curve

from ensemble_zoo import metrics


def sklearn_reference(id_scores, ood_scores):
    y = np.r_[np.zeros(len(id_scores)), np.ones(len(ood_scores))]
    s = np.r_[id_scores, ood_scores]
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    return (
        roc_auc_score(y, s),
        average_precision_score(y, s),
        fpr[np.searchsorted(tpr, 0.95, side="left")],
    )


@pytest.mark.parametrize("rounding", [None, 1, 0])  # 0 digits: heavy ties
@pytest.mark.parametrize("sizes", [(500, 300), (40, 1000), (1, 1), (3, 97)])
def test_ood_metrics_equal_sklearn(rng, rounding, sizes):
    id_scores = rng.normal(0.0, 1.0, sizes[0])
    ood_scores = rng.normal(1.0, 1.5, sizes[1])
    if rounding is not None:
        id_scores, ood_scores = id_scores.round(rounding), ood_scores.round(rounding)
    auroc, aupr, fpr95 = sklearn_reference(id_scores, ood_scores)
    assert metrics.ood_auroc(id_scores, ood_scores) == pytest.approx(auroc, abs=1e-12)
    assert metrics.ood_aupr(id_scores, ood_scores) == pytest.approx(aupr, abs=1e-12)
    assert metrics.fpr_at_95_tpr(id_scores, ood_scores) == pytest.approx(fpr95, abs=1e-12)


def test_hand_built_cases():
    # Perfect separation.
    assert metrics.ood_auroc([0.1, 0.2], [0.8, 0.9]) == 1.0
    assert metrics.ood_aupr([0.1, 0.2], [0.8, 0.9]) == 1.0
    assert metrics.fpr_at_95_tpr([0.1, 0.2], [0.8, 0.9]) == 0.0
    # Reversed.
    assert metrics.ood_auroc([0.8, 0.9], [0.1, 0.2]) == 0.0
    assert metrics.fpr_at_95_tpr([0.8, 0.9], [0.1, 0.2]) == 1.0
    # All scores equal: one threshold; AUROC is chance, AP the OOD fraction.
    assert metrics.ood_auroc([0.5] * 3, [0.5]) == 0.5
    assert metrics.ood_aupr([0.5] * 3, [0.5]) == 0.25
    assert metrics.fpr_at_95_tpr([0.5] * 3, [0.5]) == 1.0
    # 20 OOD samples: 19 detected is exactly 95 %; the ID sample at 0.45
    # scores below the 19th OOD score, so it is not flagged.
    ood = np.linspace(1.0, 0.05, 20)  # 19th highest is 0.1
    assert metrics.fpr_at_95_tpr([0.45, 0.0], ood) == 0.5
    assert metrics.ood_auroc([0.1, 0.2, 0.4], [0.3, 0.9]) == pytest.approx(5 / 6)


def test_fpr_at_other_tpr(rng):
    id_scores, ood_scores = rng.normal(0, 1, 200), rng.normal(1, 1, 200)
    y = np.r_[np.zeros(200), np.ones(200)]
    fpr, tpr, _ = roc_curve(y, np.r_[id_scores, ood_scores], drop_intermediate=False)
    for level in (0.5, 0.8, 1.0):
        assert metrics.fpr_at_95_tpr(id_scores, ood_scores, tpr=level) == (
            pytest.approx(fpr[np.searchsorted(tpr, level)])
        )


def test_clear_errors():
    with pytest.raises(ValueError, match="`ood_scores` is empty"):
        metrics.ood_auroc([0.1, 0.2], [])
    with pytest.raises(ValueError, match="`id_scores` is empty"):
        metrics.ood_aupr([], [0.1])
    with pytest.raises(ValueError, match="NaN"):
        metrics.fpr_at_95_tpr([0.1, np.nan], [0.3])
    with pytest.raises(ValueError, match=r"shape \(samples,\)"):
        metrics.ood_auroc(np.zeros((3, 2)), [0.1])
    with pytest.raises(ValueError, match="tpr"):
        metrics.fpr_at_95_tpr([0.1], [0.2], tpr=0.0)


def test_integer_scores_and_numpy_tpr():
    # Large integers stay distinct (no float64 rounding).
    assert metrics.ood_auroc([2**60], [2**60 + 1]) == 1.0
    assert metrics.fpr_at_95_tpr([0.1, 0.5], [0.6, 0.9], np.float32(0.95)) == 0.0

import numpy as np
import pytest
from zoo_testing import np_softmax

from ensemble_zoo import metrics
from ensemble_zoo.calibration import TemperatureScaling


def grid_nll(member_logits, labels, temperatures):
    """Independent reference: NLL of the mean member softmax on a grid."""
    out = []
    for t in temperatures:
        p = np_softmax(member_logits / t).mean(1)
        out.append(-np.mean(np.log(p[np.arange(len(labels)), labels])))
    return np.array(out)


def test_recovers_the_temperature_of_overconfident_logits(rng):
    # Labels drawn from np_softmax(z / 2.5): logits z are 2.5x overconfident.
    z = rng.normal(size=(20000, 1, 5)) * 4
    cdf = np_softmax(z[:, 0] / 2.5).cumsum(1)
    labels = (rng.uniform(size=(20000, 1)) > cdf).sum(1)
    scaler = TemperatureScaling().fit(z, labels)
    assert scaler.temperature == pytest.approx(2.5, rel=0.05)
    before = metrics.expected_calibration_error(np_softmax(z[:, 0]), labels)
    after = metrics.expected_calibration_error(scaler.predict_probabilities(z), labels)
    assert after < 0.02 < before


def test_fit_matches_a_grid_search_on_an_ensemble(rng):
    z = rng.normal(size=(500, 3, 4)) * 3
    cdf = np_softmax(z.mean(1) / 2).cumsum(1)
    labels = (rng.uniform(size=(500, 1)) > cdf).sum(1)
    grid = np.exp(np.linspace(np.log(0.05), np.log(20), 4001))
    nll = grid_nll(z, labels, grid)
    scaler = TemperatureScaling().fit(z, labels)
    assert scaler.negative_log_likelihood(z, labels) <= nll.min() + 1e-9
    assert scaler.temperature == pytest.approx(grid[nll.argmin()], rel=2e-3)
    probs = scaler.predict_probabilities(z)
    np.testing.assert_allclose(probs, np_softmax(z / scaler.temperature).mean(1), atol=1e-12)
    np.testing.assert_allclose(scaler.scale(z), z / scaler.temperature)


def test_two_dimensional_logits_are_one_member(rng):
    z = rng.normal(size=(50, 3))
    labels = rng.integers(0, 3, size=50)
    a = TemperatureScaling().fit(z, labels).temperature
    b = TemperatureScaling().fit(z[:, None], labels).temperature
    assert a == pytest.approx(b)
    assert TemperatureScaling().scale(z).shape == (50, 3)


def test_config_bounds_and_errors(rng):
    scaler = TemperatureScaling(temperature=1.7)
    assert TemperatureScaling.from_config(scaler.get_config()).temperature == 1.7
    with pytest.raises(ValueError, match="bounds"):
        TemperatureScaling(bounds=(2.0, 1.0))
    with pytest.raises(ValueError, match="temperature"):
        TemperatureScaling(temperature=0.0)
    with pytest.raises(ValueError, match=r"\(samples, members, classes\)"):
        TemperatureScaling().fit(np.zeros((2, 2, 2, 2)), [0, 1])
    with pytest.raises(ValueError, match="NaN"):
        TemperatureScaling().fit(np.array([[np.nan, 0.0]]), [0])
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        TemperatureScaling().fit(np.zeros((4, 3)), [0, 1])
    # Labels unrelated to the logits push T to the upper bound: a warning.
    z = rng.normal(size=(300, 2, 4)) * 3
    with pytest.warns(UserWarning, match="bound"):
        TemperatureScaling().fit(z, rng.integers(0, 4, size=300))


def test_undetermined_temperatures_warn():
    # Perfectly separated: NLL ~ 0 for every small T.
    with pytest.warns(UserWarning, match="perfectly separated"):
        TemperatureScaling().fit(np.eye(3) * 5, [0, 1, 2])
    # Flat NLL across the whole range: T stays 1.
    with pytest.warns(UserWarning, match="does not determine"):
        scaler = TemperatureScaling().fit(np.array([[1e4, 0.0], [0.0, 1e4]]), [0, 1])
    assert scaler.temperature == 1.0

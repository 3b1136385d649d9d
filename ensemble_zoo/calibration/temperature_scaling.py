"""Temperature scaling (Guo et al., 2017) for ensembles and single models."""

import warnings

import numpy as np

from ensemble_zoo.metrics.array_checks import as_labels
from ensemble_zoo.utils.validation import as_numeric_array
from ensemble_zoo.utils.validation import check_finite
from ensemble_zoo.utils.validation import check_nonempty_axes
from ensemble_zoo.utils.validation import check_real


def _as_member_logits(member_logits):
    member_logits = as_numeric_array(member_logits, "member_logits").astype(np.float64)
    if member_logits.ndim == 2:
        member_logits = member_logits[:, None, :]
    if member_logits.ndim != 3:
        raise ValueError(
            "`member_logits` must have shape (samples, members, classes) or "
            f"(samples, classes); got shape {member_logits.shape}."
        )
    if member_logits.shape[0] == 0:
        raise ValueError("`member_logits` is empty.")
    check_nonempty_axes(
        member_logits.shape,
        "member_logits",
        "(samples, members, classes)",
        {1: "member", 2: "class"},
    )
    return check_finite(member_logits, "member_logits")


def _log_predictive(member_logits):
    """log of the mean member softmax, `(samples, classes)`, stable."""
    shifted = member_logits - member_logits.max(axis=-1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    top = log_softmax.max(axis=1, keepdims=True)
    mean = np.exp(log_softmax - top).mean(axis=1, keepdims=True)
    return (top + np.log(mean))[:, 0, :]


class TemperatureScaling:
    """One temperature `T` for all members, fitted to minimise the NLL.

    Every member's logits are divided by the same `T` before the member
    softmaxes are averaged, so a calibrated ensemble is still an ensemble
    and `ensemble_zoo.ops.uncertainty_decomposition` still applies to the
    scaled logits. `T` is found by a bounded scalar search over `log T`
    (scipy's `minimize_scalar`) on held-out data, the validation split, never
    the test split. For a single model the NLL is convex in `1/T` and the
    search finds the global optimum; for an ensemble it is the usual
    one-parameter fit used by torch-uncertainty. With more than one member
    `T` can change the argmax of the average, so the accuracy may move
    slightly.

    Args:
        temperature: float, the starting temperature (1.0 = no change).
        bounds: `(low, high)` temperature range searched by `fit`.
            Defaults to `(0.05, 20.0)`; a fit that ends on a bound warns.

    Example:

    ```python
    import ensemble_zoo

    model = ensemble_zoo.models.EnsembleClassifier.from_preset(
        "deep_ensemble_vit_tiny_digits"
    )
    # The preset's image converter takes the raw digits (0-16).
    x_val, y_val = ensemble_zoo.datasets.load_arrays("digits", "validation", raw=True)
    x_test, y_test = ensemble_zoo.datasets.load_arrays("digits", "test", raw=True)
    scaler = ensemble_zoo.calibration.TemperatureScaling()
    scaler.fit(model.predict(x_val, verbose=0), y_val)
    probs = scaler.predict_probabilities(model.predict(x_test, verbose=0))
    ensemble_zoo.metrics.expected_calibration_error(probs, y_test)
    ```
    """

    def __init__(self, temperature=1.0, bounds=(0.05, 20.0)):
        if isinstance(bounds, (str, bytes)) or not hasattr(bounds, "__len__") or len(bounds) != 2:
            raise ValueError(f"`bounds` must be a pair (low, high); got {bounds!r}.")
        bounds = tuple(check_real(b, "bounds", low=0.0, low_open=True) for b in bounds)
        if not bounds[0] < bounds[1]:
            raise ValueError(f"`bounds` must be (low, high) with 0 < low < high; got {bounds}.")
        self.temperature = check_real(temperature, "temperature", low=0.0, low_open=True)
        self.bounds = bounds

    def negative_log_likelihood(self, member_logits, labels, temperature=None):
        """NLL of `labels` under the scaled ensemble (nats, float64)."""
        member_logits = _as_member_logits(member_logits)
        labels = as_labels(labels, member_logits.shape[0], member_logits.shape[2])
        t = self.temperature if temperature is None else temperature
        log_probs = _log_predictive(member_logits / t)
        return float(-np.mean(log_probs[np.arange(labels.shape[0]), labels]))

    def fit(self, member_logits, labels):
        """Fits `T` on held-out `(samples, members, classes)` logits.

        Returns:
            `self`, with `temperature` set.
        """
        from scipy.optimize import minimize_scalar

        member_logits = _as_member_logits(member_logits)
        labels = as_labels(labels, member_logits.shape[0], member_logits.shape[2])
        log_low, log_high = np.log(self.bounds[0]), np.log(self.bounds[1])
        result = minimize_scalar(
            lambda log_t: self.negative_log_likelihood(member_logits, labels, float(np.exp(log_t))),
            bounds=(log_low, log_high),
            method="bounded",
            options={"xatol": 1e-6},
        )
        nll = [self.negative_log_likelihood(member_logits, labels, t) for t in self.bounds]
        if abs(nll[0] - nll[1]) <= 1e-9 * max(1.0, abs(nll[0])):
            self.temperature = 1.0
            warnings.warn(
                "The NLL is the same at both temperature bounds "
                f"({nll[0]:.3g}): the held-out data does not determine a "
                "temperature (e.g. it is perfectly separated with huge "
                "logits). Keeping T = 1.",
                stacklevel=2,
            )
            return self
        self.temperature = float(np.exp(result.x))
        if result.fun < 1e-9:
            warnings.warn(
                f"The held-out NLL reaches {result.fun:.3g} at T = "
                f"{self.temperature:.4g}: the data is perfectly separated, "
                "so any smaller temperature fits as well; use more or harder "
                "held-out data.",
                stacklevel=2,
            )
        elif min(result.x - log_low, log_high - result.x) < 1e-3:
            warnings.warn(
                f"The fitted temperature {self.temperature:.4g} lies on the "
                f"search bound {self.bounds}; widen `bounds` if this is "
                "unexpected.",
                stacklevel=2,
            )
        return self

    def scale(self, member_logits):
        """The member logits divided by `T` (NumPy, same shape as given)."""
        given = np.asarray(member_logits)
        return (_as_member_logits(given) / self.temperature).reshape(given.shape)

    def predict_probabilities(self, member_logits):
        """Mean member softmax of the scaled logits, `(samples, classes)`."""
        return np.exp(_log_predictive(_as_member_logits(member_logits) / self.temperature))

    def get_config(self):
        return {"temperature": self.temperature, "bounds": list(self.bounds)}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

"""Combining ensemble members: predictive distribution and its uncertainty.

Every ensemble model in the zoo returns per-member logits of shape
`(batch, members, classes)`. These functions are the one place where
members are combined; models never re-implement them.

All quantities are in nats and computed in log space for stability: the
log of the mean member probability is `logsumexp_m(log_softmax(z_m)) -
log(M)`, so no probability is ever clipped.

Input checks: every function checks shapes and dtypes. Where the input's
values exist when it is called (NumPy arrays, eager tensors) it also
rejects NaN and infinite entries and, for probabilities, entries outside
[0, 1] or rows that do not sum to one; logits may be `-inf` (a masked
class) but not NaN or `+inf`. Inside a compiled graph (`jit`,
`tf.function`, `torch.compile`) values are not inspected, like Keras' own
ops. The models call the unchecked `_` versions, so that a model whose
outputs are NaN behaves the same on every backend (NaN in, NaN out).
"""

from keras import ops

from ensemble_zoo.utils import backend as backend_utils
from ensemble_zoo.utils.validation import as_tensor
from ensemble_zoo.utils.validation import check_axis
from ensemble_zoo.utils.validation import check_bool
from ensemble_zoo.utils.validation import check_floating
from ensemble_zoo.utils.validation import check_logits
from ensemble_zoo.utils.validation import check_nonempty_axes
from ensemble_zoo.utils.validation import check_probability_rows
from ensemble_zoo.utils.validation import check_rank

_LAYOUT = "(batch, members, classes)"


def checked_member_tensor(member_logits, layout, axes):
    """Validates a public `member_logits` argument of `layout` (a string
    such as `"(batch, members, classes)"`, whose rank it sets) with the
    non-empty `axes` (index -> name). Returns the tensor, its static shape
    and its values where they exist (else `None`)."""
    x = as_tensor(member_logits, "member_logits")
    shape = check_rank(x, layout.count(",") + 1, "member_logits", layout)
    check_nonempty_axes(shape, "member_logits", layout, axes)
    check_floating(x, "member_logits")
    return x, shape, backend_utils.concrete_value(x)


def _checked_member_outputs(member_logits, from_logits):
    """Validates a public `member_logits` argument; returns it as a tensor."""
    from_logits = check_bool(from_logits, "from_logits")
    x, _, values = checked_member_tensor(member_logits, _LAYOUT, {1: "member", 2: "class"})
    if values is not None:
        if from_logits:
            check_logits(values, "member_logits")
        else:
            check_probability_rows(values, "member_logits")
    return x, from_logits


def _checked_class_input(x, name, axis, probabilities):
    """Validates a public `(..., classes, ...)` argument: a float tensor with
    a non-empty class axis `axis`, and, where its values exist, finite
    logits or probability rows. Returns the tensor and the axis."""
    x = as_tensor(x, name)
    if len(x.shape) == 0:
        raise ValueError(f"`{name}` must have a class axis; got a scalar.")
    axis = check_axis(axis, len(x.shape))
    check_nonempty_axes(tuple(x.shape), name, "(..., classes, ...)", {axis: "class"})
    check_floating(x, name)
    values = backend_utils.concrete_value(x)
    if values is not None and probabilities:
        check_probability_rows(values, name, axis=axis)
    elif values is not None:
        check_logits(values, name, axis=axis)
    return x, axis


def _member_log_probs(member_outputs, from_logits):
    check_rank(member_outputs, 3, "member_logits", _LAYOUT)
    if check_floating(member_outputs, "member_logits") in ("float16", "bfloat16"):
        # Mixed precision: the combination and the uncertainty are float32.
        member_outputs = ops.cast(member_outputs, "float32")
    if from_logits:
        return ops.log_softmax(member_outputs, axis=-1)
    # Probabilities: log(0) = -inf is fine below because we always multiply
    # by the probability through `_xlogy`.
    return ops.log(member_outputs)


def _xlogy(p, log_p):
    """`p * log_p` with the convention `0 * log(0) = 0`; NaN stays NaN."""
    return ops.where(p == 0, ops.zeros_like(p), p * log_p)


def entropy(probabilities, axis=-1):
    """Shannon entropy (nats) of categorical distributions.

    Args:
        probabilities: tensor of probabilities that sum to one along `axis`.
        axis: int, the class axis. Defaults to `-1`.

    Returns:
        The entropy, with `axis` removed. `0 * log(0)` counts as 0.

    Example:

    ```python
    import numpy as np
    from ensemble_zoo.ops import entropy

    entropy(np.array([[0.5, 0.5], [1.0, 0.0]]))  # [log(2), 0]
    ```
    """
    p, axis = _checked_class_input(probabilities, "probabilities", axis, probabilities=True)
    return -ops.sum(_xlogy(p, ops.log(p)), axis=axis)


def entropy_from_logits(logits, axis=-1):
    """Entropy (nats) of `softmax(logits)`, computed stably in log space."""
    logits, axis = _checked_class_input(logits, "logits", axis, probabilities=False)
    log_p = ops.log_softmax(logits, axis=axis)
    return -ops.sum(_xlogy(ops.exp(log_p), log_p), axis=axis)


def predictive_log_probabilities(member_logits, from_logits=True):
    """Log of the mean member probability, shape `(batch, classes)`.

    Args:
        member_logits: tensor `(batch, members, classes)`.
        from_logits: bool. If `False`, `member_logits` holds per-member
            probabilities instead of logits. Defaults to `True`.
    """
    return _predictive_log_probabilities(*_checked_member_outputs(member_logits, from_logits))


def _predictive_log_probabilities(member_logits, from_logits=True):
    log_p = _member_log_probs(member_logits, from_logits)
    num_members = ops.shape(log_p)[1]
    return ops.logsumexp(log_p, axis=1) - ops.log(ops.cast(num_members, log_p.dtype))


def predictive_probabilities(member_logits, from_logits=True):
    """The ensemble's predictive distribution: mean of member softmaxes.

    Args:
        member_logits: tensor `(batch, members, classes)` of per-member
            logits (the output of every ensemble classifier in the zoo).
        from_logits: bool. If `False`, the input holds per-member
            probabilities. Defaults to `True`.

    Returns:
        Tensor `(batch, classes)`; each row sums to one.

    Example:

    ```python
    import numpy as np
    from ensemble_zoo.ops import predictive_probabilities

    logits = np.random.normal(size=(4, 3, 10)).astype("float32")
    probs = predictive_probabilities(logits)  # (4, 10)
    ```
    """
    return ops.exp(
        _predictive_log_probabilities(*_checked_member_outputs(member_logits, from_logits))
    )


def _predictive_probabilities(member_logits, from_logits=True):
    return ops.exp(_predictive_log_probabilities(member_logits, from_logits))


def uncertainty_decomposition(member_logits, from_logits=True):
    """Splits predictive entropy into aleatoric and epistemic parts.

    With member distributions `p_m` and their mean `p̄`:

    - `total = H[p̄]`, the entropy of the predictive distribution;
    - `aleatoric = mean_m H[p_m]`, the expected member entropy;
    - `epistemic = total - aleatoric`, the mutual information between the
      prediction and the member index (Jensen-Shannon divergence of the
      members).

    `epistemic` is non-negative in exact arithmetic; float rounding can
    make it about -1e-7, so it is clipped at 0. Hence
    `total == aleatoric + epistemic` holds up to float rounding (1e-6).
    With one member, `epistemic` is exactly 0.

    Args:
        member_logits: tensor `(batch, members, classes)`.
        from_logits: bool. If `False`, the input holds per-member
            probabilities. Defaults to `True`.

    Returns:
        dict with keys `"total"`, `"aleatoric"` and `"epistemic"`, each a
        tensor of shape `(batch,)`, in nats.

    Example:

    ```python
    import numpy as np
    from ensemble_zoo.ops import uncertainty_decomposition

    logits = np.random.normal(size=(4, 3, 10)).astype("float32")
    parts = uncertainty_decomposition(logits)
    parts["epistemic"]  # (4,) mutual information
    ```
    """
    return _uncertainty_decomposition(*_checked_member_outputs(member_logits, from_logits))


def _uncertainty_decomposition(member_logits, from_logits=True):
    return uncertainty_decomposition_on_axis(_member_log_probs(member_logits, from_logits))


def uncertainty_decomposition_on_axis(log_p):
    """The decomposition of `uncertainty_decomposition` from member
    log-probabilities `(batch, members, ..., classes)` of any rank (members
    on axis 1, classes last), unchecked: the form compiled code calls (a
    causal LM's decode loop, per position). Returns `total`, `aleatoric`
    and `epistemic`, each `(batch, ...)`."""
    log_mean = ops.logsumexp(log_p, axis=1) - ops.log(ops.cast(ops.shape(log_p)[1], log_p.dtype))
    total = -ops.sum(_xlogy(ops.exp(log_mean), log_mean), axis=-1)
    aleatoric = -ops.mean(ops.sum(_xlogy(ops.exp(log_p), log_p), axis=-1), axis=1)
    epistemic = ops.maximum(total - aleatoric, 0.0)
    return {"total": total, "aleatoric": aleatoric, "epistemic": epistemic}


def mutual_information(member_logits, from_logits=True):
    """Mutual information (epistemic uncertainty), shape `(batch,)`.

    Shorthand for `uncertainty_decomposition(...)["epistemic"]`.
    """
    return _uncertainty_decomposition(*_checked_member_outputs(member_logits, from_logits))[
        "epistemic"
    ]

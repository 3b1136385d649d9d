"""Batched prediction of member logits, and latency / throughput timing."""

import time

import numpy as np

from ensemble_zoo.utils.progress import progress_bar


def _describe(name):
    return f"`{name}`"


def _as_array_pair(data, name):
    if isinstance(data, (tuple, list)):
        if len(data) != 2:
            raise ValueError(
                f"{_describe(name)} must be `x`, `(x, y)` or a tf.data.Dataset; "
                f"got a sequence of length {len(data)}."
            )
        x, y = np.asarray(data[0]), np.asarray(data[1])
        if x.shape[0] != y.shape[0]:
            raise ValueError(
                f"{_describe(name)}: x has {x.shape[0]} samples but y has "
                f"{y.shape[0]}."
            )
        return x, y
    return np.asarray(data), None


def iterate_batches(data, batch_size, name, example_rank):
    """Yields `(x, y_or_None)` NumPy batches from arrays or a tf.data.Dataset.

    Args:
        data: `x`, `(x, y)`, or a `tf.data.Dataset` of `x` or `(x, y)`
            (batched or not).
        batch_size: int, batch size for arrays and unbatched datasets.
        name: str, the argument name used in error messages.
        example_rank: rank of one example (e.g. 3 for an image), to tell a
            batched dataset from an unbatched one.
    """
    if type(data).__module__.startswith("tensorflow") and hasattr(
        data, "element_spec"
    ):
        spec = data.element_spec
        x_spec = spec[0] if isinstance(spec, tuple) else spec
        if isinstance(x_spec, dict):
            raise ValueError(
                f"{_describe(name)}: dict inputs are not supported by the "
                "evaluation harness yet; pass image arrays or datasets."
            )
        if len(x_spec.shape) == example_rank:
            data = data.batch(batch_size)
        for element in data.as_numpy_iterator():
            if isinstance(element, tuple):
                yield element[0], (element[1] if len(element) > 1 else None)
            else:
                yield element, None
        return
    x, y = _as_array_pair(data, name)
    if x.ndim != example_rank + 1:
        raise ValueError(
            f"{_describe(name)}: expected inputs of rank {example_rank + 1} "
            f"(samples, ...); got shape {x.shape}."
        )
    for start in range(0, x.shape[0], batch_size):
        stop = start + batch_size
        yield x[start:stop], (None if y is None else y[start:stop])


def _num_batches(data, batch_size):
    """Number of batches for the progress bar, or None when unknown."""
    if hasattr(data, "element_spec"):
        return None
    x = data[0] if isinstance(data, (tuple, list)) else data
    return -(-len(x) // batch_size)


def _call(model, x):
    return np.asarray(model.predict_on_batch(x), dtype=np.float32)


def example_rank_of(model):
    """Rank of one input example of `model` (3 for an image)."""
    shape = getattr(model, "member_input_shape", None)
    if shape is None and getattr(model, "inputs", None):
        shape = model.inputs[0].shape[1:]
    if shape is None:
        raise ValueError(
            "Cannot tell the input shape of the model; build it first or use "
            "an ensemble_zoo EnsembleClassifier."
        )
    return len(shape)


def predict_member_logits(model, data, batch_size, name, progress=True):
    """Member logits `(samples, members, classes)` and labels (or None).

    Every batch is padded to `batch_size` so compiled prediction functions
    see one static shape; the padding is cut off again.
    """
    example_rank = example_rank_of(model)
    logits, labels = [], []
    batches = iterate_batches(data, batch_size, name, example_rank)
    total = _num_batches(data, batch_size)
    for x, y in progress_bar(
        batches, desc=f"predict {name}", total=total, enable=progress
    ):
        n = x.shape[0]
        if n < batch_size:
            x = np.concatenate([x, np.repeat(x[-1:], batch_size - n, axis=0)])
        out = _call(model, x)[:n]
        if out.ndim == 2:
            out = out[:, None, :]
        if out.ndim != 3:
            raise ValueError(
                "The model must return member logits (batch, members, "
                f"classes) or logits (batch, classes); got shape {out.shape}."
            )
        logits.append(out)
        if y is not None:
            labels.append(np.asarray(y).reshape(-1))
    if not logits:
        raise ValueError(f"{_describe(name)} is empty.")
    logits = np.concatenate(logits)
    return logits, (np.concatenate(labels) if labels else None)


def _median_seconds(fn, min_repeats=5, max_repeats=50, min_total=0.5):
    fn()
    fn()  # compile and warm up
    times = []
    while len(times) < max_repeats and (
        len(times) < min_repeats or sum(times) < min_total
    ):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def measure_speed(model, x, batch_size, latency_batch_size):
    """Median latency (ms per batch of `latency_batch_size`) and
    throughput (samples/s at `batch_size`), measured on the same `x`.

    Each timing repeats one compiled call (after two warm-up calls) until
    it has run at least 5 times and 0.5 s, at most 50 times, and takes the
    median. Outputs are copied to NumPy, so the time includes finishing
    the computation on the device.
    """
    x = np.asarray(x)
    reps = -(-batch_size // x.shape[0])
    full = np.concatenate([x] * reps)[:batch_size]
    small = np.concatenate([x] * -(-latency_batch_size // x.shape[0]))
    small = small[:latency_batch_size]
    latency = _median_seconds(lambda: _call(model, small))
    per_batch = _median_seconds(lambda: _call(model, full))
    return {
        "latency_ms": latency * 1000.0,
        "latency_batch_size": int(latency_batch_size),
        "throughput": batch_size / per_batch,
        "throughput_batch_size": int(batch_size),
    }

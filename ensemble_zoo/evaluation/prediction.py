"""Batched prediction of member logits, and latency / throughput timing."""

import time

import numpy as np

from ensemble_zoo.utils.progress import progress_bar


def _describe(name):
    return f"`{name}`"


def _is_dataset(data):
    return type(data).__module__.startswith("tensorflow") and hasattr(data, "element_spec")


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
                f"{_describe(name)}: x has {x.shape[0]} samples but y has {y.shape[0]}."
            )
        return x, y
    return np.asarray(data), None


def iterate_batches(data, batch_size, name, example_rank):
    """Yields `(x, y_or_None)` NumPy batches from arrays or a tf.data.Dataset.

    Args:
        data: `x`, `(x, y)`, or a `tf.data.Dataset` of `x` or `(x, y)`
            (batched or not; datasets are re-batched to `batch_size`).
        batch_size: int, batch size for arrays and unbatched datasets.
        name: str, the argument name used in error messages.
        example_rank: rank of one example (e.g. 3 for an image), to tell a
            batched dataset from an unbatched one.
    """
    if _is_dataset(data):
        spec = data.element_spec
        if isinstance(spec, tuple) and len(spec) > 2:
            raise ValueError(
                f"{_describe(name)}: dataset elements have {len(spec)} parts; "
                "the harness takes `x` or `(x, y)` (sample weights are not "
                "supported)."
            )
        x_spec = spec[0] if isinstance(spec, tuple) else spec
        if isinstance(x_spec, dict):
            raise ValueError(
                f"{_describe(name)}: dict inputs are not supported by the "
                "evaluation harness yet; pass image arrays or datasets."
            )
        rank = x_spec.shape.rank
        if rank not in (example_rank, example_rank + 1):
            raise ValueError(
                f"{_describe(name)}: dataset inputs must have rank "
                f"{example_rank} (one example) or {example_rank + 1} "
                f"(batches); got shape {x_spec.shape}."
            )
        if rank == example_rank + 1:
            data = data.unbatch()
        # Re-batched to `batch_size`: one static shape for every call.
        for element in data.batch(batch_size).as_numpy_iterator():
            if isinstance(element, tuple):
                yield element[0], (element[1] if len(element) > 1 else None)
            else:
                yield element, None
        return
    if not isinstance(data, (np.ndarray, tuple, list)) and not hasattr(data, "__array__"):
        raise ValueError(
            f"{_describe(name)} must be `x`, `(x, y)` (arrays) or a "
            f"tf.data.Dataset; got {type(data).__name__}."
        )
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
    if _is_dataset(data):
        return None
    x = data[0] if isinstance(data, (tuple, list)) else data
    if not hasattr(x, "__len__"):
        return None  # iterate_batches raises the clear error
    return -(-len(x) // batch_size)


def _call(model, x):
    """The model's logits on one batch, and its own per-sample uncertainty
    scores (a dict, empty unless the model returns a dict such as the
    loss-prediction model's `{"logits", "uncertainty"}`)."""
    out = model.predict_on_batch(x)
    if isinstance(out, dict):
        if "logits" not in out:
            raise ValueError(
                f"A model that returns a dict must have a 'logits' entry; got keys {sorted(out)}."
            )
        scores = {
            k: np.asarray(v, np.float64).reshape(-1)
            for k, v in out.items()
            if k != "logits" and np.ndim(v) == 1
        }
        return np.asarray(out["logits"], dtype=np.float32), scores
    return np.asarray(out, dtype=np.float32), {}


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
    """Member logits `(samples, members, classes)` and labels (or None)."""
    logits, labels, _ = predict_outputs(model, data, batch_size, name, progress)
    return logits, labels


def predict_outputs(model, data, batch_size, name, progress=True):
    """Member logits `(samples, members, classes)`, labels (or None) and the
    model's own per-sample scores (a dict of `(samples,)` arrays, e.g. the
    loss-prediction model's `"uncertainty"`; empty for ensembles).

    Every batch is padded to `batch_size` so compiled prediction functions
    see one static shape; the padding is cut off again.
    """
    example_rank = example_rank_of(model)
    logits, labels, scores = [], [], {}
    batches = iterate_batches(data, batch_size, name, example_rank)
    total = _num_batches(data, batch_size)
    for x, y in progress_bar(batches, desc=f"predict {name}", total=total, enable=progress):
        n = x.shape[0]
        if n < batch_size:
            x = np.concatenate([x, np.repeat(x[-1:], batch_size - n, axis=0)])
        out, batch_scores = _call(model, x)
        out = out[:n]
        for key, values in batch_scores.items():
            scores.setdefault(key, []).append(values[:n])
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
    finite = np.isfinite(logits)
    if not finite.all():
        bad = np.flatnonzero(~finite.all(axis=(1, 2)))
        raise ValueError(
            f"The model's predictions on {_describe(name)} are not finite: "
            f"{bad.size} of {logits.shape[0]} samples have NaN or infinite "
            f"logits (first: sample {bad[0]}). Check the inputs and the "
            "weights; no metric is computed from non-finite predictions."
        )
    scores = {k: np.concatenate(v) for k, v in scores.items()}
    for key, values in scores.items():
        if not np.isfinite(values).all():
            raise ValueError(
                f"The model's {key!r} scores on {_describe(name)} are not "
                f"finite ({int((~np.isfinite(values)).sum())} samples)."
            )
    return logits, (np.concatenate(labels) if labels else None), scores


def _warm_up(fn, min_calls=10, min_seconds=0.5, max_seconds=5.0):
    """Calls `fn` until compiled and steady: at least `min_calls` calls and
    `min_seconds`, at most `max_seconds` (PyTorch's eager mode keeps
    speeding up over its first calls)."""
    start = time.perf_counter()
    calls = 0
    while calls < min_calls or time.perf_counter() - start < min_seconds:
        fn()
        calls += 1
        if time.perf_counter() - start > max_seconds and calls >= 2:
            break


def _median_seconds(fn, min_repeats=5, max_repeats=50, min_total=0.5, warm_up_calls=10):
    _warm_up(fn, min_calls=warm_up_calls, min_seconds=min(0.5, min_total))
    times = []
    while len(times) < max_repeats and (len(times) < min_repeats or sum(times) < min_total):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _repeat_to(x, size):
    x = np.asarray(x)
    return np.concatenate([x] * -(-size // x.shape[0]))[:size]


def measure_speed(model, x, batch_size, latency_batch_size, latency=True):
    """Median latency (ms per batch of `latency_batch_size`) and
    throughput (samples/s at `batch_size`), measured on the same `x`.

    The latency timing warms up (compilation, then at least 10 calls and
    0.5 s), then repeats one call until it has run at least 5 times and
    0.5 s, at most 50 times, and takes the median. The throughput timing
    (large batches, each call long enough to time alone) warms up with 3
    calls and takes the median of at least 3 calls and 0.3 s. Outputs are
    copied to NumPy, so the time includes finishing the computation on
    the device. `latency=False` skips the latency timing (`latency_ms` is
    then `None`), for a caller that times latencies itself.
    """
    full = _repeat_to(x, batch_size)
    small = _repeat_to(x, latency_batch_size)
    seconds = _median_seconds(lambda: _call(model, small)) if latency else None
    per_batch = _median_seconds(
        lambda: _call(model, full), min_repeats=3, min_total=0.3, warm_up_calls=3
    )
    return {
        "latency_ms": None if seconds is None else seconds * 1000.0,
        "latency_batch_size": int(latency_batch_size),
        "throughput": batch_size / per_batch,
        "throughput_batch_size": int(batch_size),
    }


def interleaved_timings(models, x, batch_size, rounds=21):
    """Per-call times (ms) of several models timed in alternation.

    Every model is warmed up, then each round times one call of every
    model in turn, so drifts of the machine (other processes, clock
    changes) hit all models alike; ratios between models are therefore
    steadier than with separate timings.

    Args:
        models: dict mapping a name to a model.
        x: inputs; the first `batch_size` (repeated if needed) are used.
        batch_size: int, the batch size timed.
        rounds: int, number of rounds. Defaults to `21`.

    Returns:
        dict mapping each name to a `(rounds,)` float64 array of ms.
    """
    batch = _repeat_to(x, batch_size)
    for model in models.values():
        _warm_up(lambda: _call(model, batch))
    times = {name: [] for name in models}
    for _ in range(rounds):
        for name, model in models.items():
            start = time.perf_counter()
            _call(model, batch)
            times[name].append(time.perf_counter() - start)
    return {name: np.asarray(t, "float64") * 1000.0 for name, t in times.items()}


def interleaved_latencies(models, x, batch_size, rounds=21):
    """Median latency (ms) of several models timed in alternation
    (`interleaved_timings`); same arguments."""
    times = interleaved_timings(models, x, batch_size, rounds)
    return {name: float(np.median(t)) for name, t in times.items()}


def timing_spread(times):
    """The round-to-round noise of `interleaved_timings`: the median over
    models of half the interquartile range of their call times, relative
    to their median time (0.05 = +-5%). A latency ratio that differs from
    1.00x by less than about this much is noise."""
    spreads = []
    for t in times.values():
        q25, q50, q75 = np.percentile(t, [25, 50, 75])
        if q50 > 0:
            spreads.append((q75 - q25) / 2 / q50)
    return float(np.median(spreads)) if spreads else 0.0

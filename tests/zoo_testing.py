"""Helpers shared by the test files: conversion to NumPy, NumPy references
and the tiny keras-hub models the method tests start from.

Test files import it as `from zoo_testing import to_np` (like `conftest`,
it sits in `tests/`, which pytest puts on `sys.path`). Keep it small: a
helper belongs here once two test files need the same one.
"""

import datetime
import os
import zlib

import keras
import numpy as np
import pytest
from keras import ops


def to_np(x):
    """A backend tensor, variable or array as a NumPy array (its dtype)."""
    return np.asarray(ops.convert_to_numpy(x))


def to_np64(x):
    """`to_np` in float64, for references computed in double precision."""
    return np.asarray(ops.convert_to_numpy(x), np.float64)


def np_softmax(z):
    """Softmax over the last axis, in NumPy."""
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def keras_hub_attention(causal_lm, token_ids, monkeypatch):
    """`(batch, layers, heads, queries, keys)`: the softmax of keras-hub's
    own attention layers (their `softmax` sublayer, which Gemma's runs on a
    CPU under every backend) in a standard forward pass."""
    captured = []
    for block in causal_lm.backbone.transformer_layers:
        softmax = block.attention.softmax
        original = softmax.call

        def call(inputs, mask=None, original=original):
            outputs = original(inputs, mask=mask)
            captured.append(outputs)
            return outputs

        monkeypatch.setattr(softmax, "call", call)
    causal_lm({"token_ids": token_ids, "padding_mask": np.ones_like(token_ids, bool)})
    monkeypatch.undo()
    weights = [to_np(w).astype("float64") for w in captured]  # (batch, kv, groups, q, k)
    return np.stack([w.reshape((w.shape[0], -1) + w.shape[-2:]) for w in weights], axis=1)


def perturb_weights(model, seed=0, scale=0.05):
    """Adds Gaussian noise to every weight of `model`, so that biases and
    normalisation parameters are not trivially zero or one."""
    rng = np.random.default_rng(seed)
    for w in model.weights:
        w.assign(to_np(w) + rng.normal(scale=scale, size=w.shape).astype("float32"))
    return model


def tiny_vit(
    seed=0,
    num_classes=5,
    pooling="token",
    preprocessor=None,
    image_shape=(8, 8, 1),
    patch_size=2,
    num_layers=2,
    num_heads=2,
    hidden_dim=16,
    mlp_dim=32,
    **backbone_kwargs,
):
    """A small `keras_hub.models.ViTImageClassifier` on 8 x 8 x 1 images,
    built after `keras.utils.set_random_seed(seed)` (so the same arguments
    give the same weights). Extra keyword arguments go to the `ViTBackbone`."""
    import keras
    import keras_hub

    keras.utils.set_random_seed(seed)
    backbone = keras_hub.models.ViTBackbone(
        image_shape=image_shape,
        patch_size=patch_size,
        num_layers=num_layers,
        num_heads=num_heads,
        hidden_dim=hidden_dim,
        mlp_dim=mlp_dim,
        **backbone_kwargs,
    )
    return keras_hub.models.ViTImageClassifier(
        backbone=backbone, num_classes=num_classes, pooling=pooling, preprocessor=preprocessor
    )


def tiny_bert(
    seed=0,
    num_classes=3,
    num_heads=4,
    max_sequence_length=10,
    vocabulary_size=50,
    **classifier_kwargs,
):
    """A small `keras_hub.models.BertTextClassifier` (2 layers, width 16)
    without a preprocessor, built after `keras.utils.set_random_seed(seed)`.
    Extra keyword arguments go to the classifier (e.g. `dropout`)."""
    import keras
    import keras_hub

    keras.utils.set_random_seed(seed)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=vocabulary_size,
        num_layers=2,
        num_heads=num_heads,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=max_sequence_length,
    )
    return keras_hub.models.BertTextClassifier(
        backbone=backbone, num_classes=num_classes, preprocessor=None, **classifier_kwargs
    )


def text_inputs(n=4, seed=1, length=10, vocabulary_size=50):
    """BERT inputs for `tiny_bert`: random token and segment ids, rows 1 and
    3 padded (from positions 6 and 3)."""
    rng = np.random.default_rng(seed)
    padding = np.ones((n, length), "int32")
    padding[1, 6:] = 0
    padding[3, 3:] = 0
    return {
        "token_ids": (rng.integers(1, vocabulary_size, size=(n, length)) * padding).astype("int32"),
        "segment_ids": (rng.integers(0, 2, size=(n, length)) * padding).astype("int32"),
        "padding_mask": padding,
    }


def np_token_figures(member_logits, tokens=None, weights=None):
    """Float64 NumPy reference of the token-level figures of Malinin &
    Gales (arXiv:2002.07650), written from their definitions with loops
    over the members: member logits `(batch, members, ..., vocabulary)`,
    figures `(batch, ...)` (`member_entropy`, `member_log_probs`:
    `(batch, members, ...)`). `weights` `(batch, members, ...)` (summing
    to one over members; default uniform) weigh the members' mixture."""
    z = np.asarray(member_logits, np.float64)
    num = z.shape[1]
    if weights is None:
        weights = np.full(z.shape[:-1], 1.0 / num)
    w = [np.asarray(weights, np.float64)[:, m] for m in range(num)]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        shifted = z - z.max(-1, keepdims=True)
        log_p = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        p = np.exp(log_p)
        mean = sum(w[m][..., None] * p[:, m] for m in range(num))
        log_mean = np.log(mean)

        def kl(a, log_a, log_b):
            return np.where(a > 0, a * (log_a - log_b), 0.0).sum(-1)

        def h(a, log_a):
            return -np.where(a > 0, a * log_a, 0.0).sum(-1)

        members = range(num)
        out = {
            "total": h(mean, log_mean),
            "member_entropy": np.stack([h(p[:, m], log_p[:, m]) for m in members], 1),
            "epistemic": sum(w[m] * kl(p[:, m], log_p[:, m], log_mean) for m in members),
            "expected_pairwise_kl": sum(
                w[m] * w[n] * kl(p[:, m], log_p[:, m], log_p[:, n])
                for m in members
                for n in members
            ),
            "reverse_mutual_information": sum(
                w[m] * kl(mean, log_mean, log_p[:, m]) for m in members
            ),
            "max_probability": mean.max(-1),
        }
    out["aleatoric"] = sum(w[m] * out["member_entropy"][:, m] for m in members)
    if tokens is not None:
        tokens = np.asarray(tokens)
        out["log_prob"] = np.log(np.take_along_axis(mean, tokens[..., None], -1)[..., 0])
        out["member_log_probs"] = np.stack(
            [np.take_along_axis(log_p[:, m], tokens[..., None], -1)[..., 0] for m in members], 1
        )
    return out


#: The model tests (`tests/models/`) run one day in `MODEL_ROTATION[backend]`
#: (JAX and TensorFlow, which compile every model they build, one day in
#: four; eager PyTorch, the quickest to build, one in two), each test on
#: its own days, and on the day of `MODEL_ROTATION_RESIDUE[backend]`: the
#: residues split every test's four days among the backends, so that each
#: model test runs under exactly one backend every day (`conftest.py`).
MODEL_ROTATION = {"jax": 4, "tensorflow": 4, "torch": 2}
MODEL_ROTATION_RESIDUE = {"jax": 0, "tensorflow": 2, "torch": 1}


def runs_today(name, backend):
    """Whether the rotated test `name` (its node id) runs under `backend`
    today (`MODEL_ROTATION`): one day in four under JAX and TensorFlow, one
    in two under PyTorch, never two backends on the same day."""
    day = zlib.crc32(name.encode()) + run_day()
    return day % MODEL_ROTATION[backend] == MODEL_ROTATION_RESIDUE[backend]


def run_day():
    """The day the rotations of this run follow: today's ordinal, fixed
    once per run in the environment (the first process that asks sets it;
    pytest-xdist's workers inherit it), so that workers collecting across
    midnight still collect the same tests."""
    return int(
        os.environ.setdefault("ENSEMBLE_ZOO_TEST_DAY", str(datetime.date.today().toordinal()))
    )


#: The suite's two longest single-backend checks run on alternate days
#: (test budget, about 3 minutes each): the README's main command in a
#: fresh copy under JAX on even days, PyTorch's compiled steps
#: (`torch.compile` traces) on odd days; two benchmark scripts (implicit
#: ensembles, MoE: about 25 s each under PyTorch) on even days.
ALTERNATE_DAYS = {"main_command": 0, "torch_compile": 1, "benchmark_scripts": 0, "inductor": 0}


def skip_on_alternate_days(check):
    """A `skipif` mark that runs `check` (an `ALTERNATE_DAYS` key) on its
    days only."""
    day = ALTERNATE_DAYS[check]
    return pytest.mark.skipif(
        run_day() % 2 != day, reason=f"runs on {'even' if day == 0 else 'odd'} days (test budget)"
    )


def families_this_run(names, size):
    """The families a family test runs: every one under PyTorch (eager,
    the quickest to build), and under JAX and TensorFlow, which compile
    each family, `size` of them that rotate with the day (the suite's time
    budget), so that every family runs under every backend in turn. The
    slice stays for `MODEL_ROTATION[backend]` days, the days over which
    the backend's model-test rotation runs each test once."""
    backend = keras.config.backend()
    if backend == "torch":
        return sorted(names)
    return this_run(names, size, run_day() // MODEL_ROTATION[backend])


def this_run(names, size, day=None):
    """`size` of `names` (sorted) that rotate with `day` (default
    `run_day()`): what a test too slow to run for every item in every run
    (the suite's time budget) runs, so that every item runs in turn."""
    names = sorted(names)
    if not names:
        return []
    day = run_day() if day is None else day
    start = day * size % len(names)
    return [names[(start + i) % len(names)] for i in range(min(size, len(names)))]

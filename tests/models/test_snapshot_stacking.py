"""Snapshot Ensembles of LoRA-Ensembles: the adapters' snapshots of one
training stacked as the members of one model (a classifier and a causal
LM), each member equal to the trained model with its snapshot's weights."""

import keras
import numpy as np
import pytest
from fixtures.tiny_causal_lms import build_causal_lm
from fixtures.tiny_text_classifiers import build_text_classifier
from zoo_testing import to_np

from ensemble_zoo.models import LoRAEnsembleCausalLM
from ensemble_zoo.models import LoRAEnsembleClassifier
from ensemble_zoo.training import SnapshotEnsemble
from ensemble_zoo.training import SnapshotSchedule


def train_with_snapshots(model, x, y, **fit):
    schedule = SnapshotSchedule(0.05, steps_per_epoch=2, epochs=3, num_snapshots=3)
    snapshots = SnapshotEnsemble(schedule)
    model.compile(optimizer=keras.optimizers.SGD(schedule), **fit.pop("compile", {}))
    model.fit(x, y, batch_size=2, epochs=3, shuffle=False, callbacks=[snapshots], verbose=0)
    return snapshots


def check_members(model, snapshots, x, members_per_snapshot):
    stacked = snapshots.stacked_ensemble()
    assert type(stacked) is type(model)
    logits = to_np(stacked(x))
    assert logits.shape[1] == 3 * members_per_snapshot
    for s, weights in enumerate(snapshots.snapshots):
        model.set_weights(weights)
        expected = to_np(model(x))
        k = members_per_snapshot
        np.testing.assert_allclose(logits[:, s * k : (s + 1) * k], expected, atol=1e-5)
    return stacked


def test_classifier_snapshots_stack_into_one_lora_ensemble():
    base = build_text_classifier("bert")
    model = LoRAEnsembleClassifier.from_model(base, num_members=2, rank=2, seed=0)
    rng = np.random.default_rng(0)
    x = {
        "token_ids": rng.integers(1, 50, size=(4, 8)).astype("int32"),
        "segment_ids": np.zeros((4, 8), "int32"),
        "padding_mask": np.ones((4, 8), bool),
    }
    snapshots = train_with_snapshots(model, x, np.array([0, 1, 2, 1]))
    stacked = check_members(model, snapshots, x, members_per_snapshot=2)
    assert stacked.num_members == 6


def test_causal_lm_snapshots_stack_and_a_trained_trunk_is_refused():
    base = build_causal_lm("gemma")
    model = LoRAEnsembleCausalLM.from_keras_hub(base, num_members=1, rank=2, seed=0)
    tokens = np.random.default_rng(0).integers(4, 50, size=(4, 9)).astype("int32")
    x = {"token_ids": tokens[:, :-1], "padding_mask": np.ones((4, 8), bool)}
    snapshots = train_with_snapshots(model, x, tokens[:, 1:])
    check_members(model, snapshots, x, members_per_snapshot=1)
    frozen = next(i for i, w in enumerate(model.weights) if not w.trainable)
    snapshots.snapshots[1][frozen] = snapshots.snapshots[1][frozen] + 1.0  # "trained"
    with pytest.raises(ValueError, match="stacking needs a frozen trunk"):
        snapshots.stacked_ensemble()

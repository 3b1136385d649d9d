"""Snapshot Ensembles: the schedule against the formulas of Huang et al.
and the LoRA-Ensemble paper (appendix U) in NumPy, the snapshots against
the weights an independent callback saves at the cycle ends, and the
deep ensemble of snapshots against each snapshot's model."""

import math

import keras
import numpy as np
import pytest
from zoo_testing import to_np

import ensemble_zoo as ez
from ensemble_zoo.training import SnapshotEnsemble
from ensemble_zoo.training import SnapshotSchedule
from ensemble_zoo.training import snapshot_phases


def np_schedule(lr, steps_per_epoch, burn_in, cycle, warmup, alpha, steps):
    """The rate at each step: linear warm-up and one cosine decay to 0 over
    the burn-in, then cosine cycles floored at `alpha * lr`."""
    out = []
    for t in range(steps):
        b = burn_in * steps_per_epoch
        if t < b:
            if t < warmup:
                out.append(lr * t / warmup)
            else:
                out.append(
                    lr * max(0.0, 0.5 * (1 + math.cos(math.pi * (t - warmup) / (b - warmup))))
                )
        else:
            c = cycle * steps_per_epoch
            out.append(lr * max(alpha, 0.5 * (1 + math.cos(math.pi * ((t - b) % c) / c))))
    return np.array(out)


def test_phases_follow_the_papers_and_the_rates_their_formulas():
    assert snapshot_phases(65, 16, 20) == (20, 3)  # HAM10000 (appendix U)
    assert snapshot_phases(30, 16, 15) == (15, 1)  # CIFAR
    assert snapshot_phases(30, 4, 14) == (15, 5)  # extended until 3 cycles divide
    assert snapshot_phases(12, 3, 0) == (0, 4)  # Huang et al.: equal cycles
    assert snapshot_phases(5, 1, 5) == (5, 0)
    for burn_in, warmup in ((0, 0), (4, 3)):
        epochs = 10 if burn_in else 9
        schedule = SnapshotSchedule(
            0.1, 5, epochs, num_snapshots=3, burn_in_epochs=burn_in, warmup_steps=warmup, alpha=0.01
        )
        b, c = snapshot_phases(epochs, 3, burn_in)
        steps = np.arange(50)
        ours = to_np(schedule(keras.ops.convert_to_tensor(steps)))
        np.testing.assert_allclose(
            ours, np_schedule(0.1, 5, b, c, warmup, 0.01, 50), rtol=1e-5, atol=1e-7
        )
    assert SnapshotSchedule(0.1, 5, 12, 3).snapshot_epochs == (4, 8, 12)
    assert SnapshotSchedule(0.1, 5, 10, 3, burn_in_epochs=4).snapshot_epochs == (4, 7, 10)
    restored = SnapshotSchedule.from_config(schedule.get_config())
    assert restored.get_config() == schedule.get_config()
    with pytest.raises(ValueError, match="must split evenly"):
        SnapshotSchedule(0.1, 5, epochs=10, num_snapshots=3)
    with pytest.raises(ValueError, match="too few"):
        SnapshotSchedule(0.1, 5, epochs=4, num_snapshots=4, burn_in_epochs=3)
    with pytest.raises(ValueError, match="`warmup_steps`"):
        SnapshotSchedule(0.1, 5, epochs=10, num_snapshots=3, burn_in_epochs=1, warmup_steps=20)
    with pytest.raises(ValueError, match="`num_snapshots` must be a positive integer"):
        SnapshotSchedule(0.1, 5, epochs=10, num_snapshots=0)
    with pytest.raises(TypeError, match="`schedule` must be"):
        SnapshotEnsemble(keras.optimizers.schedules.CosineDecay(0.1, 10))


class SaveAtEpochs(keras.callbacks.Callback):
    """The independent reference: the weights at the given epochs' ends."""

    def __init__(self, epochs):
        super().__init__()
        self.epochs, self.saved = epochs, []

    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 in self.epochs:
            self.saved.append([to_np(w).copy() for w in self.model.weights])


def test_snapshots_are_the_weights_at_the_cycle_ends_and_become_a_deep_ensemble():
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 6)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    inputs = keras.Input((6,))
    model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Dense(8, "relu")(inputs)))
    schedule = SnapshotSchedule(0.05, steps_per_epoch=4, epochs=6, num_snapshots=3)
    model.compile(
        optimizer=keras.optimizers.SGD(schedule),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    snapshots, reference = SnapshotEnsemble(schedule), SaveAtEpochs((2, 4, 6))
    with pytest.raises(ValueError, match="No snapshot was taken"):
        snapshots.deep_ensemble()
    with pytest.raises(ValueError, match="must run the schedule's 6 epochs"):
        model.fit(x, y, batch_size=8, epochs=5, callbacks=[snapshots], verbose=0)
    model.fit(x, y, batch_size=8, epochs=6, callbacks=[snapshots, reference], verbose=0)
    assert snapshots.snapshot_epochs == [2, 4, 6]
    for ours, theirs in zip(snapshots.snapshots, reference.saved, strict=True):
        for a, b in zip(ours, theirs, strict=True):
            np.testing.assert_array_equal(a, b)
    assert not np.array_equal(snapshots.snapshots[0][0], snapshots.snapshots[1][0])
    ensemble = snapshots.deep_ensemble()
    member_logits = to_np(ensemble(x))
    for s, weights in enumerate(reference.saved):
        model.set_weights(weights)
        np.testing.assert_allclose(member_logits[:, s], to_np(model(x)), atol=1e-5)
    with pytest.raises(ValueError, match="names its `num_members`"):
        snapshots.stacked_ensemble()
    with pytest.raises(ValueError, match="has taken 24 steps already"):
        model.fit(x, y, batch_size=8, epochs=6, callbacks=[snapshots], verbose=0)

"""Snapshot Ensembles: the weights at the end of each learning-rate cycle
of one training, made into an ensemble."""

import keras
import numpy as np

from ensemble_zoo.training.member_stacking import num_members_of
from ensemble_zoo.training.member_stacking import with_members
from ensemble_zoo.training.snapshot_schedule import SnapshotSchedule


class SnapshotEnsemble(keras.callbacks.Callback):
    """Takes a snapshot of the model's weights at the end of each cycle of
    a `SnapshotSchedule` and makes the snapshots an ensemble.

    Snapshot Ensembles (Huang et al. 2017, arXiv 1704.00109; the
    LoRA-Ensemble paper's baseline, appendix U) keep the weights at the
    end of each cosine cycle, where the learning rate is at its lowest, as
    the members of an ensemble. Add this callback to a `fit` whose
    optimizer runs `schedule` for `schedule.epochs` epochs; after it:

    - `deep_ensemble()`: a `DeepEnsembleClassifier` whose members are
      copies of the model with each snapshot's weights (whole models: the
      paper's Snapshot Ensemble of fully fine-tuned networks);
    - `stacked_ensemble()`: for a model whose members share a frozen trunk
      (a LoRA-Ensemble of any kind, causal LMs included, usually trained
      with one member), one model of the same class with the snapshots'
      members side by side: every snapshot in one batched pass.

    A snapshot holds every weight of the model (`model.weights` order) as
    a NumPy array; a weight unchanged since the previous snapshot (a
    frozen trunk) is shared, not copied.

    Args:
        schedule: the `SnapshotSchedule` the optimizer runs; the snapshots
            are taken after its `snapshot_epochs`.

    Example:

    ```python
    import keras
    import ensemble_zoo

    train = ensemble_zoo.datasets.load("digits", "train", batch_size=64)
    schedule = ensemble_zoo.training.SnapshotSchedule(
        1e-2, steps_per_epoch=len(train), epochs=3, num_snapshots=3
    )
    inputs = keras.Input((8, 8, 1))
    x = keras.layers.Dense(32, activation="relu")(keras.layers.Flatten()(inputs))
    model = keras.Model(inputs, keras.layers.Dense(8)(x))
    model.compile(
        optimizer=keras.optimizers.Adam(schedule),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    snapshots = ensemble_zoo.training.SnapshotEnsemble(schedule)
    model.fit(train, epochs=schedule.epochs, callbacks=[snapshots], verbose=0)
    ensemble = snapshots.deep_ensemble()  # a DeepEnsembleClassifier
    ensemble.num_members  # 3
    ```
    """

    def __init__(self, schedule):
        super().__init__()
        if not isinstance(schedule, SnapshotSchedule):
            raise TypeError(
                f"`schedule` must be an `ensemble_zoo.training.SnapshotSchedule`; got {schedule!r}."
            )
        self.schedule = schedule
        #: The snapshots so far: per snapshot, the model's weights.
        self.snapshots = []
        #: The epoch (counted from 1) of each snapshot.
        self.snapshot_epochs = []

    def on_train_begin(self, logs=None):
        """Checks `fit`'s epochs and steps against the schedule, and that
        the optimizer starts at step 0 (the schedule's cycles count from
        it: `compile` again before another `fit`); a new `fit` starts a new
        set of snapshots."""
        self.snapshots, self.snapshot_epochs = [], []
        optimizer = getattr(self.model, "optimizer", None)
        done = 0 if optimizer is None else int(keras.ops.convert_to_numpy(optimizer.iterations))
        if done:
            raise ValueError(
                f"The optimizer has taken {done} steps already; the schedule's cycles count "
                "from step 0: `compile` the model again (a new optimizer) before this `fit`."
            )
        epochs, steps = self.params.get("epochs"), self.params.get("steps")
        if epochs != self.schedule.epochs:
            raise ValueError(
                f"`fit(epochs={epochs})` must run the schedule's {self.schedule.epochs} epochs."
            )
        if steps is not None and steps != self.schedule.steps_per_epoch:
            raise ValueError(
                f"`fit` runs {steps} steps per epoch; the schedule was built for "
                f"{self.schedule.steps_per_epoch} (`steps_per_epoch`)."
            )

    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 in self.schedule.snapshot_epochs and epoch + 1 not in self.snapshot_epochs:
            previous = self.snapshots[-1] if self.snapshots else None
            weights = []
            for i, variable in enumerate(self.model.weights):
                value = np.array(keras.ops.convert_to_numpy(variable.value))
                if previous is not None and np.array_equal(previous[i], value):
                    value = previous[i]
                weights.append(value)
            self.snapshots.append(weights)
            self.snapshot_epochs.append(epoch + 1)

    def deep_ensemble(self, **kwargs):
        """A `DeepEnsembleClassifier` of the snapshots: member `s` is a copy
        of the model (`DeepEnsembleClassifier.from_model`, without
        reseeding) with snapshot `s`'s weights.

        Args:
            **kwargs: `DeepEnsembleClassifier` arguments.
        """
        from ensemble_zoo.models import DeepEnsembleClassifier

        self._check_snapshots()
        ensemble = DeepEnsembleClassifier.from_model(
            self.model, num_members=len(self.snapshots), seed=None, **kwargs
        )
        for member, weights in zip(ensemble.members, self.snapshots, strict=True):
            _assign(member.weights, weights)
        return ensemble

    def stacked_ensemble(self):
        """One model of the trained model's class whose members are every
        snapshot's members, snapshot by snapshot: with `k` members per
        snapshot and `S` snapshots, member `s * k + j` is member `j` of
        snapshot `s`.

        The model's config names its members (`num_members`, in the task's
        and its backbone's config, as every member-axis model of the zoo
        does); a weight with the members on its first axis (adapters,
        heads) is stacked, every other weight (the trunk) must be the same
        in every snapshot.

        Raises:
            ValueError: when a shared weight changed between snapshots (the
                trunk was trained: use `deep_ensemble()`), or the model has
                no `num_members`.
        """
        self._check_snapshots()
        model = self.model
        try:
            members = num_members_of(model) * len(self.snapshots)
        except ValueError as e:
            raise ValueError(
                "`stacked_ensemble()` needs a model whose config names its `num_members` "
                f"(a LoRA-Ensemble); {type(model).__name__}'s does not: use `deep_ensemble()`."
            ) from e
        index = {id(v): i for i, v in enumerate(model.weights)}

        def stacked(source, member_axis):
            values = [snapshot[index[id(source)]] for snapshot in self.snapshots]
            if member_axis:
                return np.concatenate(values, axis=0)
            if all(np.array_equal(values[0], v) for v in values[1:]):
                return values[0]
            if np.issubdtype(values[0].dtype, np.integer):
                return values[-1]  # a random generator's state
            raise ValueError(
                f"`{source.path}` differs between snapshots but is shared by the members: "
                "stacking needs a frozen trunk (use `deep_ensemble()`)."
            )

        return with_members(model, members, stacked)

    def _check_snapshots(self):
        if not self.snapshots:
            raise ValueError(
                "No snapshot was taken: run `fit` with this callback for the schedule's "
                f"{self.schedule.epochs} epochs first."
            )


def _assign(variables, values):
    for variable, value in zip(variables, values, strict=True):
        if tuple(variable.shape) != value.shape:
            raise ValueError(
                f"`{variable.path}` has shape {tuple(variable.shape)}; the snapshot's is "
                f"{value.shape}."
            )
        variable.assign(value)

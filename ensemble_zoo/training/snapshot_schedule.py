"""The learning-rate schedule of Snapshot Ensembles: a burn-in, then
cosine cycles, a snapshot at the end of each."""

import math

import keras
from keras import ops

from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_real
from ensemble_zoo.utils.validation import is_integer


def _check_non_negative_int(value, name):
    if not is_integer(value) or value < 0:
        raise ValueError(f"`{name}` must be a non-negative integer; got {value!r}.")
    return int(value)


def snapshot_phases(epochs, num_snapshots, burn_in_epochs):
    """`(burn_in_epochs, cycle_epochs)` of a Snapshot Ensemble's schedule.

    Without a burn-in (Huang et al. 2017, "Snapshot Ensembles: Train 1,
    get M for free", arXiv 1704.00109) the epochs split into
    `num_snapshots` equal cycles. With one (the LoRA-Ensemble paper,
    appendix U) the burn-in is the first snapshot's cycle and the
    remaining epochs split into `num_snapshots - 1` equal cycles; the
    burn-in is at least `epochs // num_snapshots` and is extended until
    the remaining epochs divide evenly. The appendix says "divisible by
    the desired number of ensemble members"; the authors' code
    (`Cyclic_Cosine_Schedule`) divides by the cycles after the burn-in,
    which its 65-epoch, 20-epoch burn-in, 16-member runs need (45 = 15 x
    3): followed here.

    Raises:
        ValueError: when the epochs cannot be split so (each cycle at
            least one epoch).
    """
    if burn_in_epochs == 0:
        if epochs % num_snapshots:
            raise ValueError(
                f"Without a burn-in, `epochs` ({epochs}) must split evenly into "
                f"`num_snapshots` ({num_snapshots}) cycles; pass a multiple of {num_snapshots} "
                "or a `burn_in_epochs`."
            )
        return 0, epochs // num_snapshots
    if num_snapshots == 1:
        if burn_in_epochs != epochs:
            raise ValueError(
                "With one snapshot the burn-in is the whole training: `burn_in_epochs` must "
                f"equal `epochs` ({epochs}); got {burn_in_epochs}."
            )
        return epochs, 0
    burn_in = max(burn_in_epochs, epochs // num_snapshots)
    while burn_in < epochs and (epochs - burn_in) % (num_snapshots - 1):
        burn_in += 1
    if epochs - burn_in < num_snapshots - 1:
        raise ValueError(
            f"{epochs} epochs leave {epochs - burn_in} after a burn-in of {burn_in}: too few "
            f"for {num_snapshots - 1} cycles of at least one epoch. Train for more epochs or "
            "take fewer snapshots."
        )
    return burn_in, (epochs - burn_in) // (num_snapshots - 1)


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class SnapshotSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Snapshot Ensembles' learning rate: a burn-in, then cosine cycles.

    Huang et al. 2017 ("Snapshot Ensembles: Train 1, get M for free",
    arXiv 1704.00109) train one model with a cyclic cosine learning rate
    and keep the weights at the end of each cycle, where the rate is at
    its lowest, as the members of an ensemble. The LoRA-Ensemble paper
    (appendix U) starts with a burn-in: the rate decays once from its peak
    to zero over `burn_in_epochs` (after `warmup_steps` of linear warm-up),
    the first snapshot is taken, and the remaining epochs split evenly
    into `num_snapshots - 1` cycles (`snapshot_phases`). In each cycle the
    rate is `learning_rate * max(alpha, (1 + cos(pi * t / T)) / 2)` at
    step `t` of the cycle's `T`.

    Compared with the authors' `Cyclic_Cosine_Schedule`: a cycle's phase
    counts from the end of the burn-in (theirs from step 0, so a burn-in
    that is not a whole number of cycles shifts the cosine against the
    snapshots), and the first step after the burn-in starts the cycle at
    the peak (theirs still reads the burn-in's end, a rate of 0).

    Use it as the optimizer's learning rate, and `SnapshotEnsemble` with
    the same schedule as a callback of `fit(epochs=schedule.epochs)`.

    Args:
        learning_rate: float, the peak learning rate.
        steps_per_epoch: int, the optimizer steps (batches) per epoch.
        epochs: int, the whole training's epochs.
        num_snapshots: int, the ensemble's members.
        burn_in_epochs: int, the burn-in's epochs (at least; see
            `snapshot_phases`). `0`: the schedule of Huang et al., equal
            cycles from the start. Defaults to `0`.
        warmup_steps: int, linear warm-up steps at the start of the
            burn-in (needs one). Defaults to `0`.
        alpha: float in `[0, 1]`, the cycles' lowest rate as a fraction of
            `learning_rate` (the authors' `min_lr`, 1e-6). The burn-in
            decays to 0. Defaults to `1e-6`.
        name: optional name.

    Example:

    ```python
    import ensemble_zoo

    schedule = ensemble_zoo.training.SnapshotSchedule(
        1e-3, steps_per_epoch=20, epochs=30, num_snapshots=4, burn_in_epochs=15
    )
    schedule.snapshot_epochs  # (15, 20, 25, 30)
    ```
    """

    def __init__(
        self,
        learning_rate,
        steps_per_epoch,
        epochs,
        num_snapshots,
        burn_in_epochs=0,
        warmup_steps=0,
        alpha=1e-6,
        name=None,
    ):
        super().__init__()
        self.learning_rate = check_real(learning_rate, "learning_rate", low=0.0, low_open=True)
        self.steps_per_epoch = check_positive_int(steps_per_epoch, "steps_per_epoch")
        self.epochs = check_positive_int(epochs, "epochs")
        self.num_snapshots = check_positive_int(num_snapshots, "num_snapshots")
        self.burn_in_epochs = _check_non_negative_int(burn_in_epochs, "burn_in_epochs")
        self.warmup_steps = _check_non_negative_int(warmup_steps, "warmup_steps")
        self.alpha = check_real(alpha, "alpha", low=0.0, high=1.0)
        self.name = name
        burn_in, cycle = snapshot_phases(self.epochs, self.num_snapshots, self.burn_in_epochs)
        if self.warmup_steps and self.warmup_steps >= burn_in * self.steps_per_epoch:
            raise ValueError(
                f"`warmup_steps` ({self.warmup_steps}) must end within the burn-in "
                f"({burn_in * self.steps_per_epoch} steps)."
            )
        self._burn_in_steps = burn_in * self.steps_per_epoch
        self._cycle_steps = cycle * self.steps_per_epoch
        #: The epochs (counted from 1) after which `SnapshotEnsemble`
        #: takes a snapshot: the end of the burn-in and of every cycle.
        first = burn_in if burn_in else cycle
        self.snapshot_epochs = tuple(range(first, self.epochs + 1, cycle or self.epochs))

    def __call__(self, step):
        step = ops.cast(step, "float32")
        lr = self.learning_rate
        cycle = max(self._cycle_steps, 1)
        within = ops.mod(step - self._burn_in_steps, cycle)
        rate = lr * ops.maximum(self.alpha, 0.5 * (1.0 + ops.cos(math.pi * within / cycle)))
        if self._burn_in_steps:
            warmup = self.warmup_steps
            progress = (step - warmup) / max(self._burn_in_steps - warmup, 1)
            burn_in = lr * ops.maximum(0.0, 0.5 * (1.0 + ops.cos(math.pi * progress)))
            if warmup:
                burn_in = ops.where(step < warmup, lr * step / warmup, burn_in)
            rate = ops.where(step < self._burn_in_steps, burn_in, rate)
        return rate

    def get_config(self):
        return {
            "learning_rate": self.learning_rate,
            "steps_per_epoch": self.steps_per_epoch,
            "epochs": self.epochs,
            "num_snapshots": self.num_snapshots,
            "burn_in_epochs": self.burn_in_epochs,
            "warmup_steps": self.warmup_steps,
            "alpha": self.alpha,
            "name": self.name,
        }

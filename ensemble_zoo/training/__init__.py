"""Training procedures that yield ensembles: Snapshot Ensembles."""

from ensemble_zoo.training.snapshot_ensemble import SnapshotEnsemble
from ensemble_zoo.training.snapshot_schedule import SnapshotSchedule
from ensemble_zoo.training.snapshot_schedule import snapshot_phases

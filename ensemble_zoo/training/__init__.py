"""Training procedures that yield ensembles: Snapshot Ensembles, and the
posterior samples of a LoRA fine-tune (Laplace-LoRA, BLoB) as members."""

from ensemble_zoo.training.blob_lora import blob_samples
from ensemble_zoo.training.kfac import kfac_factors
from ensemble_zoo.training.laplace_lora import laplace_lora
from ensemble_zoo.training.snapshot_ensemble import SnapshotEnsemble
from ensemble_zoo.training.snapshot_schedule import SnapshotSchedule
from ensemble_zoo.training.snapshot_schedule import snapshot_phases

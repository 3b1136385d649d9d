"""Shared ensemble operations (`keras.ops` only, every backend)."""

from ensemble_zoo.ops.member_tiling import fold_members
from ensemble_zoo.ops.member_tiling import tile_members
from ensemble_zoo.ops.member_tiling import untile_members
from ensemble_zoo.ops.token_uncertainty import token_uncertainty
from ensemble_zoo.ops.uncertainty import entropy
from ensemble_zoo.ops.uncertainty import entropy_from_logits
from ensemble_zoo.ops.uncertainty import mutual_information
from ensemble_zoo.ops.uncertainty import predictive_log_probabilities
from ensemble_zoo.ops.uncertainty import predictive_probabilities
from ensemble_zoo.ops.uncertainty import uncertainty_decomposition

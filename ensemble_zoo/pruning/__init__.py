"""Attention-head pruning for Hydra Ensembles (the Hydra paper, "Ensembling
Pruned Attention Heads for Uncertainty-Aware Efficient Transformers"):
Taylor importance with sequential prune-recompute, greedy circuit search,
and member masks."""

from ensemble_zoo.pruning.circuit import circuit_head_ranking
from ensemble_zoo.pruning.circuit import head_ablation_scorer
from ensemble_zoo.pruning.member_masks import masks_from_rankings
from ensemble_zoo.pruning.member_masks import sample_member_masks
from ensemble_zoo.pruning.taylor import taylor_head_importance
from ensemble_zoo.pruning.taylor import taylor_member_masks

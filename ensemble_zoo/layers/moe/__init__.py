"""Sparse mixture-of-experts layers: V-MoE and its E³ ensemble (paper 004)."""

from ensemble_zoo.layers.moe.sparse_moe import SparseMoE
from ensemble_zoo.layers.moe.top_k_router import TopKRouter

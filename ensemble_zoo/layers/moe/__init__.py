"""Sparse mixture-of-experts layers: V-MoE and its E³ ensemble (the E³
paper, "Sparse MoEs meet Efficient Ensembles"), with the top-K, Experts
Choice and Soft MoE routers of vmoe."""

from ensemble_zoo.layers.moe.experts_choice_router import ExpertsChoiceRouter
from ensemble_zoo.layers.moe.soft_router import SoftRouter
from ensemble_zoo.layers.moe.sparse_moe import SparseMoE
from ensemble_zoo.layers.moe.top_k_router import TopKRouter

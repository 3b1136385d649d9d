"""Member head masks from head rankings (the Hydra paper, "Ensembling Pruned
Attention Heads for Uncertainty-Aware Efficient Transformers", §4.3 and
App. B.5)."""

import numpy as np

from ensemble_zoo.pruning.circuit import head_counts


def _check_ranking(ranking, num_layers, num_heads):
    counts = head_counts(num_layers, num_heads)
    ranking = [tuple(int(i) for i in pair) for pair in ranking]
    for layer, head in ranking:
        if not (0 <= layer < num_layers and 0 <= head < counts[layer]):
            raise ValueError(
                f"Ranking entry {(layer, head)} is outside ({num_layers} "
                f"layers, {num_heads} heads)."
            )
    if len(set(ranking)) != len(ranking):
        raise ValueError("The ranking lists a head twice.")
    return ranking


def masks_from_rankings(rankings, num_layers, num_heads, num_prune):
    """One member per ranking, pruning its first `num_prune` heads.

    The main-text Hydra (Circ) ensemble: one circuit per criterion
    (CircAcc, CircOOD, CircAvg), each a member.

    Args:
        rankings: one `circuit_head_ranking` result per member.
        num_layers: int.
        num_heads: int, or one int per layer (`circuit_head_ranking`).
        num_prune: int, the heads each member prunes.

    Returns:
        bool array `(len(rankings), num_layers, num_heads)`, True = kept;
        with layers of different head counts, nested lists
        `[members][layers][heads]` (what `HydraClassifier` takes).
    """
    counts = head_counts(num_layers, num_heads)
    masks = [[np.ones(count, bool) for count in counts] for _ in rankings]
    for m, ranking in enumerate(rankings):
        ranking = _check_ranking(ranking, num_layers, num_heads)
        if len(ranking) < num_prune:
            raise ValueError(f"Ranking {m} has {len(ranking)} heads; cannot prune {num_prune}.")
        for layer, head in ranking[:num_prune]:
            masks[m][layer][head] = False
    if len(set(counts)) == 1:
        return np.array(masks, bool).reshape(len(rankings), num_layers, counts[0])
    return [[layer.tolist() for layer in member] for member in masks]


def sample_member_masks(ranking, num_layers, num_heads, num_prune, pool_size, num_members, seed=0):
    """Members from one ranking with different pruning seeds (App. B.5).

    Member `m` prunes `num_prune` heads drawn without replacement from
    the `pool_size` least useful heads of `ranking`, with seed `seed + m`.
    The paper's ViT-B setting is 48 of the bottom 100; the pruning seed is
    the diversity source that matters (its Tables 8-9).

    Returns:
        bool array `(num_members, num_layers, num_heads)`, True = kept.
    """
    if not isinstance(num_heads, (int, np.integer)) or isinstance(num_heads, bool):
        raise ValueError(
            "`sample_member_masks` takes one head count for every layer (an int); got "
            f"{num_heads!r}. For layers of different head counts use `masks_from_rankings`."
        )
    ranking = _check_ranking(ranking, num_layers, num_heads)
    if not 0 < num_prune <= pool_size <= len(ranking):
        raise ValueError(
            "Need 0 < num_prune <= pool_size <= len(ranking); got "
            f"num_prune={num_prune}, pool_size={pool_size}, "
            f"len(ranking)={len(ranking)}."
        )
    masks = np.ones((num_members, num_layers, num_heads), bool)
    for m in range(num_members):
        picks = np.random.default_rng(seed + m).choice(pool_size, num_prune, replace=False)
        for index in picks:
            masks[m][ranking[index]] = False
    return masks

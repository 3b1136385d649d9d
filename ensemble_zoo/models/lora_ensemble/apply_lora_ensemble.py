import keras

from ensemble_zoo.layers.lora_ensemble_adapter import LoRAEnsembleAdapter
from ensemble_zoo.utils.naming import path_scope
from ensemble_zoo.utils.sublayers import freeze_weights
from ensemble_zoo.utils.sublayers import replace_sublayer
from ensemble_zoo.utils.validation import check_positive_int

#: `keras.layers.MultiHeadAttention` projection names and the attributes
#: that hold them.
ATTENTION_PROJECTIONS = {
    "query": "_query_dense",
    "key": "_key_dense",
    "value": "_value_dense",
    "attention_output": "_output_dense",
}
DEFAULT_TARGETS = tuple(ATTENTION_PROJECTIONS)


def attention_layers(backbone):
    """The `keras.layers.MultiHeadAttention` layers of `backbone`, in order."""
    return [
        layer
        for layer in backbone._flatten_layers(include_self=False)
        if isinstance(layer, keras.layers.MultiHeadAttention)
    ]


def lora_ensemble_adapters(model):
    """The `LoRAEnsembleAdapter`s inside `model`, in creation order.

    Attention layer by attention layer (`attention_layers` order), and
    within one in the order query, key, value, attention output.
    """
    return [
        getattr(attention, attribute)
        for attention in attention_layers(model)
        for attribute in ATTENTION_PROJECTIONS.values()
        if isinstance(getattr(attention, attribute, None), LoRAEnsembleAdapter)
    ]


def check_targets(targets, allowed=tuple(ATTENTION_PROJECTIONS)):
    """`targets` as a tuple of distinct names among `allowed`, or a
    `ValueError` that names them."""
    targets = (targets,) if isinstance(targets, str) else tuple(targets)
    unknown = [t for t in targets if t not in allowed]
    if not targets or unknown or len(set(targets)) != len(targets):
        raise ValueError(
            f"`targets` must be distinct names among {list(allowed)}; got {list(targets)}."
        )
    return targets


def apply_lora_ensemble(
    backbone,
    num_members,
    rank,
    targets=DEFAULT_TARGETS,
    lora_alpha=None,
    a_gain=10.0,
    seed=None,
    blob=None,
):
    """Freezes a keras-hub backbone and gives it M LoRA adapters per projection.

    LoRA-Ensemble (the LoRA-Ensemble paper, "LoRA-Ensemble: Efficient
    Uncertainty Modelling for Self-Attention Networks"): every
    `keras.layers.MultiHeadAttention` in the backbone (keras-hub's ViT and
    BERT blocks use it) gets a `LoRAEnsembleAdapter` on each projection in
    `targets`, holding `num_members` independent low-rank updates. Every other
    weight of the backbone is frozen. Afterwards the backbone expects
    member-major batches `(num_members * batch, ...)`
    (`ensemble_zoo.ops.tile_members`); rows of member `m` go through
    `W0 + B_m A_m` in every adapted projection, all members in one pass.

    The backbone is changed in place (as keras-hub's `enable_lora` does),
    and its own `get_config` does not describe the adapters: save it
    through `LoRAEnsembleImageClassifier` / `LoRAEnsembleTextClassifier`,
    whose config re-applies them.

    Args:
        backbone: a built Keras model with `MultiHeadAttention` layers, e.g.
            `keras_hub.models.ViTBackbone` or `BertBackbone`.
        num_members: int, the number of members M.
        rank: int, the adapters' rank r.
        targets: projections to adapt, among `"query"`, `"key"`, `"value"`
            and `"attention_output"`. Defaults to all four (the paper).
        lora_alpha: optional float; updates are scaled by
            `lora_alpha / rank`. `None` (default) means a scale of 1.
        a_gain: float, the Xavier-uniform gain of each `A_m` (paper: 10).
        seed: optional int for reproducible `A` initializations; adapter
            `i` (in `lora_ensemble_adapters` order) uses seeds
            `seed + i * num_members + m`.
        blob: `None` (default), or BLoB's settings (a dict with
            `kl_weight`, optionally `eps` and `prior_std`): each `A_m` is
            then a learned Gaussian (`LoRAEnsembleAdapter`'s `blob`).

    Returns:
        The list of adapters created.

    Example:

    ```python
    import keras_hub
    import ensemble_zoo as ez

    vit = keras_hub.models.ViTBackbone(
        image_shape=(8, 8, 1), patch_size=2, num_layers=2, num_heads=2,
        hidden_dim=16, mlp_dim=32,
    )
    adapters = ez.models.apply_lora_ensemble(vit, num_members=4, rank=2)
    len(adapters)  # 8: query, key, value and output in 2 blocks
    ```
    """
    num_members = check_positive_int(num_members, "num_members")
    rank = check_positive_int(rank, "rank")
    targets = check_targets(targets)
    if not getattr(backbone, "built", False):
        raise ValueError("`backbone` must be built before adapters are applied.")
    if lora_ensemble_adapters(backbone):
        raise ValueError(f"`backbone` '{backbone.name}' already has LoRA-Ensemble adapters.")
    attentions = attention_layers(backbone)
    if not attentions:
        raise ValueError(
            f"`backbone` '{backbone.name}' has no keras.layers.MultiHeadAttention layer to adapt."
        )
    # Freeze every weight; containers stay trainable so that the adapters
    # added below are.
    freeze_weights(backbone)
    sites = [
        (attention, ATTENTION_PROJECTIONS[target]) for attention in attentions for target in targets
    ]
    return adapt_projections(sites, num_members, rank, lora_alpha, a_gain, seed, blob=blob)


def adapt_projections(
    sites, num_members, rank, lora_alpha, a_gain, seed, member_layout="member_major", blob=None
):
    """Replaces each projection `getattr(parent, attribute)` of `sites`
    (`(parent, attribute)` pairs, in order) by a `LoRAEnsembleAdapter` on
    it; adapter `i` seeds its members with `seed + i * num_members + m`.
    `rank` is one int or one per site; `blob` is the adapters' (BLoB's
    settings or `None`). Returns the adapters."""
    ranks = list(rank) if isinstance(rank, (list, tuple)) else [rank] * len(sites)
    adapters = []
    for (parent, attribute), rank in zip(sites, ranks, strict=True):
        base = getattr(parent, attribute)
        # Under the parent layer's name scope, so that variable paths are
        # unique (`.../mha/query_lora_ensemble/lora_a`): the PyTorch
        # backend keys parameters by path.
        with path_scope(parent.path):
            adapter = LoRAEnsembleAdapter(
                base,
                num_members=num_members,
                rank=rank,
                lora_alpha=lora_alpha,
                a_gain=a_gain,
                seed=None if seed is None else seed + len(adapters) * num_members,
                member_layout=member_layout,
                blob=blob,
                dtype=base.dtype_policy,
            )
        replace_sublayer(parent, attribute, adapter)
        adapters.append(adapter)
    return adapters

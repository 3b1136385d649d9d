"""Greedy, gradient-free circuit search over attention heads (the Hydra
paper, "Ensembling Pruned Attention Heads for Uncertainty-Aware Efficient
Transformers", App. D.1.2, Algorithm 1)."""

import numpy as np

from ensemble_zoo import metrics
from ensemble_zoo.evaluation.prediction import predict_member_logits
from ensemble_zoo.metrics.diversity import as_member_probabilities
from ensemble_zoo.utils.progress import progress_bar

CRITERIA = ("accuracy", "ood", "average")


def head_counts(num_layers, num_heads):
    """`num_heads` as a list of each layer's head count (an int is every
    layer's); a `ValueError` unless `num_layers` positive ints."""
    if isinstance(num_heads, (int, np.integer)) and not isinstance(num_heads, bool):
        num_heads = [int(num_heads)] * num_layers
    counts = list(num_heads)
    if len(counts) != num_layers or not all(
        isinstance(c, (int, np.integer)) and not isinstance(c, bool) and c > 0 for c in counts
    ):
        raise ValueError(
            f"`num_heads` must be a positive int or one per layer ({num_layers}); "
            f"got {num_heads!r}."
        )
    return [int(c) for c in counts]


def circuit_head_ranking(score_fn, num_layers, num_heads, budget, progress=False):
    """Greedy backward elimination of heads (Algorithm 1).

    Starting from all heads, each step tries removing every remaining head
    (`score_fn` on the mask without it) and permanently removes the one
    whose removal leaves the highest score. Candidates are tried in
    (layer, head) order and a later candidate must score strictly higher to
    win, so ties go to the first. Costs
    `sum_{t < budget} (total heads - t)` calls of `score_fn`.

    Args:
        score_fn: callable taking a `(num_layers, max heads)` 0/1 float
            mask (1 = head kept; a layer with fewer heads is padded with 0)
            and returning a float, higher = better.
        num_layers: int.
        num_heads: int, or one int per layer where layers differ (a CLIP's
            vision and text encoders, searched jointly as the Hydra paper's
            zero-shot members are).
        budget: int, number of heads to remove.
        progress: bool, show a progress bar over the steps.

    Returns:
        list of `(layer, head)` pairs in removal order (least useful first).

    Example:

    >>> weights = np.array([[3.0, 1.0], [2.0, 4.0]])
    >>> circuit_head_ranking(lambda mask: float((weights * mask).sum()), 2, 2, 3)
    [(0, 1), (1, 0), (0, 0)]
    """
    counts = head_counts(num_layers, num_heads)
    total = sum(counts)
    if isinstance(budget, bool) or not isinstance(budget, int) or not 0 <= budget <= total:
        raise ValueError(
            f"`budget` must be an int in [0, {total}] (heads to remove); got {budget!r}."
        )
    mask = np.zeros((num_layers, max(counts)), np.float32)
    for layer, count in enumerate(counts):
        mask[layer, :count] = 1.0
    order = []
    for _ in progress_bar(
        range(budget), desc="circuit search", enable=progress, unit="search steps"
    ):
        best, best_head = -np.inf, None
        for layer, head in zip(*np.nonzero(mask)):
            mask[layer, head] = 0.0
            score = float(score_fn(mask.copy()))
            mask[layer, head] = 1.0
            if score > best:
                best, best_head = score, (int(layer), int(head))
        mask[best_head] = 0.0
        order.append(best_head)
    return order


def head_ablation_scorer(model, id_data, ood_data=None, criterion="accuracy", batch_size=None):
    """A `score_fn` for `circuit_head_ranking` that ablates heads of a model.

    The mask is written into the head masks of a one-member Hydra model
    with every head: a `HydraImageClassifier` (e.g.
    `HydraImageClassifier.from_keras_hub(vit)`) or a `HydraClassifier` of
    any keras-hub family (`HydraClassifier.from_model(model)`) or of a CLIP
    zero-shot classifier (`HydraCLIPZeroShotClassifier.from_model(model)`,
    whose text heads change the class embeddings); masking a head equals
    zeroing its block of the output projection (the paper's ablation).

    Args:
        model: a one-member `HydraImageClassifier`, `HydraClassifier` or
            `HydraCLIPZeroShotClassifier` keeping all heads (the mask's
            rows are its attention layers, `head_sites` order: a CLIP's
            vision layers, then its text layers).
        id_data: labelled in-distribution validation data `(x, y)` (`x`
            images, or the dict of token tensors a text model takes).
        ood_data: OOD validation inputs, needed for `"ood"` and `"average"`.
        criterion: `"accuracy"` (S_acc), `"ood"` (AUROC of
            `1 - max softmax probability`, OOD positive: S_ood) or
            `"average"` (their mean: S_avg).
        batch_size: optional int. Defaults to each set's size, at most
            1024: one batch per set and no padding (the compiled step sees
            one static shape per set; a validation set of 288 padded to
            batches of 256 computed 512 rows per score).
    """
    if criterion not in CRITERIA:
        raise ValueError(f"`criterion` must be one of {CRITERIA}; got {criterion!r}.")
    if criterion != "accuracy" and ood_data is None:
        raise ValueError(f"criterion={criterion!r} needs `ood_data`.")
    if model.num_members != 1:
        raise ValueError(f"head_ablation_scorer needs a one-member model; got {model.num_members}.")
    masks = _head_mask_variables(model)
    # A zero-shot CLIP's members hold the class embeddings of their text
    # heads: recomputed after the masks change.
    refresh = getattr(model, "update_class_embeddings", None)
    x_id, y_id = id_data

    def msp(x):
        if isinstance(x, dict):  # text: one batch of the model's own `predict`
            size = batch_size or len(next(iter(x.values())))
            logits = model.predict(x, batch_size=size, verbose=0)
        else:
            size = batch_size or max(1, min(len(x), 1024))
            logits, _ = predict_member_logits(model, x, size, "data", progress=False)
        return as_member_probabilities(logits, from_logits=True)[:, 0]

    def score_fn(mask):
        mask = np.asarray(mask, np.float32)
        for (num_heads, variable), row in zip(masks, mask, strict=True):
            if num_heads > row.shape[0] or row[num_heads:].any():
                raise ValueError(
                    "The model must keep every head (one slot per head) for "
                    "ablation; build it with from_keras_hub(vit) or from_model(model)."
                )
            variable.assign(row[None, :num_heads])
        if refresh is not None:
            refresh()
        probs = msp(x_id)
        accuracy = metrics.accuracy(probs, y_id)
        if criterion == "accuracy":
            return accuracy
        ood_probs = msp(ood_data)
        auroc = metrics.ood_auroc(1.0 - probs.max(1), 1.0 - ood_probs.max(1))
        return auroc if criterion == "ood" else 0.5 * (accuracy + auroc)

    return score_fn


def _head_mask_variables(model):
    """`[(num_heads, mask variable)]` of every attention layer of a
    one-member Hydra model: a `HydraClassifier`'s `HeadMask`s or a
    `HydraImageClassifier`'s attention head masks, each `(1, heads)`."""
    layers = getattr(model, "head_mask_layers", None)
    if layers is not None:
        return [(layer.num_heads, layer.masks) for layer in layers]
    return [(b.attention.num_heads, b.attention.head_mask) for b in model.backbone.encoder_blocks]

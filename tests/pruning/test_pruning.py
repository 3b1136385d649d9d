import keras
import numpy as np
import pytest
from test_hydra_image_classifier import images
from test_hydra_image_classifier import tiny_vit
from zoo_testing import to_np

from ensemble_zoo import pruning
from ensemble_zoo.models import HydraImageClassifier


@pytest.fixture(scope="module")
def hydra():
    return HydraImageClassifier.from_keras_hub(tiny_vit(classes=3))


def calibration(n=24):
    return images(n, seed=3), np.arange(n) % 3


def test_taylor_scores_shape_batch_invariance_and_zero_head(hydra):
    data = calibration()
    scores = pruning.taylor_head_importance(hydra, data, batch_size=24)
    assert scores.shape == (1, 2, 4) and (scores > 0).all()
    split = pruning.taylor_head_importance(hydra, data, batch_size=5)
    np.testing.assert_allclose(split, scores, rtol=1e-4)
    # A head whose query/key/value kernels are zero scores exactly 0.
    attention = hydra.backbone.encoder_blocks[1].attention
    saved = [to_np(getattr(attention, f"{p}_kernel")) for p in ("query", "key", "value")]
    for p, value in zip(("query", "key", "value"), saved):
        zeroed = value.copy()
        zeroed[:, :, 2] = 0.0
        getattr(attention, f"{p}_kernel").assign(zeroed)
    try:
        scores = pruning.taylor_head_importance(hydra, data)
        assert scores[0, 1, 2] == 0.0 and (np.delete(scores[0, 1], 2) > 0).all()
        masks = pruning.taylor_member_masks(hydra, data, heads_to_prune=1)
        assert not masks[0, 1, 2] and masks[0, 1].sum() == 3
    finally:
        for p, value in zip(("query", "key", "value"), saved):
            getattr(attention, f"{p}_kernel").assign(value)


@pytest.mark.slow
def test_taylor_score_equals_formula_on_a_numeric_gradient(hydra):
    """|w * dL/dw| for one weight, with dL/dw from finite differences."""
    data = calibration(12)
    scores = pruning.taylor_head_importance(hydra, data)
    attention = hydra.backbone.encoder_blocks[0].attention
    kernels = {p: to_np(getattr(attention, f"{p}_kernel")) for p in ("query", "key", "value")}

    # 384 forward passes: a compiled one under JAX and TensorFlow (10x
    # faster than eager there), an eager call under PyTorch.
    forward = hydra if keras.config.backend() == "torch" else hydra.predict_on_batch

    def loss():
        logits = np.asarray(to_np(forward(data[0])), np.float64)[:, 0]
        z = logits - logits.max(1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(1, keepdims=True))
        return -logp[np.arange(12), data[1]].mean()

    # Head 0 of layer 0: mean over all its q/k/v entries, by central differences.
    eps, per_projection = 1e-2, []
    for p, kernel in kernels.items():
        values = []
        for d in range(kernel.shape[1]):
            for k in range(kernel.shape[3]):
                for sign in (1, -1):
                    shifted = kernel.copy()
                    shifted[0, d, 0, k] += sign * eps
                    getattr(attention, f"{p}_kernel").assign(shifted)
                    values.append(loss())
                grad = (values[-2] - values[-1]) / (2 * eps)
                values = values[:-2]
                values.append(abs(kernel[0, d, 0, k] * grad))
        getattr(attention, f"{p}_kernel").assign(kernel)
        per_projection.append(np.mean(values))
    assert scores[0, 0, 0] == pytest.approx(np.mean(per_projection), rel=0.05)


def test_taylor_members_prune_sequentially_and_differ_by_subset(hydra):
    data = calibration(60)
    masks = pruning.taylor_member_masks(
        hydra, data, heads_to_prune=[1, 2], num_members=3, calibration_size=20, seed=0
    )
    assert masks.shape == (3, 2, 4)
    np.testing.assert_array_equal(masks.sum(2), [[3, 2]] * 3)
    again = pruning.taylor_member_masks(
        hydra, data, heads_to_prune=[1, 2], num_members=3, calibration_size=20, seed=0
    )
    np.testing.assert_array_equal(masks, again)  # reproducible
    # The model's own masks are restored.
    assert to_np(hydra.backbone.encoder_blocks[0].attention.head_mask).min() == 1.0
    with pytest.raises(ValueError, match="heads_to_prune"):
        pruning.taylor_member_masks(hydra, data, heads_to_prune=[1])


def test_circuit_ranking_on_an_additive_score():
    rng = np.random.default_rng(0)
    weights = rng.permutation(12).reshape(3, 4).astype(float)
    order = pruning.circuit_head_ranking(lambda m: float((weights * m).sum()), 3, 4, 12)
    expected = [
        tuple(int(i) for i in np.unravel_index(k, (3, 4))) for k in np.argsort(weights, axis=None)
    ]
    assert order == expected
    # Ties break on the first candidate in (layer, head) order.
    assert pruning.circuit_head_ranking(lambda m: 0.0, 2, 2, 2) == [(0, 0), (0, 1)]
    with pytest.raises(ValueError, match="budget"):
        pruning.circuit_head_ranking(lambda m: 0.0, 2, 2, 5)


def test_head_ablation_scorer_matches_the_masked_model(hydra):
    x, y = calibration(30)
    x_ood = images(20, seed=9) * 3.0
    score = pruning.head_ablation_scorer(hydra, (x, y), x_ood, criterion="average")
    mask = np.ones((2, 4), np.float32)
    mask[0, 1] = 0.0
    value = score(mask)
    # Reference: the keras-hub route, masking by a fresh model from masks.
    pruned = HydraImageClassifier.from_keras_hub(tiny_vit(classes=3), mask.astype(bool))
    p = np.exp(pruned.predict(x, verbose=0)[:, 0])
    p /= p.sum(1, keepdims=True)
    q = np.exp(pruned.predict(x_ood, verbose=0)[:, 0])
    q /= q.sum(1, keepdims=True)
    from sklearn.metrics import roc_auc_score

    accuracy = np.mean(p.argmax(1) == y)
    auroc = roc_auc_score(np.r_[np.zeros(30), np.ones(20)], np.r_[1 - p.max(1), 1 - q.max(1)])
    assert value == pytest.approx((accuracy + auroc) / 2, abs=1e-6)
    with pytest.raises(ValueError, match="ood_data"):
        pruning.head_ablation_scorer(hydra, (x, y), criterion="ood")


def test_member_masks_from_rankings():
    ranking = [(0, 1), (1, 3), (1, 0), (0, 2), (1, 1)]
    masks = pruning.masks_from_rankings([ranking, ranking[::-1]], 2, 4, num_prune=2)
    assert masks.shape == (2, 2, 4)
    assert not masks[0, 0, 1] and not masks[0, 1, 3] and masks.sum() == 12
    sampled = pruning.sample_member_masks(
        ranking, 2, 4, num_prune=2, pool_size=4, num_members=3, seed=0
    )
    assert sampled.shape == (3, 2, 4) and (sampled.reshape(3, -1).sum(1) == 6).all()
    pruned = {(l, h) for m in sampled for l, h in zip(*np.nonzero(~m))}
    assert pruned <= set(ranking[:4])  # only from the pool
    assert len({m.tobytes() for m in sampled}) > 1  # seeds differ
    with pytest.raises(ValueError, match="twice"):
        pruning.masks_from_rankings([[(0, 1), (0, 1)]], 2, 4, 1)


def test_head_ablation_scorer_takes_a_hydra_classifier_of_any_family():
    """On a text family (dict inputs): the score is that of the keras-hub
    model whose output projection reads none of the ablated heads."""
    from fixtures import tiny_text_classifiers
    from sklearn.metrics import roc_auc_score

    from ensemble_zoo.models import HydraClassifier

    model = tiny_text_classifiers.build_text_classifier("roberta")
    x = tiny_text_classifiers.text_inputs(model, batch=12, seed=1)
    x_ood = tiny_text_classifiers.text_inputs(model, batch=8, seed=2)
    y = np.arange(12) % 3
    score = pruning.head_ablation_scorer(
        HydraClassifier.from_model(model), (x, y), x_ood, "average"
    )
    value = score([[1.0, 0.0]])
    attention = model.backbone.get_layer("transformer_layer_0")._self_attention_layer
    kernel = to_np(attention._output_dense.kernel)  # (heads, head_dim, hidden)
    kernel[1] = 0.0
    attention._output_dense.kernel.assign(kernel)
    p, q = (keras.ops.convert_to_numpy(keras.ops.softmax(model(v))) for v in (x, x_ood))
    accuracy = np.mean(p.argmax(1) == y)
    auroc = roc_auc_score(np.r_[np.zeros(12), np.ones(8)], np.r_[1 - p.max(1), 1 - q.max(1)])
    assert value == pytest.approx((accuracy + auroc) / 2, abs=1e-6)

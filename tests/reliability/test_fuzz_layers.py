"""Fuzz sweep of the layers, Keras metrics and losses, calibration and model
constructors: a bad argument fails when the object is made (not at its
first call, deep inside an einsum), and a bad input at call time is a
`ValueError`/`TypeError` naming the argument, also when a built layer
is called with other features or rows that do not split into members.
"""

import keras
import numpy as np
import pytest

import ensemble_zoo as ez

L = ez.layers
COUNTS = {"zero": 0, "negative": -1, "float": 2.5, "string": "2", "bool": True, "none": None}
RATES = {"negative": -0.1, "one": 1.0, "string": "0.1", "nan": float("nan")}
POSITIVE_REALS = {
    "zero": 0.0,
    "negative": -1.0,
    "string": "1",
    "nan": float("nan"),
    "inf": float("inf"),
}
FLAGS = {"string": "yes", "int": 2}


def dense():
    return keras.layers.Dense(4)


def vit_backbone():
    return ez.models.HydraBackbone(
        image_shape=(8, 8, 1),
        patch_size=4,
        num_layers=1,
        num_heads=2,
        hidden_dim=8,
        mlp_dim=16,
        num_members=2,
    )


def _constructor_cases():
    """(id, factory, kwargs, corrupted argument)."""
    table = []

    def add(name, factory, good, argument, bad_values):
        for case, value in bad_values.items():
            table.append(
                (f"{name}-{argument}-{case}", factory, dict(good, **{argument: value}), argument)
            )

    add("GroupedDense", L.GroupedDense, dict(units=4, num_members=2), "units", COUNTS)
    add("GroupedDense", L.GroupedDense, dict(units=4, num_members=2), "num_members", COUNTS)
    add("GroupedDense", L.GroupedDense, dict(units=4, num_members=2), "use_bias", FLAGS)
    be = dict(units=4, num_members=2)
    for argument in ("units", "num_members", "num_input_axes"):
        add("BatchEnsembleDense", L.BatchEnsembleDense, be, argument, COUNTS)
    add(
        "BatchEnsembleDense",
        L.BatchEnsembleDense,
        be,
        "fast_weight_initializer",
        {"unknown": "uniform", "none": None},
    )
    add(
        "BatchEnsembleDense",
        L.BatchEnsembleDense,
        be,
        "fast_weight_stddev",
        {"negative": -1.0, "string": "1", "nan": float("nan")},
    )
    add("BatchEnsembleDense", L.BatchEnsembleDense, be, "seed", {"float": 1.5, "string": "1"})
    add(
        "GroupedLayerNormalization",
        L.GroupedLayerNormalization,
        dict(num_members=2),
        "num_members",
        COUNTS,
    )
    add(
        "GroupedLayerNormalization",
        L.GroupedLayerNormalization,
        dict(num_members=2),
        "epsilon",
        POSITIVE_REALS,
    )
    for flag in ("center", "scale"):
        add(
            "GroupedLayerNormalization",
            L.GroupedLayerNormalization,
            dict(num_members=2),
            flag,
            FLAGS,
        )
    hydra = dict(num_members=2, num_heads=4, key_dim=4)
    for argument in ("num_members", "num_heads", "key_dim"):
        add("HydraAttention", L.HydraAttention, hydra, argument, COUNTS)
    add(
        "HydraAttention",
        L.HydraAttention,
        hydra,
        "member_num_heads",
        {"not_dividing": 3, "zero": 0, "float": 1.5},
    )
    add("HydraAttention", L.HydraAttention, hydra, "dropout", RATES)
    add(
        "HydraAttention",
        L.HydraAttention,
        hydra,
        "attention_implementation",
        {"unknown": "flash", "none": None},
    )
    for layer_name in ("MemberBroadcast", "TileMembers", "UntileMembers"):
        add(layer_name, getattr(L, layer_name), dict(num_members=2), "num_members", COUNTS)
    for layer_name in ("LoRAEnsembleAdapter", "SubnetworkMaskedDense"):
        factory = getattr(L, layer_name)
        good = dict(base_layer=dense(), num_members=2)
        if layer_name == "LoRAEnsembleAdapter":
            good["rank"] = 2
            add(layer_name, factory, good, "rank", COUNTS)
            add(layer_name, factory, good, "lora_alpha", POSITIVE_REALS)
            add(layer_name, factory, good, "a_gain", POSITIVE_REALS)
        else:
            add(layer_name, factory, good, "logit_std", POSITIVE_REALS)
            add(layer_name, factory, good, "logit_mean", {"string": "2", "nan": float("nan")})
            add(layer_name, factory, good, "mask_rows", FLAGS)
        add(
            layer_name,
            factory,
            good,
            "base_layer",
            {"not_dense": keras.layers.ReLU(), "none": None, "string": "dense"},
        )
        add(layer_name, factory, good, "num_members", COUNTS)
    add(
        "LossPredictionHead",
        L.LossPredictionHead,
        {},
        "hidden_units",
        {"zero": (0,), "string": "512", "float": (2.5,), "none": None},
    )
    add(
        "LossPredictionHead",
        L.LossPredictionHead,
        {},
        "negative_slope",
        {"negative": -0.1, "string": "0.1", "nan": float("nan")},
    )
    add("LossPredictionHead", L.LossPredictionHead, {}, "epsilon", POSITIVE_REALS)
    add("LossPredictionHead", L.LossPredictionHead, {}, "stop_gradient", FLAGS)
    moe = dict(num_experts=4, mlp_dim=8)
    add("SparseMoE", L.SparseMoE, moe, "num_experts", COUNTS)
    add("SparseMoE", L.SparseMoE, moe, "mlp_dim", COUNTS)
    add("SparseMoE", L.SparseMoE, moe, "top_k", dict(COUNTS, above_experts=5))
    add("SparseMoE", L.SparseMoE, moe, "num_members", dict(COUNTS, not_dividing=3))
    add("SparseMoE", L.SparseMoE, moe, "capacity_factor", POSITIVE_REALS)
    add("SparseMoE", L.SparseMoE, moe, "dispatcher", {"unknown": "scatter", "none": None})
    add("SparseMoE", L.SparseMoE, moe, "noise_std", {"negative": -1.0, "string": "1"})
    add("SparseMoE", L.SparseMoE, moe, "dropout_rate", RATES)
    add("SparseMoE", L.SparseMoE, moe, "group_size", {"zero": 0, "float": 2.5, "string": "8"})
    add("TopKRouter", L.TopKRouter, dict(num_experts=4), "top_k", dict(COUNTS, above_experts=5))
    add(
        "TopKRouter",
        L.TopKRouter,
        dict(num_experts=4),
        "importance_loss_weight",
        {"negative": -1.0, "string": "1", "nan": float("nan")},
    )

    met = ez.metrics
    add("ExpectedCalibrationError", met.ExpectedCalibrationError, {}, "num_bins", COUNTS)
    for metric_name in ("ExpectedCalibrationError", "BrierScore", "NegativeLogLikelihood"):
        add(metric_name, getattr(met, metric_name), {}, "from_logits", FLAGS)
    add(
        "EnsembleSparseCategoricalCrossentropy",
        ez.losses.EnsembleSparseCategoricalCrossentropy,
        {},
        "from_logits",
        FLAGS,
    )
    add(
        "LossRankingLoss",
        ez.losses.LossRankingLoss,
        {},
        "margin",
        {"negative": -0.1, "string": "0.1", "nan": float("nan")},
    )
    add("TemperatureScaling", ez.calibration.TemperatureScaling, {}, "temperature", POSITIVE_REALS)
    add(
        "TemperatureScaling",
        ez.calibration.TemperatureScaling,
        {},
        "bounds",
        {"reversed": (2.0, 1.0), "zero": (0.0, 1.0), "string": "0.1,2", "three": (0.1, 1.0, 2.0)},
    )

    backbone = dict(
        image_shape=(8, 8, 1),
        patch_size=4,
        num_layers=1,
        num_heads=2,
        hidden_dim=8,
        mlp_dim=16,
        num_members=2,
    )
    hb = ez.models.HydraBackbone
    add(
        "HydraBackbone",
        hb,
        backbone,
        "image_shape",
        {"rank_2": (8, 8), "not_divisible": (9, 9, 1), "zero": (8, 8, 0), "string": "8x8"},
    )
    for argument in (
        "patch_size",
        "num_layers",
        "num_heads",
        "hidden_dim",
        "mlp_dim",
        "num_members",
    ):
        add("HydraBackbone", hb, backbone, argument, COUNTS)
    add("HydraBackbone", hb, backbone, "hidden_dim", {"not_dividing_heads": 9})
    add("HydraBackbone", hb, backbone, "mlp", {"unknown": "mean"})
    add("HydraBackbone", hb, backbone, "dropout_rate", RATES)
    add(
        "HydraImageClassifier",
        ez.models.HydraImageClassifier,
        dict(backbone=vit_backbone(), num_classes=3),
        "num_classes",
        COUNTS,
    )
    add(
        "HydraImageClassifier",
        ez.models.HydraImageClassifier,
        dict(backbone=vit_backbone(), num_classes=3),
        "pooling",
        {"unknown": "max", "none": None},
    )
    add(
        "HydraImageClassifier",
        ez.models.HydraImageClassifier,
        dict(backbone=vit_backbone(), num_classes=3),
        "backbone",
        {"none": None, "dense": dense()},
    )
    return table


CONSTRUCTOR_CASES = _constructor_cases()


@pytest.mark.parametrize(
    "factory, kwargs, argument",
    [c[1:] for c in CONSTRUCTOR_CASES],
    ids=[c[0] for c in CONSTRUCTOR_CASES],
)
def test_bad_constructor_argument_is_a_clear_error(factory, kwargs, argument):
    with pytest.raises((ValueError, TypeError)) as info:
        factory(**kwargs)
    assert f"`{argument}`" in str(info.value), (
        f"The message does not name `{argument}`: {type(info.value).__name__}: {info.value}"
    )


def _f32(*shape):
    return np.random.default_rng(0).normal(size=shape).astype("float32")


MEMBER_LOGITS = _f32(6, 2, 3)
LABELS = np.array([0, 1, 2, 0, 1, 2])


def _after_build(layer_factory, good, bad):
    """Calls a layer on `good` (building it), then on `bad`."""

    def call():
        layer = layer_factory()
        layer(good)
        layer(bad)

    return call


def _built_dense(features=6):
    layer = keras.layers.Dense(3)
    layer.build((None, features))
    return layer


CALL_CASES = [
    # (id, callable, corrupted argument)
    (
        "MasksemblesMask-features",
        _after_build(lambda: L.MasksemblesMask(2), _f32(4, 6), _f32(4, 5)),
        "inputs",
    ),
    ("MasksemblesMask-rows", lambda: L.MasksemblesMask(2)(_f32(3, 6)), "inputs"),
    (
        "SubnetworkMaskedDense-features",
        lambda: L.SubnetworkMaskedDense(_built_dense(), 2)(_f32(4, 5)),
        "inputs",
    ),
    (
        "SubnetworkMaskedDense-rows",
        lambda: L.SubnetworkMaskedDense(_built_dense(), 2)(_f32(3, 6)),
        "inputs",
    ),
    (
        "GroupedLayerNormalization-features",
        _after_build(lambda: L.GroupedLayerNormalization(2), _f32(3, 2, 6), _f32(3, 2, 5)),
        "inputs",
    ),
    (
        "LoRAEnsembleAdapter-features",
        lambda: L.LoRAEnsembleAdapter(_built_dense(), 2, 1)(_f32(4, 5)),
        "inputs",
    ),
    (
        "EnsembleAccuracy-one_hot",
        lambda: ez.metrics.EnsembleAccuracy().update_state(np.eye(3)[LABELS], MEMBER_LOGITS),
        "y_true",
    ),
    ("GroupedDense-members", lambda: L.GroupedDense(4, 2)(_f32(3, 3, 5)), "inputs"),
    ("GroupedDense-rank_2", lambda: L.GroupedDense(4, 2)(_f32(3, 5)), "inputs"),
    (
        "GroupedLayerNormalization-members",
        lambda: L.GroupedLayerNormalization(2)(_f32(3, 3, 5)),
        "inputs",
    ),
    ("HydraAttention-members", lambda: L.HydraAttention(2, 4, 4)(_f32(1, 3, 5, 16)), "inputs"),
    ("HydraAttention-rank_3", lambda: L.HydraAttention(2, 4, 4)(_f32(1, 5, 16)), "inputs"),
    (
        "HydraAttention-integers",
        lambda: L.HydraAttention(2, 4, 4)(np.ones((1, 2, 5, 16), "int32")),
        "inputs",
    ),
    (
        "HydraAttention-mask_tokens",
        lambda: L.HydraAttention(2, 4, 4)(_f32(1, 2, 5, 16), attention_mask=np.ones((1, 4), bool)),
        "attention_mask",
    ),
    (
        "HydraAttention-mask_batch",
        lambda: L.HydraAttention(2, 4, 4)(
            _f32(1, 2, 5, 16), attention_mask=np.ones((3, 5, 5), bool)
        ),
        "attention_mask",
    ),
    (
        "HydraAttention-mask_rank_4",
        lambda: L.HydraAttention(2, 4, 4)(
            _f32(1, 2, 5, 16), attention_mask=np.ones((1, 1, 5, 5), bool)
        ),
        "attention_mask",
    ),
    ("BatchEnsembleDense-rows", lambda: L.BatchEnsembleDense(4, 2)(_f32(5, 3)), "inputs"),
    (
        "BatchEnsembleDense-integers",
        lambda: L.BatchEnsembleDense(4, 2)(np.ones((4, 3), "int32")),
        "inputs",
    ),
    ("UntileMembers-not_divisible", lambda: L.UntileMembers(2)(_f32(5, 4)), "x"),
    ("TileMembers-scalar", lambda: L.TileMembers(2)(np.float32(1.0)), "x"),
    ("LossPredictionHead-rank_1", lambda: L.LossPredictionHead((4,))(_f32(5)), "inputs"),
    ("SparseMoE-rank_1", lambda: L.SparseMoE(4, 8)(_f32(8)), "inputs"),
    ("TopKRouter-rank_1", lambda: L.TopKRouter(4)(_f32(8)), "inputs"),
    ("GroupedDense-integers", lambda: L.GroupedDense(4, 2)(np.ones((3, 2, 5), "int32")), "inputs"),
    (
        "NegativeLogLikelihood-y_pred_rank_4",
        lambda: ez.metrics.NegativeLogLikelihood().update_state(LABELS, _f32(6, 2, 3, 1)),
        "y_pred",
    ),
    (
        "NegativeLogLikelihood-y_true_too_long",
        lambda: ez.metrics.NegativeLogLikelihood().update_state(np.arange(7) % 3, MEMBER_LOGITS),
        "y_true",
    ),
    (
        "ExpectedCalibrationError-y_true_too_long",
        lambda: ez.metrics.ExpectedCalibrationError().update_state(np.arange(7) % 3, MEMBER_LOGITS),
        "y_true",
    ),
    (
        "EnsembleAccuracy-y_true_too_long",
        lambda: ez.metrics.EnsembleAccuracy().update_state(np.arange(7) % 3, MEMBER_LOGITS),
        "y_true",
    ),
    (
        "EnsembleSCCE-y_true_too_long",
        lambda: ez.losses.EnsembleSparseCategoricalCrossentropy()(np.arange(7) % 3, MEMBER_LOGITS),
        "y_true",
    ),
    (
        "EnsembleSCCE-y_pred_rank_2",
        lambda: ez.losses.EnsembleSparseCategoricalCrossentropy()(LABELS, MEMBER_LOGITS[:, 0]),
        "y_pred",
    ),
    (
        "TemperatureScaling-nan",
        lambda: ez.calibration.TemperatureScaling().fit(np.full((6, 2, 3), np.nan), LABELS),
        "member_logits",
    ),
    (
        "TemperatureScaling-labels",
        lambda: ez.calibration.TemperatureScaling().fit(MEMBER_LOGITS, LABELS[:5]),
        "labels",
    ),
    (
        "TemperatureScaling-zero_classes",
        lambda: ez.calibration.TemperatureScaling().fit(MEMBER_LOGITS[:, :, :0], LABELS),
        "member_logits",
    ),
]


@pytest.mark.parametrize(
    "call, argument", [c[1:] for c in CALL_CASES], ids=[c[0] for c in CALL_CASES]
)
def test_bad_call_input_is_a_clear_error(call, argument):
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    assert f"`{argument}`" in str(info.value) or f"'{argument}'" in str(info.value), (
        f"The message does not name `{argument}`: {type(info.value).__name__}: {info.value}"
    )

"""LoRA-Ensemble, BatchEnsemble, Masksembles, Hydra and loss prediction
on a keras-hub classifier of any family (`LoRAEnsembleClassifier`,
`BatchEnsembleClassifier`, `MasksemblesClassifier`, `HydraClassifier`,
`LossPredictionImageClassifier.from_keras_hub`): the tiny text classifiers of every family
keras-hub ships (`fixtures/tiny_text_classifiers.py`) and the transformer
image classifiers (`fixtures/tiny_image_classifiers.py`). Members that
start as the model (LoRA's `B = 0`, BatchEnsemble's fast weights of ones,
heads copied) compute the keras-hub model's logits; with members that
differ, each member equals the keras-hub model with that member's merged
kernels (LoRA's `W0 + A_m B_m`, BatchEnsemble's `W * r_m s_m^T`, the
Masksembles mask folded into a feed-forward projection, Hydra's pruned
heads' rows of the attention output projections zeroed) and its head; a
family the method cannot take is refused by name. The whole list runs
under PyTorch (no compilation); JAX and TensorFlow run a slice that
rotates with the day."""

import os
import warnings

import keras
import keras_hub
import numpy as np
import pytest
from conftest import BACKEND
from conftest import REPO_ROOT
from fixtures import tiny_conv_classifiers
from fixtures import tiny_image_classifiers
from fixtures import tiny_text_classifiers
from zoo_testing import families_this_run
from zoo_testing import to_np

import ensemble_zoo as ez
from ensemble_zoo.models import BatchEnsembleClassifier
from ensemble_zoo.models import DeepEnsembleClassifier
from ensemble_zoo.models import HydraClassifier
from ensemble_zoo.models import HydraImageClassifier
from ensemble_zoo.models import HydraTextClassifier
from ensemble_zoo.models import LoRAEnsembleClassifier
from ensemble_zoo.models import LoRAEnsembleTextClassifier
from ensemble_zoo.models import LossPredictionImageClassifier
from ensemble_zoo.models import MasksemblesClassifier
from ensemble_zoo.models import MCDropoutClassifier
from ensemble_zoo.models import SubnetworkEnsembleClassifier
from ensemble_zoo.models import TileEnsembleClassifier
from ensemble_zoo.models.hydra.hydra_model_backbone import head_sites
from ensemble_zoo.models.member_sites import FEEDFORWARD_ROLES
from ensemble_zoo.models.member_sites import attention_sites
from ensemble_zoo.models.member_sites import projection_sites
from ensemble_zoo.models.shared_trunk import site_blocks

SLICE = 2
#: family -> the number of adapted attention projections: 4 per attention
#: layer (Swin fuses query, key and value: 2 per block, 2 blocks; MiT has
#: 2 attention layers).
ADAPTERS = {"swin": 4, "mit": 8}
FAMILIES = sorted(tiny_text_classifiers.FAMILIES) + sorted(tiny_image_classifiers.FAMILIES)
ATTENTION_FAMILIES = [f for f in FAMILIES if f != "f_net"]


def _build(family, **overrides):
    """`(keras-hub classifier, inputs)`: a tiny model of `family`, always
    the same one (`overrides`: other backbone arguments)."""
    if family in tiny_image_classifiers.FAMILIES:
        model = tiny_image_classifiers.build_image_classifier(family, **overrides)
        return model, tiny_image_classifiers.images()
    model = tiny_text_classifiers.build_text_classifier(family, **overrides)
    return model, tiny_text_classifiers.text_inputs(model)


def _perturb(weights, scale=0.3):
    """Adds noise to `weights`, member by member different."""
    rng = np.random.default_rng(1)
    for weight in weights:
        noise = rng.normal(scale=scale, size=tuple(weight.shape)).astype("float32")
        weight.assign(to_np(weight) + noise)


def _amplify_feedforward(model, gain=30.0):
    """Scales `model`'s feed-forward output projections, so that what the
    masks drop shows in a tiny random model's logits."""
    for _, parent, attribute in projection_sites(model.backbone, ("mlp_down",)):
        kernel = getattr(parent, attribute).kernel
        kernel.assign(to_np(kernel) * gain)


def _check_members(ensemble, family, x, set_member, **overrides):
    """Each member of `ensemble` equals a fresh keras-hub model of `family`
    (`overrides`: see `_build`) with its heads and what
    `set_member(reference, member)` sets."""
    logits = ensemble.predict(x, verbose=0)
    assert np.abs(logits[:, 0] - logits[:, 1]).max() > 1e-3
    for m in range(2):
        reference, _ = _build(family, **overrides)
        set_member(reference, m)
        for head in ensemble.heads:
            dense = reference.get_layer(head.name.removesuffix("_members"))
            dense.kernel.assign(head.kernel[m])
            dense.bias.assign(head.bias[m])
        np.testing.assert_allclose(logits[:, m], to_np(reference(x)), atol=1e-4)


def _check_starts_as_the_model(ensemble, model, x):
    expected = to_np(model(x))
    logits = ensemble.predict(x, verbose=0)
    assert logits.shape == expected.shape[:1] + (2,) + expected.shape[1:]
    for m in range(2):
        np.testing.assert_allclose(logits[:, m], expected, atol=1e-5)


@pytest.mark.parametrize("family", families_this_run(ATTENTION_FAMILIES, SLICE))
def test_lora_ensemble_on_every_family(family):
    model, x = _build(family)
    ensemble = LoRAEnsembleClassifier.from_model(model, num_members=2, rank=2, seed=0)
    assert len(ensemble.adapters) == ADAPTERS.get(family, 4)
    _check_starts_as_the_model(ensemble, model, x)
    _perturb([a.lora_b for a in ensemble.adapters] + [h.kernel for h in ensemble.heads])

    def merge(reference, m):
        sites = attention_sites(reference.backbone, ensemble.targets)
        for (parent, attribute), adapter in zip(sites, ensemble.adapters, strict=True):
            getattr(parent, attribute).kernel.assign(adapter.merged_kernel(m))

    _check_members(ensemble, family, x, merge)


#: Families whose backbone runs every block inside one layer (keras-hub's
#: ViT and DeiT encoders), or one layer for every block (ALBERT): no
#: shared trunk.
NO_TRUNK = ("albert", "deit", "vit")


@pytest.mark.parametrize("family", families_this_run(ATTENTION_FAMILIES, SLICE))
def test_lora_ensemble_adapts_the_upper_block_over_a_shared_trunk(family):
    """`layers=[-1]` on two blocks: the lower block runs once per input
    row (`trunk_blocks`; the families of `NO_TRUNK` warn and run it on
    every member's rows), and each member equals the keras-hub model
    with its adapter merged into the upper block only."""
    overrides = {"num_layers": 2} if family not in ("swin", "mit") else {}
    model, x = _build(family, **overrides)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ensemble = LoRAEnsembleClassifier.from_model(
            model, num_members=2, rank=2, seed=0, layers=[-1]
        )
    shared = family not in NO_TRUNK
    assert ensemble.backbone.trunk_blocks == int(shared)
    assert any("shared trunk" in str(w.message) for w in caught) == (family in ("deit", "vit"))
    assert ensemble.adapted_layers == [0 if family == "albert" else 1]
    _perturb([a.lora_b for a in ensemble.adapters] + [h.kernel for h in ensemble.heads])

    def merge(reference, m):
        sites = attention_sites(reference.backbone, ensemble.targets)
        upper = {id(parent) for parent in site_blocks(reference.backbone, sites)[-1][1]}
        sites = [site for site in sites if id(site[0]) in upper]
        for (parent, attribute), adapter in zip(sites, ensemble.adapters, strict=True):
            getattr(parent, attribute).kernel.assign(adapter.merged_kernel(m))

    _check_members(ensemble, family, x, merge, **overrides)


@pytest.mark.skipif(BACKEND != "torch", reason="torch's FLOP counter")
def test_the_shared_trunk_runs_once_per_row_and_draws_per_member_in_training():
    """With the upper of three RoBERTa blocks adapted, `predict` runs the
    two below once per input row: against Keras' own call of the same
    network on every member's rows it saves at least their products on
    `members - 1` copies (PyTorch's FLOP counter). In training it saves
    them too without dropout; with dropout (RoBERTa's default 0.1) the
    rows are tiled before the embeddings' dropout, so that each member
    draws its own masks, and nothing is saved."""
    from torch.utils.flop_counter import FlopCounterMode

    def flops(function):
        with FlopCounterMode(display=False) as counter:
            function()
        return counter.get_total_flops()

    model = tiny_text_classifiers.build_text_classifier("roberta", num_layers=3)
    for bad, error in (
        ("1", TypeError),
        ([1.5], TypeError),
        ([3], ValueError),
        ([0, 0], ValueError),
    ):
        with pytest.raises(error, match="`adapted_layers`"):
            LoRAEnsembleClassifier.from_model(model, num_members=2, rank=2, layers=bad)
    with pytest.raises(ValueError, match="not both"):
        LoRAEnsembleClassifier.from_model(model, layers=[1], adapted_layers=[1])
    for dropout in (0.0, 0.1):
        model = tiny_text_classifiers.build_text_classifier(
            "roberta", num_layers=3, dropout=dropout
        )
        x = tiny_text_classifiers.text_inputs(model)
        ensemble = LoRAEnsembleClassifier.from_model(model, num_members=4, rank=2, layers=[-1])
        assert ensemble.backbone.trunk_blocks == 2
        trunk = 2 / 3 * flops(lambda: model.backbone(x))
        rows = {k: ez.ops.tile_members(v, 4) for k, v in x.items()}
        keras_call = flops(lambda: ensemble.backbone.network(rows))
        inference = flops(lambda: ensemble(x))
        training = flops(lambda: ensemble(x, training=True))
        assert keras_call - inference >= 0.99 * 3 * trunk, (keras_call, inference, trunk)
        if dropout:
            assert training == keras_call, (training, keras_call)
        else:
            assert training == inference, (training, inference)


@pytest.mark.parametrize("family", families_this_run(FAMILIES, SLICE))
def test_batch_ensemble_on_every_family(family):
    model, x = _build(family)
    ensemble = BatchEnsembleClassifier.from_model(model, num_members=2, seed=0)
    fast = [w for layer in ensemble.batch_ensemble_layers for w in (layer.fast_in, layer.fast_out)]
    for weight in fast:
        weight.assign(np.ones(tuple(weight.shape), "float32"))
    _check_starts_as_the_model(ensemble, model, x)
    _perturb(fast + [h.kernel for h in ensemble.heads])

    def merge(reference, m):
        roles = ("query", "key", "value", "attention_output", "query_key_value")
        sites = projection_sites(reference.backbone, roles + FEEDFORWARD_ROLES)
        layers = ensemble.batch_ensemble_layers
        for (_, parent, attribute), layer in zip(sites, layers, strict=True):
            target = getattr(parent, attribute)
            kernel = to_np(layer.member_kernels()[m])
            target.kernel.assign(kernel.reshape(tuple(target.kernel.shape)))
            if target.bias is not None:
                target.bias.assign(to_np(layer.bias[m]).reshape(tuple(target.bias.shape)))

    _check_members(ensemble, family, x, merge)


@pytest.mark.parametrize("family", families_this_run(FAMILIES, SLICE))
def test_masksembles_on_every_family(family):
    """A member's mask multiplies the feed-forward block's hidden units:
    folded into the rows of the block's second projection."""
    model, x = _build(family)
    _amplify_feedforward(model)
    ensemble = MasksemblesClassifier.from_model(model, num_members=2, seed=0)
    # The output layer, both members' alike (the masks alone differ): a
    # scale at which they show.
    logits_layer = ensemble.heads[-1]
    logits_layer.kernel.assign(to_np(logits_layer.kernel) * 100.0)

    def fold(reference, m):
        _amplify_feedforward(reference)
        downs = projection_sites(reference.backbone, ("mlp_down",))
        for (_, parent, attribute), mask in zip(downs, ensemble.masks, strict=True):
            factors = to_np(mask.member_factors()[m])
            layer = getattr(parent, attribute)
            layer.kernel.assign(to_np(layer.kernel) * factors[:, None])

    _check_members(ensemble, family, x, fold)


def _pruned_masks(model, num_members=2):
    """Member `m` drops head `m` (modulo the heads) of every attention
    layer with more than one head (`[members][layers][heads]`)."""
    sites = head_sites(model.backbone)
    return [
        [[int(heads == 1 or h != m % heads) for h in range(heads)] for *_, heads, _ in sites]
        for m in range(num_members)
    ]


def _zero_pruned_heads(reference, masks):
    """Zeroes, in `reference`, the rows of each attention output
    projection's kernel that read a head `masks` prunes."""
    for (parent, attribute, heads, layout), mask in zip(
        head_sites(reference.backbone), masks, strict=True
    ):
        layer = getattr(parent, attribute)
        kernel = to_np(layer.kernel)
        rows = kernel.reshape((heads, -1) + kernel.shape[-1:])
        rows = rows * np.asarray(mask, "float32")[:, None, None]
        layer.kernel.assign(rows.reshape(kernel.shape))


def _amplify_attention(model, gain=30.0):
    """Scales `model`'s attention output projections, so that a pruned
    head shows in a tiny random model's logits."""
    for parent, attribute, _, _ in head_sites(model.backbone):
        kernel = getattr(parent, attribute).kernel
        kernel.assign(to_np(kernel) * gain)


@pytest.mark.parametrize("family", families_this_run(ATTENTION_FAMILIES, SLICE))
def test_hydra_on_every_family(family):
    """Member `m` equals the keras-hub model whose attention output
    projections read none of the heads `head_masks[m]` prunes; with every
    head kept, every member is the model. On ViT and BERT it equals the
    fused `HydraImageClassifier` / `HydraTextClassifier` of the same
    masks (an independent implementation: pruned head slots, no zeroes)."""
    model, x = _build(family)
    keep_all = [[[1] * heads for *_, heads, _ in head_sites(model.backbone)]] * 2
    _check_starts_as_the_model(HydraClassifier.from_model(model, keep_all), model, x)
    _amplify_attention(model)
    masks = _pruned_masks(model)
    ensemble = HydraClassifier.from_model(model, masks)
    logits_layer = ensemble.heads[-1]
    logits_layer.kernel.assign(to_np(logits_layer.kernel) * 100.0)

    def prune(reference, m):
        _amplify_attention(reference)
        _zero_pruned_heads(reference, masks[m])

    _check_members(ensemble, family, x, prune)
    fused = {"vit": HydraImageClassifier, "bert": HydraTextClassifier}.get(family)
    if fused is not None:
        ensemble = HydraClassifier.from_model(model, masks)
        np.testing.assert_allclose(
            ensemble.predict(x, verbose=0),
            fused.from_keras_hub(model, np.asarray(masks)).predict(x, verbose=0),
            atol=1e-4,
        )


@pytest.mark.skipif(
    BACKEND != "torch", reason="the checks before any computation: once, where models build fastest"
)
def test_models_the_methods_cannot_take_are_refused():
    fnet = tiny_text_classifiers.build_text_classifier("f_net")
    with pytest.raises(ValueError, match=r"no attention projection.*\(FNet\) cannot"):
        LoRAEnsembleClassifier.from_model(fnet, num_members=2, rank=2)
    with pytest.raises(ValueError, match=r"Hydra prunes attention heads.*\(FNet\) cannot"):
        HydraClassifier.from_model(fnet)
    mit = tiny_image_classifiers.build_image_classifier("mit")  # 1 and 2 heads
    with pytest.raises(ValueError, match=r"`head_masks\[0\]` must hold one mask per"):
        HydraClassifier.from_model(mit, [[[1, 1]]])
    with pytest.raises(ValueError, match=r"`head_masks\[:, 0\]` must have 1 heads; got 2"):
        HydraClassifier.from_model(mit, [[[1, 1], [1, 1]]])
    with pytest.raises(ValueError, match="has a member that keeps none"):
        HydraClassifier.from_model(mit, [[[1], [0, 0]]])
    # The convolutional families (VGG's nested head may be named first).
    for family in sorted(tiny_conv_classifiers.FAMILIES):
        conv = tiny_conv_classifiers.build_conv_classifier(family)
        for cls, reason in (
            (LoRAEnsembleClassifier, "no attention projection"),
            (BatchEnsembleClassifier, "no attention or feed-forward projection"),
            (MasksemblesClassifier, "no feed-forward block"),
            (HydraClassifier, "no attention output projection"),
        ):
            with pytest.raises(ValueError, match=f"{reason}|nested model 'head'"):
                cls.from_model(conv)
    inputs = keras.Input((4,))
    mlp = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.Dense(8)(inputs)))
    for cls in (LoRAEnsembleClassifier, BatchEnsembleClassifier, MasksemblesClassifier):
        with pytest.raises(TypeError, match="must be a keras-hub task"):
            cls.from_model(mlp, num_members=2)
    roberta = tiny_text_classifiers.build_text_classifier("roberta")
    with pytest.raises(ValueError, match="`targets` must be distinct names"):
        LoRAEnsembleClassifier.from_model(roberta, targets=["query", "mlp_up"])
    swin = tiny_image_classifiers.build_image_classifier("swin")
    with pytest.raises(ValueError, match="one fused projection: `targets` must name all three"):
        LoRAEnsembleClassifier.from_model(swin, targets=["query", "value"])
    with pytest.raises(ValueError, match=r"`scale` must lie in \[1, inf\]"):
        MasksemblesClassifier.from_model(roberta, scale=0.5)
    # The BERT task points a RoBERTa to the class that takes every family.
    with pytest.raises(TypeError, match=r"LoRAEnsembleClassifier\.from_model"):
        LoRAEnsembleTextClassifier.from_keras_hub(roberta, num_members=2, rank=2)


#: method -> (its task, whether it freezes the classifier's copy, its
#: arguments beyond `reuse_head`).
TRAINING = {
    "lora_ensemble": (LoRAEnsembleClassifier, True, dict(num_members=2, seed=0)),
    # The upper of two blocks over a shared trunk (`adapted_layers`).
    "lora_ensemble_upper": (LoRAEnsembleClassifier, True, dict(num_members=2, seed=0, layers=[-1])),
    "batch_ensemble": (BatchEnsembleClassifier, False, dict(num_members=2, seed=0)),
    "masksembles": (MasksemblesClassifier, False, dict(num_members=2, seed=0)),
    "hydra": (HydraClassifier, False, dict(head_masks=[[[0, 1]], [[1, 0]]])),
}


@pytest.mark.parametrize("method", families_this_run(TRAINING, 1))
def test_fit_trains_what_the_method_trains_and_the_preset_round_trips(tmp_path, method):
    """LoRA-Ensemble trains its adapters and heads alone (the copy of the
    classifier is frozen); BatchEnsemble, Masksembles and Hydra train
    every weight. keras-hub's loader finds the class from the preset. Every
    method under PyTorch, one a day in turn under JAX and TensorFlow."""
    cls, frozen, arguments = TRAINING[method]
    overrides = {"num_layers": 2} if "layers" in arguments else {}
    model = tiny_text_classifiers.build_text_classifier("roberta", **overrides)
    x = tiny_text_classifiers.text_inputs(model, batch=8)
    y = np.arange(8) % 3
    ensemble = cls.from_model(model, reuse_head=False, **arguments)
    if frozen:
        adapted = [w for a in ensemble.adapters for w in (a.lora_a, a.lora_b)]
        heads = [w for h in ensemble.heads for w in h.weights]
        assert {id(v) for v in ensemble.trainable_weights} == {id(w) for w in adapted + heads}
    else:
        assert {v.path for v in ensemble.model.backbone.weights} - {
            v.path for v in ensemble.trainable_weights
        } <= {v.path for v in ensemble.model.backbone.weights if "masks" in v.path}
    frozen_values = {v.path: to_np(v) for v in ensemble.non_trainable_weights}
    before = {v.path: to_np(v) for v in ensemble.trainable_weights}
    ensemble.compile(optimizer=keras.optimizers.Adam(1e-2))
    ensemble.fit(x, y, epochs=2, batch_size=4, verbose=0)
    assert all(np.abs(to_np(v) - before[v.path]).max() > 0 for v in ensemble.trainable_weights)
    for v in ensemble.non_trainable_weights:
        np.testing.assert_array_equal(to_np(v), frozen_values[v.path])
    # The wrapped copy trained; the user's model did not.
    assert np.abs(to_np(model.get_layer("logits").kernel)).sum() > 0

    logits = ensemble.predict(x, verbose=0)
    ensemble.save_to_preset(str(tmp_path))
    restored = keras_hub.models.ImageClassifier.from_preset(str(tmp_path))
    assert type(restored) is cls
    assert restored.get_config() == ensemble.get_config() | {"name": restored.name}
    np.testing.assert_allclose(restored.predict(x, verbose=0), logits, atol=1e-6)
    uncertainty = restored.predict_uncertainty(x)
    assert uncertainty["probabilities"].shape == (8, 3)


@pytest.mark.parametrize("family", families_this_run(FAMILIES, SLICE))
def test_loss_prediction_on_every_family(tmp_path, family):
    """The loss predictor reads the embedding the classifier's last `Dense`
    layer reads (the family's pooling and hidden head layers kept): its
    logits are the keras-hub model's; with both frozen, `fit` trains the
    uncertainty head alone; the preset round-trips through the zoo's
    loader."""
    model, x = _build(family)
    loss_model = LossPredictionImageClassifier.from_keras_hub(
        model, head_hidden_units=(8,), freeze_backbone=True, freeze_classifier=True
    )
    outputs = loss_model.predict(x, verbose=0)
    np.testing.assert_allclose(outputs["logits"], to_np(model(x)), atol=1e-5)
    assert outputs["uncertainty"].shape == (len(outputs["logits"]),)
    head = {v.path for v in loss_model.uncertainty_head.weights}
    assert {v.path for v in loss_model.trainable_weights} == head
    before = {v.path: to_np(v) for v in loss_model.weights}
    loss_model.fit(x, np.arange(len(outputs["logits"])) % 3, epochs=1, verbose=0)
    changed = {v.path for v in loss_model.weights if np.any(to_np(v) != before[v.path])}
    assert changed and changed <= head
    loss_model.save_to_preset(str(tmp_path))
    restored = LossPredictionImageClassifier.from_preset(str(tmp_path))
    again = restored.predict(x, verbose=0)
    np.testing.assert_allclose(
        again["uncertainty"], loss_model.predict(x, verbose=0)["uncertainty"], atol=1e-6
    )


#: family -> its feed-forward blocks (ViT, DeiT: 1 block; Swin, MiT: 2).
BLOCKS = {"vit": 1, "deit": 1, "swin": 2, "mit": 2}


@pytest.mark.parametrize("family", families_this_run(tiny_image_classifiers.FAMILIES, 1))
def test_whole_model_methods_on_every_image_transformer(family):
    """Deep ensembles, MC dropout and sub-network masks on DeiT, Swin and
    MiT as on ViT (the text families: test_whole_model_methods_on_text):
    members equal their models, MC dropout at rate 0 equals the model, and
    a sub-network member equals the model with its masks multiplied into
    the feed-forward kernels."""
    model, x = _build(family)
    expected = to_np(model(x))
    ensemble = DeepEnsembleClassifier([model, _build(family)[0]])
    np.testing.assert_allclose(ensemble.predict(x, verbose=0)[:, 0], expected, atol=1e-5)
    mc = MCDropoutClassifier(model, num_members=2, rate=0.0)
    np.testing.assert_allclose(mc.predict(x, verbose=0)[:, 1], expected, atol=1e-5)
    if family == "mit":  # average-pools its last feature map: one tile is the model
        tiles = TileEnsembleClassifier.from_model(model, grid_size=1)
        np.testing.assert_allclose(tiles.predict(x, verbose=0)[:, 0], expected, atol=1e-5)

    masks = SubnetworkEnsembleClassifier(model, num_members=2, seed=0)
    assert len(masks.masked_layers) == 2 * BLOCKS[family]
    _perturb([w for layer in masks.masked_layers for w in layer.mask_logits()], scale=3.0)
    logits = masks.predict(x, verbose=0)
    for m in range(2):
        reference, _ = _build(family)
        sites = projection_sites(reference.backbone, FEEDFORWARD_ROLES)
        # Matched by kernel shape (each differs in these tiny models).
        by_shape = {tuple(getattr(p, a).kernel.shape): getattr(p, a) for _, p, a in sites}
        assert len(by_shape) == len(masks.masked_layers)
        for wrapper in masks.masked_layers:
            layer = by_shape[tuple(wrapper.base_layer.kernel.shape)]
            column = 1 / (1 + np.exp(-to_np(wrapper.column_logits)[m]))
            row = 1 / (1 + np.exp(-to_np(wrapper.row_logits)[m]))
            layer.kernel.assign(to_np(layer.kernel) * np.outer(column, row))
            layer.bias.assign(to_np(layer.bias) * row)
        np.testing.assert_allclose(logits[:, m], to_np(reference(x)), atol=1e-5)


#: The convolutional families without a dropout layer: MC dropout has
#: nothing to sample.
NO_DROPOUT = ("mobilenet", "mobilenetv5")
#: ... and those whose head does not read an average-pooled vector (tile
#: ensembles need one): MobileNet keeps the pooled axes for a convolution,
#: MobileNetV5 and VGG do not average-pool.
NO_AVERAGE_POOLING = ("mobilenet", "mobilenetv5", "vgg")


@pytest.mark.parametrize("family", families_this_run(tiny_conv_classifiers.FAMILIES, SLICE))
def test_whole_model_methods_and_loss_prediction_on_every_conv_family(family):
    """Deep ensembles, MC dropout (its BatchNormalization in inference
    mode: at rate 0 every member is the model), loss prediction and one
    tile on the convolutional families: members and logits equal the keras-hub
    model's (VGG's logits `Dense` ends a nested head); MC dropout without
    a dropout layer and tiles without an average-pooled head are refused
    by name."""
    model = tiny_conv_classifiers.build_conv_classifier(family)
    x = tiny_image_classifiers.images()
    expected = to_np(model(x))
    other = tiny_conv_classifiers.build_conv_classifier(family, seed=1)
    ensemble = DeepEnsembleClassifier([model, other])
    np.testing.assert_allclose(ensemble.predict(x, verbose=0)[:, 0], expected, atol=1e-5)
    if family in NO_DROPOUT:
        with pytest.raises(ValueError, match="has no Dropout layer"):
            MCDropoutClassifier(model, num_members=2, rate=0.0)
    else:
        mc = MCDropoutClassifier(model, num_members=2, rate=0.0)
        np.testing.assert_allclose(mc.predict(x, verbose=0)[:, 1], expected, atol=1e-5)
    loss_model = LossPredictionImageClassifier.from_keras_hub(
        model, head_hidden_units=(8,), freeze_backbone=True, freeze_classifier=True
    )
    np.testing.assert_allclose(loss_model.predict(x, verbose=0)["logits"], expected, atol=1e-5)
    # One tile is the model (its average pooling over the whole map).
    if family in NO_AVERAGE_POOLING:
        with pytest.raises(ValueError, match="GlobalAveragePooling2D"):
            TileEnsembleClassifier.from_model(model, grid_size=1)
    else:
        tiles = TileEnsembleClassifier.from_model(model, grid_size=1)
        np.testing.assert_allclose(tiles.predict(x, verbose=0)[:, 0], expected, atol=1e-5)


def family_table():
    """The rows of the family table in docs/add_a_model_family.md."""
    methods = ("lora", "batch", "masks", "loss", "deep", "mc", "sub", "hydra")
    rows = []
    for family in FAMILIES:
        kind = "image" if family in tiny_image_classifiers.FAMILIES else "text"
        cells = dict.fromkeys(methods, "yes")
        if family == "f_net":
            cells["lora"] = cells["hydra"] = "refused: no attention"
        rows.append(f"| {family} | {kind} | " + " | ".join(cells.values()) + " |")
    for family in sorted(tiny_conv_classifiers.FAMILIES):
        cells = dict.fromkeys(methods, "yes")
        cells["lora"] = cells["hydra"] = "refused: no attention"
        cells["batch"] = "refused: no projection"
        cells["masks"] = "refused: no feed-forward block"
        cells["sub"] = "not tested"
        if family in NO_DROPOUT:
            cells["mc"] = "refused: no dropout layer"
        rows.append(f"| {family} | image (conv) | " + " | ".join(cells.values()) + " |")
    return rows


@pytest.mark.skipif(BACKEND != "jax", reason="reads the docs: once")
def test_the_family_table_lists_every_tested_family():
    path = os.path.join(REPO_ROOT, "docs", "add_a_model_family.md")
    text = open(path, encoding="utf-8").read()
    table = text.split("<!-- family-table -->")[1].split("<!-- /family-table -->")[0]
    rows = [line for line in table.strip().splitlines()[2:]]
    assert rows == family_table(), "\n".join(family_table())


@pytest.mark.skipif(BACKEND != "jax", reason="host-side bookkeeping: once")
def test_trunk_rows_tile_the_batch_once_and_pass_constants():
    """`TrunkRows` (the call-time shared trunk): an operation that differs
    per member reads every one-copy batch tiled once into member rows,
    and a tensor that is not a batch (a constant of the graph) as it is."""
    from ensemble_zoo.models.shared_trunk import TrunkRows

    rows = TrunkRows(3, lambda op: op == "member", "member_major", batch=2)
    x = keras.ops.convert_to_tensor(np.arange(6.0).reshape(2, 3))
    scale = keras.ops.convert_to_tensor(np.array([10.0, 100.0, 1000.0]))
    shared = rows.wrap("shared", lambda a: a + 1.0)(x)
    assert tuple(shared.shape) == (2, 3)
    seen = []

    def member(a, b, c):
        seen.append((tuple(a.shape), tuple(b.shape), tuple(c.shape)))
        return a * c + b

    out = rows.wrap("member", member)(shared, shared, scale)
    assert seen == [((6, 3), (6, 3), (3,))]
    expected = np.tile(to_np(shared), (3, 1))
    np.testing.assert_array_equal(to_np(out), expected * [10.0, 100.0, 1000.0] + expected)
    # Member rows stay member rows: the next operation reads them as they are.
    again = rows.wrap("shared", lambda a: a - 1.0)(out)
    assert tuple(again.shape) == (6, 3)

import keras_hub
import numpy as np
import pytest
import zoo_testing
from conftest import jit_compile
from conftest import requires_jit
from zoo_testing import perturb_weights
from zoo_testing import to_np

from ensemble_zoo.models import EnsembleClassifier
from ensemble_zoo.models import HydraImageClassifier
from ensemble_zoo.models import PackedEnsembleImageClassifier
from ensemble_zoo.utils.parameters import parameter_count


def tiny_vit(seed=0, classes=5):
    vit = zoo_testing.tiny_vit(seed, num_classes=classes, patch_size=4, num_heads=4)
    return perturb_weights(vit, seed)  # non-trivial biases and norms everywhere


def images(n=6, seed=1):
    return np.random.default_rng(seed).uniform(size=(n, 8, 8, 1)).astype("float32")


def ablated_keras_hub(vit, mask):
    """Independent reference: the keras-hub model with pruned heads' output
    projection blocks zeroed (the paper's ablation)."""
    clone = keras_hub.models.ViTImageClassifier.from_config(vit.get_config())
    clone.set_weights(vit.get_weights())
    blocks = clone.backbone.get_layer("vit_encoder").encoder_layers
    for block, keep in zip(blocks, mask):
        kernel = to_np(block.mha._output_dense.kernel)
        kernel[~keep] = 0.0
        block.mha._output_dense.kernel.assign(kernel)
    return clone


MASKS = np.array(
    [
        [[1, 1, 1, 1], [1, 0, 1, 0]],
        [[0, 1, 1, 0], [1, 1, 1, 1]],
        [[0, 0, 0, 0], [0, 0, 1, 0]],  # no heads at all in layer 0
    ],
    bool,
)


def test_one_member_keeping_every_head_equals_keras_hub():
    vit = tiny_vit()
    hydra = HydraImageClassifier.from_keras_hub(vit)
    assert hydra.num_members == 1
    x = images()
    np.testing.assert_allclose(
        hydra.predict(x, verbose=0)[:, 0], vit.predict(x, verbose=0), atol=1e-5
    )
    assert parameter_count(hydra) == vit.count_params()
    assert hydra.count_params() == vit.count_params() + 2 * 4  # + head masks


@pytest.mark.parametrize("mlp", ["merge", "grouped"])
def test_fused_equals_pruned_members_run_one_by_one(mlp):
    vit = tiny_vit()
    hydra = HydraImageClassifier.from_keras_hub(vit, MASKS, mlp=mlp)
    assert hydra.backbone.member_num_heads == [[4, 2, 0], [2, 4, 1]]
    x = images()
    fused = hydra.predict(x, verbose=0)
    assert fused.shape == (6, 3, 5)
    for m, member in enumerate(hydra.split_members()):
        reference = ablated_keras_hub(vit, MASKS[m]).predict(x, verbose=0)
        np.testing.assert_allclose(fused[:, m], reference, atol=1e-5)
        np.testing.assert_allclose(member.predict(x, verbose=0)[:, 0], reference, atol=1e-5)
        assert member.backbone.member_num_heads == [[int(c)] for c in MASKS[m].sum(1)]


def perturb_mlps(member, seed):
    rng = np.random.default_rng(seed)
    for block in member.backbone.encoder_blocks:
        for w in (block.dense_1.kernel, block.dense_2.kernel, block.dense_1.bias):
            w.assign(to_np(w) + rng.normal(scale=0.3, size=w.shape).astype("float32"))


def test_mlp_merge_and_grouped_semantics_after_separate_training():
    vit = tiny_vit()
    members = HydraImageClassifier.from_keras_hub(vit, MASKS).split_members()
    for m, member in enumerate(members):
        perturb_mlps(member, seed=10 + m)  # as if fine-tuned separately
    x = images()
    separate = np.stack([m.predict(x, verbose=0)[:, 0] for m in members], 1)
    grouped = HydraImageClassifier.fuse(members, mlp="grouped").predict(x, verbose=0)
    np.testing.assert_allclose(grouped, separate, atol=1e-5)
    merged = HydraImageClassifier.fuse(members, mlp="merge").predict(x, verbose=0)
    assert np.abs(merged - separate).max() > 1e-2  # merging changes members
    # ... and equals members whose MLPs are replaced by the average.
    blocks = [[b for b in m.backbone.encoder_blocks] for m in members]
    for layer in range(2):
        for name in ("dense_1", "dense_2"):
            for attr in ("kernel", "bias"):
                values = [to_np(getattr(getattr(b[layer], name), attr)) for b in blocks]
                for b in blocks:
                    getattr(getattr(b[layer], name), attr).assign(np.mean(values, 0))
    averaged = np.stack([m.predict(x, verbose=0)[:, 0] for m in members], 1)
    np.testing.assert_allclose(merged, averaged, atol=1e-5)


def test_fuse_requires_equal_embeddings():
    members = HydraImageClassifier.from_keras_hub(tiny_vit(), MASKS).split_members()
    w = members[1].backbone.embedding.weights[0]
    w.assign(to_np(w) + 1.0)
    with pytest.raises(ValueError, match="embedding differs"):
        HydraImageClassifier.fuse(members)
    with pytest.raises(ValueError, match="HydraImageClassifier"):
        HydraImageClassifier.fuse([tiny_vit()])


def test_config_and_preset_round_trip(tmp_path):
    hydra = HydraImageClassifier.from_keras_hub(tiny_vit(), MASKS, mlp="grouped")
    x = images()
    expected = hydra.predict(x, verbose=0)
    clone = HydraImageClassifier.from_config(hydra.get_config())
    clone.set_weights(hydra.get_weights())
    np.testing.assert_allclose(clone.predict(x, verbose=0), expected, atol=1e-6)
    hydra.save_to_preset(str(tmp_path / "hydra"))
    loaded = EnsembleClassifier.from_preset(str(tmp_path / "hydra"))
    assert isinstance(loaded, HydraImageClassifier)
    assert loaded.backbone.mlp == "grouped"
    np.testing.assert_allclose(loaded.predict(x, verbose=0), expected, atol=1e-6)


@requires_jit
def test_trains_and_predicts_with_jit_compile():
    hydra = HydraImageClassifier.from_keras_hub(tiny_vit(), MASKS)
    x = images(32)
    y = np.arange(32) % 5
    eager = hydra.predict(x, verbose=0)
    hydra.compile(jit_compile=jit_compile())
    np.testing.assert_allclose(hydra.predict(x, verbose=0), eager, atol=1e-5)
    mask_before = to_np(hydra.backbone.encoder_blocks[0].attention.head_mask)
    history = hydra.fit(x, y, epochs=3, batch_size=8, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    # Head masks are not trained: pruned heads stay pruned.
    np.testing.assert_array_equal(
        to_np(hydra.backbone.encoder_blocks[0].attention.head_mask), mask_before
    )


def test_bad_arguments():
    vit = tiny_vit()
    with pytest.raises(ValueError, match=r"\(members, num_layers, num_heads\)"):
        HydraImageClassifier.from_keras_hub(vit, np.ones((3, 2, 5)))
    with pytest.raises(ValueError, match="mlp"):
        HydraImageClassifier.from_keras_hub(vit, mlp="average")
    with pytest.raises(ValueError, match="ViTImageClassifier"):
        HydraImageClassifier.from_keras_hub(vit.backbone)
    # A wrong backbone is a wrong type, as for Packed-Ensembles.
    with pytest.raises(TypeError, match="must be a HydraBackbone; got ViTBackbone"):
        HydraImageClassifier(vit.backbone, num_classes=3)
    with pytest.raises(TypeError, match="must be a PackedEnsembleBackbone; got ViTBackbone"):
        PackedEnsembleImageClassifier(vit.backbone, num_classes=3)
    hydra = HydraImageClassifier.from_keras_hub(vit, MASKS)
    with pytest.raises(ValueError, match=r"\(batch, 8, 8, 1\)"):
        hydra(np.zeros((2, 8, 8), "float32"))

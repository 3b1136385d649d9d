"""Masksembles masks (Durasov et al. 2021) and the layer that applies them
to a member-major tiled batch."""

import numpy as np
import pytest
from keras import ops

from ensemble_zoo.layers import MasksemblesMask
from ensemble_zoo.layers import masksembles_masks


def mean_iou(masks):
    n = len(masks)
    return np.mean(
        [
            (masks[i] * masks[j]).sum() / np.maximum(masks[i], masks[j]).sum()
            for i in range(n)
            for j in range(i + 1, n)
        ]
    )


@pytest.mark.parametrize(
    "channels,n,scale", [(96, 4, 2.0), (48, 3, 1.5), (64, 4, 3.0), (17, 2, 2.5)]
)
def test_masks_have_the_papers_structure(channels, n, scale):
    masks = masksembles_masks(channels, n, scale, seed=0)
    assert masks.shape == (n, channels) and set(np.unique(masks)) <= {0.0, 1.0}
    ones = masks.sum(axis=1)
    assert (ones == ones[0]).all()  # every member keeps m channels
    assert masks.any(axis=0).all()  # no dropped column survives
    # m ~ channels / (scale * (1 - (1 - 1/scale)^n)), up to the search
    expected = channels / (scale * (1 - (1 - 1 / scale) ** n))
    assert abs(ones[0] - expected) <= 3
    np.testing.assert_array_equal(masks, masksembles_masks(channels, n, scale, seed=0))


def test_scale_controls_the_overlap():
    assert (masksembles_masks(32, 4, 1.0) == 1).all()  # scale 1: one model
    ious = [mean_iou(masksembles_masks(256, 4, s, seed=1)) for s in (1.2, 2.0, 4.0)]
    assert ious[0] > ious[1] > ious[2]
    # two masks of m ones among ~m*s positions overlap by about 1/s of m
    masks = masksembles_masks(512, 2, 2.0, seed=2)
    overlap = (masks[0] * masks[1]).sum() / masks[0].sum()
    assert abs(overlap - 0.5) < 0.1


def test_layer_applies_member_m_mask_to_slice_m():
    layer = MasksemblesMask(num_members=3, scale=2.0, seed=0)
    x = np.random.default_rng(0).normal(size=(3 * 2, 5, 24)).astype("float32")
    y = np.asarray(ops.convert_to_numpy(layer(x)))
    masks = np.asarray(ops.convert_to_numpy(layer.masks))
    for m in range(3):
        factor = masks[m] * 24 / masks[m].sum()  # rescaled like inverted dropout
        np.testing.assert_allclose(y[2 * m : 2 * m + 2], x[2 * m : 2 * m + 2] * factor, rtol=1e-6)
    plain = MasksemblesMask(num_members=3, scale=2.0, rescale=False, seed=0)
    np.testing.assert_allclose(np.asarray(ops.convert_to_numpy(plain(x)))[:2], x[:2] * masks[0])
    clone = MasksemblesMask.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(num_channels=16, num_masks=4, scale=0.5), "scale"),
        (dict(num_channels=0, num_masks=4, scale=2.0), "num_channels"),
        (dict(num_channels=3, num_masks=8, scale=50.0), "exactly 3 channels"),
    ],
)
def test_bad_mask_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        masksembles_masks(**kwargs)

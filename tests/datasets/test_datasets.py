import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import ensemble_zoo as ez


def test_digits_splits_are_disjoint_stratified_and_labelled():
    from sklearn.datasets import load_digits

    raw = load_digits()
    sizes = {}
    seen = []
    for split in ("train", "validation", "test"):
        x, y = ez.datasets.load_arrays("digits", split)
        assert x.shape[1:] == (8, 8, 1) and x.dtype == np.float32
        assert 0.0 <= x.min() and x.max() <= 1.0
        assert set(np.unique(y)) == set(range(8))
        sizes[split] = len(y)
        seen.append(x.reshape(len(x), -1))
        # Every image is a real digit of the same label.
        flat = raw.images.reshape(len(raw.images), -1) / 16.0
        idx = [np.flatnonzero((flat == row).all(1))[0] for row in x[:20, ..., 0].reshape(20, -1)]
        np.testing.assert_array_equal(raw.target[idx], y[:20])
    all_id = np.concatenate(seen)
    assert len(np.unique(all_id, axis=0)) == len(
        np.unique(raw.images[raw.target < 8].reshape(-1, 64), axis=0)
    )
    assert sizes == {"train": 866, "validation": 288, "test": 289}


def test_ood_splits():
    x, y = ez.datasets.load_arrays("digits", "near_ood")
    assert len(x) == 354 and (y == -1).all()
    x, y = ez.datasets.load_arrays("digits", "far_ood")
    assert x.shape == (360, 8, 8, 1) and (y == -1).all()
    assert np.allclose(x.reshape(360, -1).min(1), 0) and np.allclose(x.reshape(360, -1).max(1), 1)
    shifted, ys = ez.datasets.load_arrays("digits", "test_shifted")
    clean, yc = ez.datasets.load_arrays("digits", "test")
    np.testing.assert_array_equal(ys, yc)
    assert 0.1 < np.abs(shifted - clean).mean() < 0.25


def test_raw_digits_are_scikit_learns_ink_counts():
    """`raw=True`: the 0-16 ink counts of `load_digits().images` (integers
    for real digits), and the presets' image converter maps them back to
    the [0, 1] images bit for bit on every split."""
    from sklearn.datasets import load_digits

    counts = set(np.unique(load_digits().images))
    converter = ez.datasets.image_preprocessor("digits").image_converter
    assert converter.image_size == (8, 8) and converter.scale == 1 / 16
    for split in ("test", "near_ood", "far_ood", "test_shifted"):
        x, y = ez.datasets.load_arrays("digits", split)
        raw, y_raw = ez.datasets.load_arrays("digits", split, raw=True)
        np.testing.assert_array_equal(y_raw, y)
        assert raw.dtype == np.float32 and raw.min() >= 0 and raw.max() <= 16
        if split in ("test", "near_ood"):
            assert set(np.unique(raw)) <= counts
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(converter(raw)), x)
    batch = next(iter(ez.datasets.load("digits", "test", batch_size=289, raw=True)))[0]
    np.testing.assert_array_equal(
        batch.numpy(), ez.datasets.load_arrays("digits", "test", raw=True)[0]
    )
    with pytest.raises(TypeError, match="raw"):
        ez.datasets.load_arrays("digits", "test", raw="yes")
    with pytest.raises(ValueError, match="raw=True"):
        ez.datasets.load("cifar10", "test", raw=True)
    with pytest.raises(ValueError, match="digits"):
        ez.datasets.image_preprocessor("cifar10")


def test_load_returns_batched_tf_dataset_without_dropping():
    ds = ez.datasets.load("digits", "test", batch_size=100)
    assert isinstance(ds, tf.data.Dataset)
    sizes = [int(x.shape[0]) for x, _ in ds]
    assert sizes == [100, 100, 89]


def test_shuffle_is_seeded():
    a = next(iter(ez.datasets.load("digits", "train", 8, shuffle=True, seed=1)))[1]
    b = next(iter(ez.datasets.load("digits", "train", 8, shuffle=True, seed=1)))[1]
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_bad_names_list_valid_ones():
    with pytest.raises(ValueError, match="cifar10"):
        ez.datasets.load("mnist", "train")
    with pytest.raises(ValueError, match="near_ood"):
        ez.datasets.load("digits", "holdout")
    with pytest.raises(ValueError, match="image_shape"):
        ez.datasets.load("digits", "train", image_shape=(16, 16, 1))
    with pytest.raises(ValueError, match="batch_size"):
        ez.datasets.load("digits", "train", batch_size=0)


@pytest.mark.parametrize("name", ["cifar10", "cifar100", "svhn_cropped"])
def test_tfds_image_path_with_mock_data(name):
    with tfds.testing.mock_data(num_examples=10):
        ds = ez.datasets.load(name, "validation", batch_size=4, image_shape=(16, 16, 1))
        x, y = next(iter(ds))
        assert x.shape == (4, 16, 16, 1) and x.dtype == tf.float32
        assert 0.0 <= float(tf.reduce_min(x)) and float(tf.reduce_max(x)) <= 1.0
        assert int(tf.reduce_min(y)) >= 0
        x, y = next(iter(ez.datasets.load(name, "far_ood", batch_size=4, image_shape=(32, 32, 3))))
        assert x.shape == (4, 32, 32, 3)
        assert (y.numpy() == -1).all()


def test_tfds_text_path_with_mock_data():
    with tfds.testing.mock_data(num_examples=10):
        ds = ez.datasets.load(
            "glue/sst2", "test", batch_size=5, preprocessor=lambda s: tf.strings.length(s)
        )
        x, y = next(iter(ds))
        assert x.dtype == tf.int32 and x.shape == (5,)
        assert set(y.numpy()) <= {0, 1}
    assert "near_ood" not in ez.datasets.splits("glue/sst2")
    assert ez.datasets.num_classes("glue/sst2") == 2

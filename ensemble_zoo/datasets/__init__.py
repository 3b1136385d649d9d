"""Datasets as `tf.data.Dataset`s (which `fit` accepts on every backend).

`digits` is bundled (built from data inside scikit-learn, no download) and
is what the tests, demos and trained presets use. The others go through
`tensorflow_datasets.load` and need a download or a prepared `data_dir`.

Example:

```python
import ensemble_zoo

train = ensemble_zoo.datasets.load("digits", "train", batch_size=32)
images, labels = next(iter(train))  # (32, 8, 8, 1) float32, (32,) int32
```

`arithmetic` (a module: `ez.datasets.arithmetic.load_questions(split)`)
is the bundled text task with checkable answers of the language-model
presets (two-number sums; see its docstring).

The trained digits presets carry an image converter (like every
keras-hub task): their `predict`, `evaluate` and `predict_uncertainty`
take raw images (`raw=True`: the digits' 0-16 pixel scale, any size),
while calling the model, `model(images)`, takes the [0, 1] images.
"""

from ensemble_zoo.datasets import arithmetic
from ensemble_zoo.datasets import digit_captions
from ensemble_zoo.datasets import digits as _digits
from ensemble_zoo.datasets.tfds_datasets import TFDS_SPLITS as _TFDS_SPLITS
from ensemble_zoo.datasets.tfds_datasets import load_tfds as _load_tfds
from ensemble_zoo.utils.validation import is_integer

OOD_LABEL = -1


def list_datasets():
    """Names accepted by `load`: the bundled one first, then tfds names."""
    return [_digits.NAME] + list(_TFDS_SPLITS)


def _check_name(name):
    if name not in list_datasets():
        raise ValueError(f"Unknown dataset {name!r}; valid names: {', '.join(list_datasets())}.")


def splits(name):
    """The split names of dataset `name`."""
    _check_name(name)
    if name == _digits.NAME:
        return list(_digits.SPLITS)
    meta = ("kind", "features", "num_classes")
    return [s for s in _TFDS_SPLITS[name] if s not in meta]


def num_classes(name):
    """Number of in-distribution classes of dataset `name`."""
    _check_name(name)
    if name == _digits.NAME:
        return len(_digits.IN_DISTRIBUTION_CLASSES)
    return _TFDS_SPLITS[name]["num_classes"]


def load_arrays(name, split, raw=False):
    """One split of a bundled dataset as NumPy `(images, labels)` arrays.

    Args:
        name: str, a bundled dataset (`"digits"`).
        split: str, one of `splits(name)`.
        raw: bool. `False` (default): images scaled to [0, 1], what the
            models take when called directly. `True`: images on the
            dataset's raw pixel scale (digits: ink counts 0-16), what the
            trained presets' `predict` takes (their image converter
            rescales).

    Example:

    ```python
    import ensemble_zoo as ez

    x, y = ez.datasets.load_arrays("digits", "test")
    raw, _ = ez.datasets.load_arrays("digits", "test", raw=True)
    assert raw.max() == 16.0 and (raw / 16 == x).all()
    ```
    """
    _check_name(name)
    if name != _digits.NAME:
        raise ValueError(
            f"load_arrays only serves bundled datasets ({_digits.NAME!r}); "
            f"use load({name!r}, ...) for tfds datasets."
        )
    if not isinstance(raw, bool):
        raise TypeError(f"`raw` must be a bool; got {raw!r}.")
    return _digits.load_arrays(split, raw=raw)


def image_preprocessor(name):
    """The keras-hub image preprocessor of the presets trained on `name`.

    For `"digits"`: a `keras_hub.models.ViTImageClassifierPreprocessor`
    whose `ViTImageConverter` resizes raw images to 8x8 and divides by 16
    (the digits' raw 0-16 scale to [0, 1]). Give it to a model trained
    on the [0, 1] digits when building or loading it (`preprocessor=`; a
    built model takes no new sub-layers) and its `predict` takes raw
    images of any size, as the shipped presets' does.

    Example:

    ```python
    import ensemble_zoo as ez

    model = ez.models.EnsembleClassifier.from_preset(
        "vit_tiny_digits", preprocessor=ez.datasets.image_preprocessor("digits")
    )
    raw, _ = ez.datasets.load_arrays("digits", "test", raw=True)
    model.predict(raw[:4], verbose=0).shape  # (4, 1, 8)
    ```
    """
    _check_name(name)
    if name != _digits.NAME:
        raise ValueError(
            f"image_preprocessor serves the bundled dataset ({_digits.NAME!r}); got {name!r}."
        )
    return _digits.image_preprocessor(_digits.IMAGE_SHAPE[:2])


def load(
    name,
    split,
    batch_size=None,
    shuffle=False,
    seed=0,
    image_shape=None,
    preprocessor=None,
    data_dir=None,
    download=True,
    raw=False,
):
    """Loads one split of a dataset as a `tf.data.Dataset` of `(x, label)`.

    Args:
        name: str, one of `list_datasets()`: `"digits"` (bundled),
            `"cifar10"`, `"cifar100"`, `"svhn_cropped"`, `"glue/sst2"`.
        split: str, one of `"train"`, `"validation"`, `"test"`,
            `"near_ood"`, `"far_ood"` (and `"test_shifted"` for digits;
            `glue/sst2` has no OOD splits). OOD splits have label -1.
        batch_size: optional int. If given, the dataset is batched (the last
            batch may be smaller: nothing is dropped).
        shuffle: bool, shuffle the examples (reshuffled each epoch).
        seed: int, the shuffle seed.
        image_shape: optional `(height, width, channels)`. Images are scaled
            to [0, 1] floats, converted between grey and RGB, and resized to
            it. The bundled digits are `(8, 8, 1)` and only that shape is
            accepted for them.
        preprocessor: optional callable mapped over `(x, label)` pairs'
            `x`, e.g. a keras-hub `TextClassifierPreprocessor` for
            `glue/sst2`.
        data_dir: optional tfds data directory.
        download: bool, let tfds download and prepare missing data.
        raw: bool, digits only: images on the raw 0-16 pixel scale (what
            the trained presets' `predict` takes; see `load_arrays`).

    Returns:
        A `tf.data.Dataset`.
    """
    import tensorflow as tf

    _check_name(name)
    if batch_size is not None and (not is_integer(batch_size) or batch_size < 1):
        raise ValueError(f"`batch_size` must be a positive int or None; got {batch_size!r}.")
    if name == _digits.NAME:
        if image_shape is not None and tuple(image_shape) != _digits.IMAGE_SHAPE:
            raise ValueError(
                f"The bundled digits have image_shape {_digits.IMAGE_SHAPE}; "
                f"got image_shape={tuple(image_shape)}."
            )
        if not isinstance(raw, bool):
            raise TypeError(f"`raw` must be a bool; got {raw!r}.")
        x, y = _digits.load_arrays(split, raw=raw)
        ds = tf.data.Dataset.from_tensor_slices((x, y))
    else:
        if raw:
            raise ValueError(
                f"`raw=True` serves the bundled {_digits.NAME!r} dataset; "
                f"{name!r} images are scaled to [0, 1]."
            )
        if image_shape is not None and len(tuple(image_shape)) != 3:
            raise ValueError(
                f"`image_shape` must be (height, width, channels); got {image_shape!r}."
            )
        ds = _load_tfds(name, split, image_shape, data_dir=data_dir, download=download)
    if preprocessor is not None:
        ds = ds.map(lambda x, y: (preprocessor(x), y), num_parallel_calls=tf.data.AUTOTUNE)
    if shuffle:
        ds = ds.shuffle(4096, seed=seed, reshuffle_each_iteration=True)
    if batch_size is not None:
        ds = ds.batch(batch_size)
    return ds.prefetch(tf.data.AUTOTUNE)

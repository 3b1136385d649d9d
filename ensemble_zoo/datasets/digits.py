"""The bundled dataset: handwritten digits with near- and far-OOD splits.

Built from data that ships inside scikit-learn (nothing is downloaded):

- In-distribution: the UCI optical-recognition digits (`load_digits`,
  1,797 images of 8x8 pixels) of the classes 0-7, split per class
  (stratified, fixed seed) into 60 % train, 20 % validation, 20 % test.
- Near-OOD: every image of the held-out digits 8 and 9 (semantic shift,
  same sensor and style).
- Far-OOD: 8x8 patches of natural photographs (scikit-learn's two sample
  images), 4x4 average-pooled from random 32x32 grey crops and min-max
  scaled like the digits (covariate and semantic shift).
- Test under shift: the in-distribution test images with additive Gaussian
  pixel noise (std 0.2) clipped to [0, 1], labels kept.

Images are float32 in [0, 1] with shape `(8, 8, 1)`; labels are int32.
OOD splits carry the label -1 (no in-distribution class).

Raw images (`load_arrays(split, raw=True)`) are on the UCI digits' own
pixel scale, `RAW_SCALE` times the [0, 1] images: ink counts 0-16 (the
number of set pixels in each 4x4 block of a 32x32 bitmap, as
`sklearn.datasets.load_digits().images` holds them). The in-distribution
and near-OOD images are integers there (uint8 without loss); the far-OOD
patches and the shifted test images are continuous on the same scale.
The trained presets' image converter divides by `RAW_SCALE`, so `predict`
on raw images equals the model on the [0, 1] images bit for bit (16 is a
power of two: both scalings are exact in floating point).
"""

import numpy as np

NAME = "digits"
IN_DISTRIBUTION_CLASSES = tuple(range(8))
NEAR_OOD_CLASSES = (8, 9)
IMAGE_SHAPE = (8, 8, 1)
SPLITS = ("train", "validation", "test", "test_shifted", "near_ood", "far_ood")
SEED = 20261121
NUM_FAR_OOD = 360
SHIFT_NOISE_STD = 0.2
OOD_LABEL = -1
#: Raw digits pixels are ink counts 0-16: raw = RAW_SCALE * [0, 1] image.
RAW_SCALE = 16


def _digits():
    from sklearn.datasets import load_digits

    data = load_digits()
    images = (data.images / 16.0).astype("float32")[..., None]
    return images, data.target.astype("int32")


def _in_distribution_indices(labels):
    """Stratified 60/20/20 split of the in-distribution classes."""
    rng = np.random.default_rng(SEED)
    parts = {"train": [], "validation": [], "test": []}
    for c in IN_DISTRIBUTION_CLASSES:
        idx = rng.permutation(np.flatnonzero(labels == c))
        n_train = int(round(0.6 * len(idx)))
        n_val = int(round(0.2 * len(idx)))
        parts["train"].append(idx[:n_train])
        parts["validation"].append(idx[n_train : n_train + n_val])
        parts["test"].append(idx[n_train + n_val :])
    # Interleave classes deterministically (no class-sorted order).
    return {k: np.sort(np.concatenate(v)) for k, v in parts.items()}


def _far_ood():
    from sklearn.datasets import load_sample_images

    rng = np.random.default_rng(SEED + 1)
    photos = [p.astype("float32").mean(axis=-1) for p in load_sample_images().images]
    patches = []
    for i in range(NUM_FAR_OOD):
        photo = photos[i % len(photos)]
        top = rng.integers(0, photo.shape[0] - 32)
        left = rng.integers(0, photo.shape[1] - 32)
        crop = photo[top : top + 32, left : left + 32]
        small = crop.reshape(8, 4, 8, 4).mean(axis=(1, 3))
        low, high = small.min(), small.max()
        small = (small - low) / max(high - low, 1e-6)
        patches.append(small)
    images = np.stack(patches).astype("float32")[..., None]
    return images, np.full((NUM_FAR_OOD,), OOD_LABEL, dtype="int32")


def load_arrays(split, raw=False):
    """Returns `(images, labels)` NumPy arrays of one split of `digits`.

    With `raw=True` the images are on the raw 0-16 pixel scale (float32,
    `RAW_SCALE` times the [0, 1] images), which the trained presets'
    `predict` takes.
    """
    if split not in SPLITS:
        raise ValueError(
            f"Unknown split {split!r} for dataset 'digits'; valid splits: {', '.join(SPLITS)}."
        )
    if raw:
        x, y = load_arrays(split)
        return x * np.float32(RAW_SCALE), y
    if split == "far_ood":
        return _far_ood()
    images, labels = _digits()
    if split == "near_ood":
        mask = np.isin(labels, NEAR_OOD_CLASSES)
        return images[mask], np.full((int(mask.sum()),), OOD_LABEL, dtype="int32")
    base_split = "test" if split == "test_shifted" else split
    idx = _in_distribution_indices(labels)[base_split]
    x, y = images[idx], labels[idx]
    if split == "test_shifted":
        rng = np.random.default_rng(SEED + 2)
        noise = rng.normal(0.0, SHIFT_NOISE_STD, size=x.shape)
        x = np.clip(x + noise, 0.0, 1.0).astype("float32")
    return x, y


def image_converter(image_size=(8, 8)):
    """The image converter of the trained digits presets.

    A `keras_hub.layers.ViTImageConverter` that resizes raw images to
    `image_size` (bilinear, cropping to the aspect ratio, as keras-hub's
    converters do) and divides their pixel values by `RAW_SCALE` (raw
    0-16 ink counts to [0, 1]).
    """
    import keras_hub

    return keras_hub.layers.ViTImageConverter(
        image_size=tuple(image_size), scale=1.0 / RAW_SCALE, name="digits_image_converter"
    )


def image_preprocessor(image_size=(8, 8)):
    """The preprocessor of the trained digits presets:
    `keras_hub.models.ViTImageClassifierPreprocessor` around
    `image_converter(image_size)`."""
    import keras_hub

    return keras_hub.models.ViTImageClassifierPreprocessor(
        image_converter=image_converter(image_size), name="digits_preprocessor"
    )

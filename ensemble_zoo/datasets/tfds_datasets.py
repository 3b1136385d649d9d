"""Named `tensorflow_datasets` datasets with the zoo's split names.

Every dataset is exposed with the same split names as the bundled one:
`train`, `validation`, `test`, `near_ood`, `far_ood`. Datasets without an
official validation split hold out the last 10 % of `train`. OOD splits are
the test splits of other datasets (CIFAR-10 <-> CIFAR-100 near, SVHN far),
as in the OOD literature; their labels are replaced by -1.
"""


def _image_splits(name, near_ood, far_ood, num_classes):
    """An image dataset's splits: the last 10 % of `train` held out for
    validation, the OOD splits the test splits of `near_ood` and
    `far_ood`."""
    return {
        "kind": "image",
        "train": (name, "train[:90%]"),
        "validation": (name, "train[90%:]"),
        "test": (name, "test"),
        "near_ood": (near_ood, "test"),
        "far_ood": (far_ood, "test"),
        "num_classes": num_classes,
    }


TFDS_SPLITS = {
    "cifar10": _image_splits("cifar10", "cifar100", "svhn_cropped", 10),
    "cifar100": _image_splits("cifar100", "cifar10", "svhn_cropped", 100),
    "svhn_cropped": _image_splits("svhn_cropped", "cifar10", "cifar100", 10),
    # GLUE's test labels are hidden, so the official validation split is
    # the test split and validation is held out from train.
    "glue/sst2": {
        "kind": "text",
        "features": ("sentence", "label"),
        "train": ("glue/sst2", "train[:95%]"),
        "validation": ("glue/sst2", "train[95%:]"),
        "test": ("glue/sst2", "validation"),
        "num_classes": 2,
    },
}

OOD_LABEL = -1


def _image_preprocessing(image_shape):
    import tensorflow as tf

    def preprocess(image, label):
        image = tf.cast(image, tf.float32) / 255.0
        if image_shape is not None:
            height, width, channels = image_shape
            if image.shape[-1] == 3 and channels == 1:
                image = tf.image.rgb_to_grayscale(image)
            elif image.shape[-1] == 1 and channels == 3:
                image = tf.image.grayscale_to_rgb(image)
            if tuple(image.shape[:2]) != (height, width):
                image = tf.image.resize(image, (height, width), antialias=True)
                image = tf.clip_by_value(image, 0.0, 1.0)
        return image, label

    return preprocess


def load_tfds(name, split, image_shape=None, data_dir=None, download=True):
    """Loads one split as an unbatched `tf.data.Dataset` of (x, label)."""
    import tensorflow as tf
    import tensorflow_datasets as tfds

    spec = TFDS_SPLITS[name]
    if split not in spec:
        valid = [s for s in spec if s not in ("kind", "features", "num_classes")]
        raise ValueError(
            f"Unknown split {split!r} for dataset {name!r}; valid splits: {', '.join(valid)}."
        )
    source, tfds_split = spec[split]
    # GLUE has no supervised keys: read its feature dict and pick the pair.
    features = spec.get("features")
    ds = tfds.load(
        source,
        split=tfds_split,
        as_supervised=features is None,
        data_dir=data_dir,
        download=download,
    )
    if features is not None:
        x_key, y_key = features
        ds = ds.map(lambda example: (example[x_key], example[y_key]))
    if split.endswith("_ood"):
        ds = ds.map(lambda x, y: (x, tf.constant(OOD_LABEL, tf.int64)))
    if spec["kind"] == "image":
        ds = ds.map(_image_preprocessing(image_shape), num_parallel_calls=tf.data.AUTOTUNE)
    return ds

"""Cached training of a loss-prediction head ("Pretrained Visual
Uncertainties", §3.3.3).

With the backbone and the classifier frozen, the head only ever sees the
pooled embeddings. `cache_embeddings` runs the frozen backbone once over
`epochs` passes of a (possibly augmented, shuffled) dataset and appends the
embeddings and labels to an HDF5 file in chunks, so the cache can exceed
memory; `train_head_from_cache` then trains the head on those rows in the
same order and batches, re-applying the frozen classifier to get the loss
targets. The losses are not cached (the paper's code does not cache them
either). The result equals training on the fly with the same batches.
"""

import os

import h5py
import keras
import numpy as np

from ensemble_zoo.models.loss_prediction.loss_prediction_image_classifier import (
    loss_prediction_objective,
)


def _check_frozen(model):
    if not (model.freeze_backbone and model.freeze_classifier):
        raise ValueError(
            "Cached training needs a model with freeze_backbone=True and "
            "freeze_classifier=True (otherwise the embeddings change while "
            "training)."
        )


class _Embedder(keras.Model):
    """The frozen model's pooled embedding, as a compiled predict step."""

    def __init__(self, model, name="embedder", **kwargs):
        super().__init__(name=name, **kwargs)
        self.source = model

    def call(self, images):
        return self.source.embed(images, training=False)


def cache_embeddings(model, dataset, path, epochs=1, chunk_rows=4096, jit_compile="auto"):
    """Writes the frozen model's embeddings of `epochs` passes over `dataset`.

    Args:
        model: a `LossPredictionImageClassifier` with a frozen backbone and
            classifier.
        dataset: an iterable of `(images, labels)` batches that can be
            iterated `epochs` times (e.g. a `tf.data.Dataset`, reshuffled
            and re-augmented on every pass).
        path: str, the HDF5 file to write (`.h5`).
        epochs: int, the number of passes to record.
        chunk_rows: int, the HDF5 chunk size in rows.
        jit_compile: passed to `compile` of the embedding step.

    Returns:
        dict with `"rows"` and `"batches"` written.
    """
    _check_frozen(model)
    path = os.fspath(path)
    if not path.endswith(".h5"):
        raise ValueError(f"The embedding cache is an HDF5 file ending in '.h5'; got {path!r}.")
    dim = model.embedding_dim
    embedder = _Embedder(model)
    embedder.compile(jit_compile=jit_compile)
    with h5py.File(path, "w") as f:
        embeddings = f.create_dataset(
            "embeddings",
            shape=(0, dim),
            maxshape=(None, dim),
            dtype="float32",
            chunks=(min(chunk_rows, 4096), dim),
        )
        labels = f.create_dataset(
            "labels", shape=(0,), maxshape=(None,), dtype="int64", chunks=(chunk_rows,)
        )
        batch_sizes = []
        for _ in range(epochs):
            for images, batch_labels in dataset:
                e = np.asarray(embedder.predict_on_batch(np.asarray(images)))
                n = e.shape[0]
                start = embeddings.shape[0]
                embeddings.resize(start + n, axis=0)
                labels.resize(start + n, axis=0)
                embeddings[start:] = e
                labels[start:] = np.asarray(batch_labels).reshape(-1)
                batch_sizes.append(n)
        f.create_dataset("batch_sizes", data=np.asarray(batch_sizes, dtype="int64"))
        f.attrs["embedding_dim"] = dim
        f.attrs["epochs"] = epochs
        return {"rows": int(embeddings.shape[0]), "batches": len(batch_sizes)}


def _batches(path):
    with h5py.File(path, "r") as f:
        sizes = f["batch_sizes"][()]
        start = 0
        for size in sizes:
            yield f["embeddings"][start : start + size], f["labels"][start : start + size]
            start += size


class _HeadTrainer(keras.Model):
    """The frozen classifier and the trainable head on cached embeddings."""

    def __init__(self, model, name="head_trainer", **kwargs):
        super().__init__(name=name, **kwargs)
        self.source = model

    def call(self, embeddings, training=None):
        return self.source.call_on_embeddings(embeddings)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        source = self.source
        return loss_prediction_objective(
            y,
            y_pred["logits"],
            y_pred["uncertainty"],
            0.0,
            source.uncertainty_weight,
            source.uncertainty_loss,
            source.margin,
        )


def train_head_from_cache(
    model, path, optimizer=None, jit_compile="auto", verbose=0, callbacks=None
):
    """Trains `model`'s uncertainty head on an embedding cache, one pass.

    Every cached batch is one optimizer step, in the recorded order, so
    the head ends where training on the fly over the same batches would
    (the backbone is never run).

    Args:
        model: the `LossPredictionImageClassifier` the cache was made with.
        path: str, a file written by `cache_embeddings`.
        optimizer: a Keras optimizer; defaults to `AdamW(1e-3)`.
        jit_compile: passed to `compile`.
        verbose: passed to `fit`.
        callbacks: optional list of Keras callbacks, passed to `fit`.

    Returns:
        the Keras `History` of the pass.
    """
    _check_frozen(model)
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ValueError(f"Embedding cache {path!r} does not exist.")
    try:
        with h5py.File(path, "r") as f:
            missing = [k for k in ("embeddings", "labels", "batch_sizes") if k not in f]
            if missing:
                raise ValueError(f"Embedding cache {path!r} lacks {missing}.")
            dim = int(f["embeddings"].shape[1])
            steps = int(f["batch_sizes"].shape[0])
    except OSError as error:
        raise ValueError(f"Embedding cache {path!r} is not a readable HDF5 file: {error}") from None
    if dim != model.embedding_dim:
        raise ValueError(
            f"Embedding cache {path!r} holds {dim}-d embeddings; the model's are "
            f"{model.embedding_dim}-d."
        )
    trainer = _HeadTrainer(model)
    trainer.compile(optimizer=optimizer or keras.optimizers.AdamW(1e-3), jit_compile=jit_compile)
    return trainer.fit(
        _batches(path),
        epochs=1,
        steps_per_epoch=steps,
        shuffle=False,
        verbose=verbose,
        callbacks=callbacks,
    )

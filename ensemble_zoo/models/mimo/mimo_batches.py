"""MIMO training batches (Havasi et al., ICLR 2021, §2 and App. B)."""

import keras
import numpy as np

from ensemble_zoo.utils.validation import check_positive_int
from ensemble_zoo.utils.validation import check_rate


def mimo_batch(images, labels, num_members, input_repetition, batch_repetition, rng):
    """One MIMO training batch from a batch of `n` images and labels.

    The batch is repeated `batch_repetition` times and shuffled (batch
    repetition); then, for each member, the first `(1 - input_repetition)`
    share of the positions is shuffled again independently, while the
    remaining `input_repetition` share shows every member the same
    example (input repetition: the members share features).

    Returns:
        `(stacked, member_labels)`: images `(n * batch_repetition, ...,
        channels * num_members)`, member `m`'s image in channels
        `[m * channels, (m + 1) * channels)`, and labels `(n *
        batch_repetition, num_members)`.
    """
    images, labels = np.asarray(images), np.asarray(labels)
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    order = rng.permutation(np.tile(np.arange(len(images)), batch_repetition))
    independent = int(len(order) * (1.0 - input_repetition))
    orders = []
    for _ in range(num_members):
        member = order.copy()
        member[:independent] = rng.permutation(member[:independent])
        orders.append(member)
    stacked = np.concatenate([images[o] for o in orders], axis=-1)
    return stacked, np.stack([labels[o] for o in orders], axis=1)


class MIMOBatches(keras.utils.PyDataset):
    """A `PyDataset` of MIMO training batches for `keras.Model.fit`.

    Wraps arrays `(x, y)` (shuffled each epoch, `batch_size` examples per
    batch before repetition) or an iterable of `(images, labels)` batches
    with a length, such as a batched `tf.data.Dataset` (read in order, one
    pass per epoch), and turns every batch into `mimo_batch(...)`.

    Args:
        x: images array, or a batched dataset of `(images, labels)`.
        y: labels array, or `None` with a dataset.
        num_members: int.
        input_repetition: float in [0, 1], Havasi et al.'s `rho`.
        batch_repetition: int >= 1.
        batch_size: int, for arrays. Defaults to `32`.
        seed: optional int.
    """

    def __init__(
        self, x, y, num_members, input_repetition, batch_repetition, batch_size=32, seed=None
    ):
        super().__init__()
        self.num_members = check_positive_int(num_members, "num_members")
        self.input_repetition = check_rate(input_repetition, "input_repetition")
        self.batch_repetition = check_positive_int(batch_repetition, "batch_repetition")
        self.batch_size = check_positive_int(batch_size, "batch_size")
        self.rng = np.random.default_rng(seed)
        self.arrays = y is not None
        if self.arrays:
            self.x, self.y = np.asarray(x), np.asarray(y)
            if len(self.x) != len(self.y):
                raise ValueError(
                    f"`x` and `y` must have the same length; got {len(self.x)} and {len(self.y)}."
                )
            self.order = self.rng.permutation(len(self.x))
        else:
            try:
                self.length = len(x)
            except TypeError:
                raise TypeError(
                    "MIMO training needs arrays `(x, y)` or a batched dataset of "
                    "`(images, labels)` with a known length (e.g. tf.data)."
                ) from None
            self.dataset, self.iterator = x, None

    def __len__(self):
        if self.arrays:
            return int(np.ceil(len(self.x) / self.batch_size))
        return self.length

    def __getitem__(self, index):
        if self.arrays:
            rows = self.order[index * self.batch_size : (index + 1) * self.batch_size]
            images, labels = self.x[rows], self.y[rows]
        else:
            if self.iterator is None:
                self.iterator = iter(self.dataset)
            images, labels = (np.asarray(v) for v in next(self.iterator))
        return mimo_batch(
            images, labels, self.num_members, self.input_repetition, self.batch_repetition, self.rng
        )

    def on_epoch_end(self):
        if self.arrays:
            self.order = self.rng.permutation(len(self.x))
        else:
            self.iterator = None

"""Static adaptive-average-pooling matrices for tile ensembles."""

import keras
import numpy as np
from keras import ops


def adaptive_windows(size, tiles):
    """`[start, end)` of each of `tiles` adaptive-average-pooling windows
    over `size` positions (PyTorch's rule: floor / ceil bounds, windows may
    overlap when `tiles` does not divide `size`)."""
    return [
        (int(np.floor(i * size / tiles)), int(np.ceil((i + 1) * size / tiles)))
        for i in range(tiles)
    ]


def tile_pooling_matrix(grid, grid_size, class_token=False):
    """`(tiles, positions)` matrix averaging a feature grid into tiles.

    Args:
        grid: `(height, width)` of the feature grid (row-major positions).
        grid_size: int s, the number of tiles per side (s x s tiles).
        class_token: bool. If `True`, position 0 is a class token that
            precedes the grid and joins every tile's average (so that one
            tile reproduces a mean over all tokens).

    Returns:
        float32 array `(s * s, [1 +] height * width)`; row `i * s + j` is
        tile `(i, j)`.
    """
    height, width = grid
    offset = 1 if class_token else 0
    rows = []
    for r0, r1 in adaptive_windows(height, grid_size):
        for c0, c1 in adaptive_windows(width, grid_size):
            row = np.zeros((offset + height * width,), np.float64)
            cells = [offset + r * width + c for r in range(r0, r1) for c in range(c0, c1)]
            row[cells] = 1.0
            if class_token:
                row[0] = 1.0
            rows.append(row / row.sum())
    return np.stack(rows).astype("float32")


@keras.saving.register_keras_serializable(package="ensemble_zoo")
class TilePooling(keras.layers.Layer):
    """Averages a feature grid into `grid_size x grid_size` tiles.

    Args:
        grid: `(height, width)` of the feature grid.
        grid_size: int s, tiles per side.
        class_token: bool, position 0 is a class token that joins every
            tile (see `tile_pooling_matrix`).
        **kwargs: other `keras.layers.Layer` arguments.

    Call: features `(batch, height, width, channels)` or tokens
    `(batch, [1 +] height * width, channels)` -> tiles
    `(batch, grid_size**2, channels)`, in the layer's compute dtype.
    """

    def __init__(self, grid, grid_size, class_token=False, **kwargs):
        super().__init__(**kwargs)
        self.grid = tuple(int(g) for g in grid)
        self.grid_size = int(grid_size)
        self.class_token = bool(class_token)
        self._matrix = tile_pooling_matrix(self.grid, self.grid_size, self.class_token)

    def call(self, features):
        channels = features.shape[-1]
        features = ops.reshape(features, (-1, self._matrix.shape[1], channels))
        matrix = ops.convert_to_tensor(self._matrix, self.compute_dtype)
        return ops.einsum("tp,bpc->btc", matrix, ops.cast(features, self.compute_dtype))

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self._matrix.shape[0], input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            {"grid": list(self.grid), "grid_size": self.grid_size, "class_token": self.class_token}
        )
        return config

"""Static adaptive-average-pooling matrices for tile ensembles."""

import numpy as np


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

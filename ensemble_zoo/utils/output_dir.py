"""Checked creation of output directories."""

import os
import tempfile


def prepare_output_dir(path):
    """Creates `path` if needed and checks that files can be written there.

    Raises:
        ValueError: naming the directory and the reason when it cannot be
            created or written to.
    """
    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"Output directory {path!r} exists and is not a directory.")
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        raise ValueError(
            f"Cannot write to output directory {path!r}: {error.strerror or error}."
        ) from None
    return path

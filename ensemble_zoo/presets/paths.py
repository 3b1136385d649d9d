"""Where the shipped preset directories are (import-free: the
`ensemble-zoo` command reads it without importing Keras)."""

import pathlib


def preset_root():
    """The directory that holds the shipped preset directories."""
    package_dir = pathlib.Path(__file__).resolve().parent.parent
    installed = package_dir / "_preset_files"
    if installed.is_dir():
        return installed
    return package_dir.parent / "presets"

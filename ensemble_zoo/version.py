"""The package version: one source, read by `ensemble_zoo.__version__` and,
through `[tool.hatch.version]` in `pyproject.toml`, by the built wheel's
metadata. A leaf module (it imports nothing), as keras-hub's `version.py`,
so build tools and `ensemble_zoo` itself can read it without importing
Keras or a backend."""

__version__ = "0.1.0"


def version():
    """The package version string, e.g. `"0.1.0"`."""
    return __version__

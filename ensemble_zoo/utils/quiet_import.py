"""Importing TensorFlow without its start-up lines.

TensorFlow's C++ runtime writes lines such as "oneDNN custom operations
are on" and "Could not find cuda drivers" straight to file descriptor 2
when it loads, before `TF_CPP_MIN_LOG_LEVEL` or absl logging take effect,
and keras-hub imports TensorFlow whenever it is installed, so users saw
them under every backend. `import_quietly` runs the imports with fd 2
redirected to a temporary file, then writes back every line except those
known start-up messages: warnings and errors still reach the user.

On a machine without a GPU, TensorFlow also logs an error, "failed call
to cuInit: ... CUDA error", when it first lists its devices (at its first
operation, under any Keras backend). `import_quietly` lists them inside
the same redirection and drops that line when TensorFlow has just said
that it found no CUDA driver; with a driver, the error is kept.
"""

import contextlib
import importlib
import os
import re
import sys
import tempfile

#: The start-up lines dropped; anything else is written back.
NOISE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called"
    r" are written to STDERR"
    r"|[IW]\d{4} [\d:. ]+\d+ (port\.cc|cudart_stub\.cc|cuda_executor\.cc"
    r"|cpu_feature_guard\.cc|cuda_dnn\.cc|cuda_fft\.cc|cuda_blas\.cc)"
    r":\d+\] .*"
    r"|To enable the following instructions: .*rebuild TensorFlow with the"
    r" appropriate compiler flags\."
    # SentencePiece loading a model without a normalization table (the
    # identity normalization of a character-level tokenizer).
    r"|normalizer\.cc\(\d+\) LOG\(INFO\) precompiled_charsmap is empty\."
    r" use identity normalization\.)$"
)


#: TensorFlow's cuInit error, dropped only after `NO_DRIVER` in the same
#: output (no driver: nothing the user can fix, nothing the user asked for).
NO_GPU_ERROR = re.compile(r"^E\d{4} [\d:. ]+\d+ cuda_platform\.cc:\d+\] failed call to cuInit: .*$")
NO_DRIVER = re.compile(r"cudart_stub\.cc:\d+\] Could not find cuda drivers")


def _kept_lines(text):
    """The lines of captured stderr that reach the user."""
    lines = text.splitlines(keepends=True)
    no_driver = any(NO_DRIVER.search(line) for line in lines)
    return [
        line
        for line in lines
        if not NOISE.match(line.rstrip("\n"))
        and not (no_driver and NO_GPU_ERROR.match(line.rstrip("\n")))
    ]


@contextlib.contextmanager
def quiet_stderr():
    """Runs the block with file descriptor 2 captured, then writes back
    every line but the known start-up and information lines (`NOISE`).
    Output of the block reaches stderr when it ends."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, AttributeError, ValueError):  # no usable fd 2
        yield
        return
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            text = captured.read().decode("utf-8", "replace")
            kept = _kept_lines(text)
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


def import_quietly(*names):
    """Imports the modules `names` (e.g. `"tensorflow"`) without
    TensorFlow's start-up lines; modules already imported cost nothing."""
    if all(name in sys.modules for name in names):
        return
    with quiet_stderr():
        for name in names:
            importlib.import_module(name)
        tensorflow = sys.modules.get("tensorflow")
        if tensorflow is not None:
            # Device discovery (and its cuInit line) now, not at the
            # first operation, outside this redirection. Lists the
            # physical devices only: no GPU memory is claimed.
            tensorflow.config.list_physical_devices()


#: The package each Keras backend imports, and the extra that installs it.
BACKEND_PACKAGES = {
    "jax": ("jax", "jax"),
    "tensorflow": ("tensorflow", "tensorflow"),
    "torch": ("torch", "torch"),
}


class MissingBackendError(ImportError):
    """The Keras backend selected (`KERAS_BACKEND`, else
    `~/.keras/keras.json`) is not installed."""


def _selected_backend():
    """The backend Keras selects: `KERAS_BACKEND`, else the `backend` of
    `keras.json` under `KERAS_HOME` (default `~/.keras`), else TensorFlow."""
    import json

    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(home, "keras.json")) as f:
            return json.load(f).get("backend", "tensorflow")
    except (OSError, ValueError, AttributeError):
        return "tensorflow"


def missing_backend_error(error):
    """A `MissingBackendError` that names the extra to install when `error`
    (a `ModuleNotFoundError` raised while importing Keras) is the backend
    Keras selected; None for any other missing module."""
    backend = _selected_backend()
    package, extra = BACKEND_PACKAGES.get(backend, (None, None))
    if package is None or (error.name or "").split(".")[0] != package:
        return None
    other = "tensorflow" if backend == "jax" else "jax"
    return MissingBackendError(
        f"KERAS_BACKEND={backend} needs the {package!r} package, which is not "
        f"installed. Install it with the {extra!r} extra: "
        f'pip install "ensemble_zoo[{extra}]" (in a source checkout: '
        f'pip install -e ".[{extra}]"), or pick an installed backend, '
        f"e.g. KERAS_BACKEND={other}."
    )

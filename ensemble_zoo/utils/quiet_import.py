"""Importing TensorFlow without its start-up lines.

TensorFlow's C++ runtime writes lines such as "oneDNN custom operations
are on" and "Could not find cuda drivers" straight to file descriptor 2
when it loads, before `TF_CPP_MIN_LOG_LEVEL` or absl logging take effect,
and keras-hub imports TensorFlow whenever it is installed, so users saw
them under every backend. `import_quietly` runs the imports with fd 2
redirected to a temporary file, then writes back every line except those
known start-up messages: warnings and errors still reach the user.
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
    r" appropriate compiler flags\.)$"
)


@contextlib.contextmanager
def _filtered_stderr():
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
            kept = [
                line for line in text.splitlines(keepends=True)
                if not NOISE.match(line.rstrip("\n"))
            ]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


def import_quietly(*names):
    """Imports the modules `names` (e.g. `"tensorflow"`) without
    TensorFlow's start-up lines; modules already imported cost nothing."""
    if all(name in sys.modules for name in names):
        return
    with _filtered_stderr():
        for name in names:
            importlib.import_module(name)

"""Progress bars (tqdm) that can be switched off.

Bars are drawn only where they can redraw in place: a terminal or a
Jupyter notebook. When stderr is a file or a pipe (CI logs, `| tee`),
carriage-return updates of nested bars become lines of junk, so no bar is
drawn there.
"""

import sys


def interactive_stderr():
    """Whether stderr can show a live progress bar: a TTY or a notebook."""
    if "ipykernel" in sys.modules:
        return True
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # a closed stream
        return False


def progress_bar(iterable, desc=None, total=None, enable=True):
    """Wraps `iterable` in a tqdm bar on stderr when `enable` is true and
    stderr is interactive; otherwise returns `iterable` unchanged."""
    if not enable or not interactive_stderr():
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, total=total, leave=False, dynamic_ncols=True)
